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


def tools_call(i: int) -> dict:
    params = {"name": "run_python", "arguments": {"code": CODE}}
    return {"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call", "params": params}


async def open_session(http: httpx2.AsyncClient, mcp) -> dict[str, str]:
    """Initializes a session over plain HTTP (JSON answers); returns the headers to use it."""
    headers = {"Content-Type": "application/json", "Accept": "application/json", **mcp.headers()}
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "latency", "version": "1"}}
    answer = await http.post(mcp.url, headers=headers, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
    headers["Mcp-Session-Id"] = answer.headers["mcp-session-id"]
    await http.post(mcp.url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return headers


async def measure(rounds: int) -> None:
    runner = start_runner()
    with running(runner), running(start_mcp(runner, RUST_LOG="warn")) as mcp:
        direct: list[float] = []
        via_sdk: list[float] = []
        via_http: list[float] = []
        async with httpx2.AsyncClient(timeout=30) as http, mcp.client() as client:
            headers = {"Authorization": f"Bearer {runner.token}"}
            body = {"lang": "python", "code": CODE}
            session = await open_session(http, mcp)
            for i in range(rounds + 5):
                started = time.perf_counter()
                response = await http.post(runner.url + "/run", headers=headers, json=body)
                run_time = time.perf_counter() - started
                assert response.status_code == 200 and response.json()["stdout"] == "1\n", response.text

                started = time.perf_counter()
                result = await client.call_tool("run_python", {"code": CODE})
                sdk_time = time.perf_counter() - started
                assert result.structured_content["stdout"] == "1\n", result

                started = time.perf_counter()
                answer = await http.post(mcp.url, headers=session, json=tools_call(i))
                http_time = time.perf_counter() - started
                assert answer.json()["result"]["structuredContent"]["stdout"] == "1\n", answer.text

                if i >= 5:  # warm-up rounds are not counted
                    direct.append(run_time)
                    via_sdk.append(sdk_time)
                    via_http.append(http_time)
    p50 = {name: statistics.median(times) * 1000 for name, times in
           [("direct", direct), ("sdk", via_sdk), ("http", via_http)]}
    print(f"rounds: {rounds}, interleaved, sequential, runner pool size 2")
    print(f"direct POST /run p50:                   {p50['direct']:.2f} ms")
    print(f"tools/call, Python SDK client p50:      {p50['sdk']:.2f} ms  ratio {p50['sdk'] / p50['direct']:.2f}x")
    print(f"tools/call, one JSON POST /mcp p50:     {p50['http']:.2f} ms  ratio {p50['http'] / p50['direct']:.2f}x")


if __name__ == "__main__":
    anyio.run(measure, int(sys.argv[1]) if len(sys.argv) > 1 else 50)
