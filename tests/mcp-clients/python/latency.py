"""Measures one `tools/call` of `print(1)` end to end against a direct `POST /run`, in one run.

    SANDBOX_MCP_BIN=... SANDBOX_RUNNER_BIN=... ../.venv/bin/python latency.py [ROUNDS]

Prints the p50 of each, and their ratio: what the MCP layer adds on top of the runner.
Not a test: run.sh does not run it.
"""

from __future__ import annotations

import statistics
import sys
import time

import anyio
import httpx2

from conftest import running, start_mcp, start_runner

CODE = "print(1)"


async def measure(rounds: int) -> None:
    runner = start_runner()
    with running(runner), running(start_mcp(runner, RUST_LOG="warn")) as mcp:
        direct: list[float] = []
        via_sdk: list[float] = []
        async with httpx2.AsyncClient(timeout=30) as http, mcp.client() as client:
            headers = {"Authorization": f"Bearer {runner.token}"}
            body = {"lang": "python", "code": CODE}
            for i in range(rounds + 5):
                started = time.perf_counter()
                response = await http.post(runner.url + "/run", headers=headers, json=body)
                run_time = time.perf_counter() - started
                assert response.status_code == 200 and response.json()["stdout"] == "1\n", response.text

                started = time.perf_counter()
                result = await client.call_tool("run_python", {"code": CODE})
                call_time = time.perf_counter() - started
                assert result.structured_content["stdout"] == "1\n", result

                if i >= 5:  # warm-up rounds are not counted
                    direct.append(run_time)
                    via_sdk.append(call_time)
    p50_direct = statistics.median(direct) * 1000
    p50_mcp = statistics.median(via_sdk) * 1000
    print(f"rounds: {rounds}, interleaved, sequential, pool size 2")
    print(f"direct POST /run p50:        {p50_direct:.2f} ms")
    print(f"MCP tools/call (Python SDK) p50: {p50_mcp:.2f} ms")
    print(f"ratio: {p50_mcp / p50_direct:.2f}x")


if __name__ == "__main__":
    anyio.run(measure, int(sys.argv[1]) if len(sys.argv) > 1 else 50)
