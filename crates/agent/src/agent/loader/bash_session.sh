# A session's bash run: the program runs as `bash main.sh` would, in the working
# directory and with the exported variables the session's previous bash run ended with
# (kept in /tmp/.bash-session-env and -cwd, saved when the program exits, with builtins
# only; a program that sets its own EXIT trap keeps them from being saved).
__sandbox_state=/tmp/.bash-session
if [ -r "$__sandbox_state-env" ]; then . "$__sandbox_state-env"; fi
if [ -r "$__sandbox_state-cwd" ]; then
    IFS= read -r __sandbox_dir <"$__sandbox_state-cwd" && cd -- "$__sandbox_dir" 2>/dev/null
    unset __sandbox_dir
fi
trap '__sandbox_status=$?; export -p >"$__sandbox_state-env"; pwd >"$__sandbox_state-cwd"; exit "$__sandbox_status"' EXIT
__sandbox_program=$1
shift
BASH_ARGV0=$__sandbox_program
. "$__sandbox_program"
