#!/usr/bin/env python3
"""Calls sandbox-mcp's run_python over and over, for the Swarm test (deploy/swarm/test),
from a container on the stack's network: one stateless MCP request per call (protocol
2026-07-28: no session, so any replica may answer any call), spread over the
sandbox-mcp tasks that Swarm's DNS names (`tasks.mcp`, looked up again before every
call), or sent to one URL (the routing mesh). Prints one JSON line per call and a summary.

Usage: calls.py --token-file F --seconds N [--url URL | --tasks NAME --port P] [--workers W]
"""
import argparse
import json
import socket
import threading
import time
import urllib.request

PROTOCOL = "2026-07-28"
CODE = "import os\nprint(6 * 7, os.getpid())"


def call(url, token, timeout):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "run_python",
            "arguments": {"code": CODE},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientInfo": {"name": "swarm-test", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": PROTOCOL,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "run_python",
        },
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        text = response.read().decode()
    # One JSON-RPC message, as JSON or as an SSE event's data.
    payload = next(
        (line[5:].strip() for line in text.splitlines() if line.startswith("data:") and line[5:].strip()),
        text,
    )
    result = json.loads(payload)["result"]
    structured = result.get("structuredContent", {})
    if result.get("isError") or not structured.get("stdout", "").startswith("42 "):
        raise RuntimeError(json.dumps(result)[:300])
    return structured


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--url")
    parser.add_argument("--tasks", default="tasks.mcp")
    parser.add_argument("--port", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=3)
    args = parser.parse_args()
    token = open(args.token_file).read().strip()
    start = time.monotonic()
    lock = threading.Lock()
    records = []

    def worker(index):
        n = index
        while time.monotonic() - start < args.seconds:
            began = time.monotonic() - start
            url = args.url
            try:
                if not url:
                    addresses = sorted({a[4][0] for a in socket.getaddrinfo(args.tasks, args.port, type=socket.SOCK_STREAM)})
                    url = f"http://{addresses[n % len(addresses)]}:{args.port}/mcp"
                call(url, token, timeout=20)
                ok, detail = True, ""
            except Exception as e:  # every failure is a record, not an end
                ok, detail = False, f"{type(e).__name__}: {e}"[:300]
            record = {"t": round(began, 2), "took": round(time.monotonic() - start - began, 3), "url": url, "ok": ok, "detail": detail}
            with lock:
                records.append(record)
                print(json.dumps(record), flush=True)
            n += 1
            time.sleep(0.05)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    summary = {
        "summary": True,
        "calls": len(records),
        "ok": sum(r["ok"] for r in records),
        "failed": [r for r in records if not r["ok"]],
        "servers": sorted({r["url"] for r in records if r["ok"]}),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
