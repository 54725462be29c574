#!/usr/bin/env bash
# Where the CPU time of making, using and destroying one sandbox goes: samples the
# runner and every process it starts (jail, agent, interpreter) with perf while a burst
# of runs needs a new sandbox each, next to the same interpreter spawned directly.
#
#   cargo build --release -p sandbox-runner
#   crates/bench/profile-creation.sh [python|node|bash] [RUNS] [CONCURRENCY]
#
# Needs root, perf and curl. Loopback only; the runner is stopped at the end.
# Prints CPU milliseconds per run by process name ("exe" is the jail and then the
# agent: both are the runner's binary, executed from /proc/self/exe), the jail's and
# agent's top symbols, and the kernel entry points they spend time in.
set -euo pipefail
cd "$(dirname "$0")/../.."

lang=${1:-python}
runs=${2:-40}
concurrency=${3:-4}
runner=target/release/sandbox-runner
case $lang in
    python) code='print(1)' direct=(/usr/bin/python3 -c 'print(1)') ;;
    node) code='console.log(1)' direct=(/usr/bin/node -e 'console.log(1)') ;;
    bash) code='echo 1' direct=(/usr/bin/bash -c 'echo 1') ;;
    *) echo "usage: $0 [python|node|bash] [RUNS] [CONCURRENCY]" >&2; exit 2 ;;
esac
for tool in perf curl; do
    command -v $tool >/dev/null || { echo "$0: $tool is missing (apt-get install linux-perf curl)" >&2; exit 1; }
done
[[ -x $runner ]] || { echo "$0: build $runner first (cargo build --release -p sandbox-runner)" >&2; exit 1; }

work=$(mktemp -d /tmp/profile-creation.XXXXXX)
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
env -i PATH=/usr/bin:/bin RUST_LOG=warn SANDBOX_RUNNER_TOKEN="$token" \
    "$runner" serve --listen 127.0.0.1:0 --pool-size 8 >"$work/runner.out" &
runner_pid=$!
stop() {
    kill -TERM "$runner_pid" 2>/dev/null && wait "$runner_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap stop EXIT
for _ in $(seq 100); do
    grep -qs listening "$work/runner.out" && break
    sleep 0.1
done
url=$(sed -n 's/^sandbox-runner listening on //p' "$work/runner.out")
[[ -n $url ]] || { echo "$0: the runner did not start" >&2; exit 1; }

burst() {
    local body="{\"lang\":\"$lang\",\"code\":\"$code\"}" i=0
    while ((i < runs)); do
        for _ in $(seq "$concurrency"); do
            curl -sf -o /dev/null -H "Authorization: Bearer $token" \
                -H 'Content-Type: application/json' -d "$body" "$url/run" &
        done
        wait
        i=$((i + concurrency))
    done
}

echo "== direct: CPU ms per run of ${direct[*]}"
perf stat -x, -e task-clock -o "$work/direct.csv" -- env -i PATH=/usr/bin:/bin \
    bash -c 'for _ in $(seq '"$runs"'); do "$@" >/dev/null; done' _ "${direct[@]}"
awk -F, -v n="$runs" '/task-clock/ { printf "  %.2f ms (with the loop'\''s fork)\n", $1 / n }' "$work/direct.csv"

sleep 1 # let the pool fill
echo "== sandboxed: $runs runs of $lang at concurrency $concurrency, every run on a new sandbox"
burst >/dev/null & burst_pid=$!
perf record -q -g -p "$runner_pid" -o "$work/perf.data" -- \
    bash -c "while kill -0 $burst_pid 2>/dev/null; do sleep 0.05; done" 2>/dev/null
wait "$burst_pid" || true
sleep 1 # the last sandboxes are destroyed and remade after their answers

set +o pipefail # the reports below are cut short with head
report() { perf report -i "$work/perf.data" --stdio -g none "$@" 2>/dev/null | grep -v -e '^#' -e '^$'; }
echo "== CPU ms per run, by process"
report --no-children --sort comm -F comm,period |
    awk -v n="$runs" '{ printf "  %-16s %6.2f\n", $1, $2 / 1e6 / n; total += $2 } END { printf "  %-16s %6.2f\n", "total", total / 1e6 / n }'
echo "== jail and agent (exe): top symbols, share of all samples"
report --no-children --comm exe --sort dso,sym | head -15
echo "== jail and agent (exe): kernel entry points and loader, including callees"
report --children --comm exe --sort sym |
    grep -E '__x64_sys_|exc_page_fault|_dl_start_user|jail::(main|inside|build_root)|serve' | head -20
