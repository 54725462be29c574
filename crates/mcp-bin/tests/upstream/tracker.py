"""A Streamable HTTP MCP server written with the official Python SDK: the upstream of
sandbox-mcp's tools-from-code tests ("tracker").

    tracker.py --token SECRET --calls FILE [--port N]

It answers only requests that carry `Authorization: Bearer SECRET` (401 otherwise),
appends one JSON line {"tool": ..., "arguments": ...} to FILE for every tool call it
receives (so that a test can tell what reached it), and prints
"tracker listening on http://127.0.0.1:PORT/mcp" once it serves.
"""

import argparse
import asyncio
import json
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.responses import JSONResponse

parser = argparse.ArgumentParser()
parser.add_argument("--token", required=True)
parser.add_argument("--calls", required=True)
parser.add_argument("--port", type=int, default=0)
args = parser.parse_args()

server = MCPServer("tracker")


def seen(tool: str, arguments: dict) -> None:
    with open(args.calls, "a") as calls:
        calls.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@server.tool()
def search_issues(query: str, limit: int = 3) -> dict[str, list]:
    """Searches the tracker's issues for words; returns the matching issues."""
    seen("search_issues", {"query": query, "limit": limit})
    return {"issues": [{"number": n, "title": f"{query} crash #{n}"} for n in range(1, limit + 1)]}


@server.tool(structured_output=False)
def get_issue(number: int) -> str:
    """One issue by its number, as text."""
    seen("get_issue", {"number": number})
    if number == 404:
        raise ToolError("issue 404 does not exist")
    return f"Issue {number}: the app crashes on start"


@server.tool(structured_output=False)
def delete_issue(number: int) -> str:
    """Deletes an issue (never allowed to programs)."""
    seen("delete_issue", {"number": number})
    return "deleted"


@server.tool(structured_output=False)
async def hang(seconds: float) -> str:
    """Waits, then answers."""
    seen("hang", {"seconds": seconds})
    await asyncio.sleep(seconds)
    return "done"


@server.tool(structured_output=False)
def big() -> str:
    """An answer over a mebibyte."""
    seen("big", {})
    return "x" * (1100 * 1024)


def with_token(app):
    expected = f"Bearer {args.token}".encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != expected:
                await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded


async def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    app = with_token(server.streamable_http_app())
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn_server = uvicorn.Server(config)
    print(f"tracker listening on http://127.0.0.1:{port}/mcp", flush=True)
    await uvicorn_server.serve(sockets=[sock])


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
