#!/usr/bin/env python3
"""Runs in a runner's container (deploy/engine-test): POST /run to the runner on
loopback with bash, Python and Node programs, and a Python program that takes more
memory than a sandbox may, which must end killed by the out-of-memory killer. Exits 1
naming the first check that failed."""
import json
import os
import sys
import urllib.request

URL = "http://127.0.0.1:8081/run"
TOKEN = os.environ["SANDBOX_RUNNER_TOKEN"]

CHECKS = [
    ("bash", "echo $((6 * 7)) from bash", lambda r: r["stdout"] == "42 from bash\n"),
    ("python", "print(6 * 7, 'from python')", lambda r: r["stdout"] == "42 from python\n"),
    ("node", "console.log(6 * 7, 'from node')", lambda r: r["stdout"] == "42 from node\n"),
    # 1 GiB against the 256 MiB limit: the sandbox's cgroup, below the container's, stops it.
    ("python", "b = bytearray(1 << 30)\nprint('not stopped')", lambda r: r["oomKilled"] and "not stopped" not in r["stdout"]),
]


def run(lang, code):
    request = urllib.request.Request(
        URL,
        data=json.dumps({"lang": lang, "code": code, "timeoutMs": 20000}).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def main():
    for lang, code, ok in CHECKS:
        result = run(lang, code)
        summary = {k: result[k] for k in ("stdout", "stderr", "exitCode", "oomKilled", "durationMs")}
        if not ok(result):
            print(f"FAIL {lang} {code!r}: {summary}")
            return 1
        print(f"ok {lang} {code.splitlines()[0]!r}: exit {result['exitCode']}, oomKilled {result['oomKilled']}, {result['durationMs']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
