"""An issue tracker served over Streamable HTTP with the official Python SDK: the upstream
the tests of tools called from code (test_tools.py) configure in MCP_UPSTREAMS.

    python tracker_upstream.py --port 0 --secret S

prints `tracker listening on PORT` once it serves. Every MCP request must carry
`Authorization: Bearer S` (else 401), so that a call that works proves sandbox-mcp sent
the configured header. `GET /calls` (same header) answers how many times each tool was
called: what the tests check to know a refused call never reached it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import socket
import sys
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.responses import JSONResponse, Response

LABELS = ["crash", "bug", "ui", "perf", "docs"]
COMPONENTS = ["parser", "renderer", "network", "storage"]
ISSUES = [
    {
        "id": n,
        "title": f"Issue {n}: {LABELS[n % 5]} in the {COMPONENTS[n % 4]}",
        "labels": [LABELS[n % 5], COMPONENTS[n % 4]],
        "state": "open" if n % 3 else "closed",
        "body": f"Steps to reproduce issue {n}: " + "open the file, press the button, wait. " * 4,
    }
    for n in range(1, 201)
]
PER_PAGE = 20

calls: collections.Counter[str] = collections.Counter()
server = MCPServer("tracker")


def counted(name: str) -> None:
    calls[name] += 1


@server.tool(description="Search the tracker's issues whose title contains `query` (case-insensitive).")
def search_issues(query: str, limit: int = 10) -> dict[str, Any]:
    """`limit`: the most issues answered (1 to 50)."""
    counted("search_issues")
    if not 1 <= limit <= 50:
        raise ToolError(f"limit must be 1 to 50, not {limit}")
    hits = [i for i in ISSUES if query.lower() in i["title"].lower()][:limit]
    return {"issues": [{"id": i["id"], "title": i["title"], "labels": i["labels"]} for i in hits]}


@server.tool(description="One issue, whole, by its number.")
def get_issue(id: int) -> dict[str, Any]:
    counted("get_issue")
    if not 1 <= id <= len(ISSUES):
        raise ToolError(f"no issue {id} in the tracker")
    return ISSUES[id - 1]


@server.tool(description="A page of every issue, whole (20 a page).")
def list_issues(page: int = 1) -> dict[str, Any]:
    counted("list_issues")
    start = (page - 1) * PER_PAGE
    return {"page": page, "pages": len(ISSUES) // PER_PAGE, "issues": ISSUES[start : start + PER_PAGE]}


@server.tool(description="How the tracker is today, as plain text.", structured_output=False)
def status() -> str:
    counted("status")
    return f"{len(ISSUES)} issues, all systems nominal"


@server.tool(description="Never answers in time.")
async def hang() -> str:
    counted("hang")
    await asyncio.sleep(3600)
    return "late"


@server.tool(description="Deletes every issue (never allowed to programs).")
def delete_everything() -> str:
    counted("delete_everything")
    return "deleted"


def secured(app: Any, secret: str) -> Any:
    """The app behind `Authorization: Bearer <secret>`, with `GET /calls`."""
    expected = f"Bearer {secret}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if headers.get(b"authorization") != expected:
            return await Response("unauthorized", status_code=401)(scope, receive, send)
        if scope["path"] == "/calls":
            return await JSONResponse(dict(calls))(scope, receive, send)
        return await app(scope, receive, send)

    return guarded


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--secret", required=True)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    # Listening before the port is printed: a client may connect at once (uvicorn's own
    # listen() on the same socket changes nothing).
    sock.listen(128)
    app = secured(server.streamable_http_app(), args.secret)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"tracker listening on {sock.getsockname()[1]}", flush=True)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    sys.exit(main())
