"""Tools called from code (MCP_UPSTREAMS): programs in sandboxes call the operator's MCP
tools through sandbox-mcp, through the official Python SDK against the real runner, with
two real upstreams: an issue tracker served over Streamable HTTP by the official Python
SDK (tracker_upstream.py, which counts the calls it gets and wants a bearer header) and
the MCP project's reference "everything" server over stdio (its npm package, installed
with the TypeScript suite's).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import anyio
import pytest

from conftest import Mcp, Runner, running, start_mcp
from mcp.client import Client

pytestmark = [pytest.mark.anyio, pytest.mark.runner]

HERE = Path(__file__).parent
EVERYTHING = HERE.parent / "ts/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
CALL_LIMIT = 90
# What the tracker lets programs call (never `delete_everything`).
TRACKER_ALLOW = ["search_*", "get_issue", "list_issues", "status", "hang"]
BUDGET = 12


@dataclass
class Tracker:
    process: subprocess.Popen[str]
    port: int
    secret: str

    def calls(self) -> dict[str, int]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/calls", headers={"Authorization": f"Bearer {self.secret}"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)


def start_tracker(secret: str, port: int = 0) -> Tracker:
    process = subprocess.Popen(
        [sys.executable, str(HERE / "tracker_upstream.py"), "--port", str(port), "--secret", secret],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline() if process.stdout else ""
    if not line.startswith("tracker listening on "):
        process.kill()
        raise RuntimeError(f"the tracker did not start: {line!r}")
    return Tracker(process, int(line.split()[-1]), secret)


def upstreams_toml(tracker: Tracker, everything: bool) -> str:
    text = f"""
[[server]]
name = "tracker"
url = "http://127.0.0.1:{tracker.port}/mcp"
headers = {{ Authorization = "Bearer {tracker.secret}" }}
allow = {json.dumps(TRACKER_ALLOW)}
max_calls_per_run = {BUDGET}
timeout_ms = 3000
"""
    if everything:
        text += f"""
[[server]]
name = "everything"
command = ["node", "{EVERYTHING}", "stdio"]
allow = ["echo", "get-sum", "get-structured-content", "get-env"]
"""
    return text


@contextlib.contextmanager
def mcp_with_upstreams(runner: Runner, tracker: Tracker, everything: bool) -> Iterator[Mcp]:
    folder = tempfile.mkdtemp(prefix="upstreams-")
    path = os.path.join(folder, "upstreams.toml")
    with open(path, "w") as f:
        f.write(upstreams_toml(tracker, everything))
    with running(start_mcp(runner, MCP_UPSTREAMS=path)) as mcp:
        yield mcp


@pytest.fixture(scope="module")
def tracker() -> Iterator[Tracker]:
    t = start_tracker(secrets.token_hex(16))
    try:
        yield t
    finally:
        t.stop()


@pytest.fixture(scope="module")
def tools_mcp(runner: Runner, tracker: Tracker) -> Iterator[Mcp]:
    if not EVERYTHING.exists():
        pytest.skip(f"SKIPPED LOUDLY: {EVERYTHING} is missing (npm ci in tests/mcp-clients/ts installs it)")
    with mcp_with_upstreams(runner, tracker, everything=True) as mcp:
        yield mcp


def text(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def call(client: Client, name: str, arguments: dict):
    with anyio.fail_after(CALL_LIMIT):
        return await client.call_tool(name, arguments)


async def run(client: Client, lang: str, code: str, **extra) -> dict:
    """A run that must end with exit code 0: its structured content."""
    result = await call(client, f"run_{lang}", {"code": code, **extra})
    content = result.structured_content
    assert content["exitCode"] == 0, f"{text(result)}\n{content}"
    return content


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # auto: 2026-07-28, stateless
async def test_a_python_program_calls_several_tools_and_prints_a_summary(
    tools_mcp: Mcp, tracker: Tracker, mode: str
) -> None:
    before = tracker.calls()
    code = """
import tools
hits = tools.tracker.search_issues(query="crash", limit=5)
details = [tools.tracker.get_issue(id=h["id"]) for h in hits["issues"]]
closed = [d["id"] for d in details if d["state"] == "closed"]
print(f"{len(details)} crash issues, closed: {closed}")
print(tools.tracker.status())
print(tools.everything.get_sum(a=2, b=3))
"""
    async with tools_mcp.client(mode=mode) as client:
        content = await run(client, "python", code)
    assert content["stdout"] == (
        "5 crash issues, closed: [15]\n200 issues, all systems nominal\nThe sum of 2 and 3 is 5.\n"
    ), content
    made = [(c["server"], c["tool"], c["isError"]) for c in content["toolCalls"]]
    assert made == [("tracker", "search_issues", False)] + [("tracker", "get_issue", False)] * 5 + [
        ("tracker", "status", False),
        ("everything", "get-sum", False),
    ], content["toolCalls"]
    assert all(isinstance(c["durationMs"], int) and c["durationMs"] >= 0 for c in content["toolCalls"])
    after = tracker.calls()
    assert after.get("get_issue", 0) - before.get("get_issue", 0) == 5


async def test_a_typescript_and_a_node_program_import_the_module(tools_mcp: Mcp) -> None:
    typescript = """
import { tracker, everything } from "tools";
const hits: { issues: { id: number }[] } = await tracker.search_issues({ query: "crash", limit: 3 });
const all = await Promise.all(hits.issues.map((h) => tracker.get_issue({ id: h.id })));
console.log(all.map((i: { id: number }) => i.id).join(","));
console.log(await everything.echo({ message: "hi" }));
"""
    node_cjs = """
const tools = require("tools");
tools.tracker.status().then((s) => console.log(s));
"""
    node_esm = """
import { tracker } from "tools";
try {
  await tracker.get_issue({ id: 999 });
} catch (e) {
  console.log(e instanceof Error, e.message.includes("no issue 999"));
}
"""
    async with tools_mcp.client() as client:
        assert (await run(client, "typescript", typescript))["stdout"] == "5,10,15\nEcho: hi\n"
        assert (await run(client, "node", node_cjs))["stdout"] == "200 issues, all systems nominal\n"
        assert (await run(client, "node", node_esm))["stdout"] == "true true\n"


async def test_a_tool_outside_allow_fails_in_the_program_and_never_reaches_the_upstream(
    tools_mcp: Mcp, tracker: Tracker
) -> None:
    # Past the module: a raw request on the agent's socket, as a hostile program would.
    code = """
import json, socket, tools
print(hasattr(tools.tracker, "delete_everything"))
s = socket.socket(socket.AF_UNIX)
s.connect("/run/sandbox-tools/socket")
s.sendall(json.dumps({"server": "tracker", "tool": "delete_everything", "arguments": {}}).encode() + b"\\n")
answer = json.loads(s.makefile().readline())
print("error" in answer and "result" not in answer)
"""
    async with tools_mcp.client() as client:
        content = await run(client, "python", code)
    assert content["stdout"] == "False\nTrue\n", content
    assert tracker.calls().get("delete_everything", 0) == 0


async def test_a_run_makes_at_most_its_budget_of_calls(tools_mcp: Mcp, tracker: Tracker) -> None:
    code = f"""
import tools
ok = failed = 0
for _ in range({BUDGET + 3}):
    try:
        tools.tracker.status()
        ok += 1
    except tools.ToolError:
        failed += 1
print(ok, failed)
"""
    before = tracker.calls().get("status", 0)
    async with tools_mcp.client() as client:
        content = await run(client, "python", code, timeoutMs=60000)
    assert content["stdout"] == f"{BUDGET} 3\n", content
    assert tracker.calls().get("status", 0) - before == BUDGET


async def test_an_upstream_error_and_a_timeout_each_fail_the_call(tools_mcp: Mcp) -> None:
    code = """
import time, tools
try:
    tools.tracker.get_issue(id=999)
except tools.ToolError as e:
    print("upstream:", "no issue 999" in str(e))
start = time.monotonic()
try:
    tools.tracker.hang()
except tools.ToolError as e:
    print("hang:", time.monotonic() - start < 15)
"""
    async with tools_mcp.client() as client:
        result = await call(client, "run_python", {"code": code, "timeoutMs": 60000})
    content = result.structured_content
    assert content["stdout"] == "upstream: True\nhang: True\n", text(result)
    errors = [(c["tool"], c["isError"]) for c in content["toolCalls"]]
    assert errors == [("get_issue", True), ("hang", True)], content["toolCalls"]


async def test_a_sandbox_s_runs_call_tools_across_calls(tools_mcp: Mcp) -> None:
    async with tools_mcp.client() as client:
        created = await call(client, "create_sandbox", {})
        sid = created.structured_content["sandboxId"]
        await run(client, "python", "import tools\nfirst = tools.tracker.get_issue(id=7)", sandboxId=sid)
        content = await run(
            client, "python", "second = tools.tracker.get_issue(id=8)\nprint(first['id'] + second['id'])", sandboxId=sid
        )
        assert content["stdout"] == "15\n", content
        await call(client, "close_sandbox", {"sandboxId": sid})


async def test_no_secret_reaches_a_program(tools_mcp: Mcp, tracker: Tracker) -> None:
    """The upstream's header value, sandbox-mcp's token and the runner's: nowhere a program
    can read (its environment, every process's environment and arguments, the files it
    can read outside the system's folders), and not in the stdio upstream's environment."""
    # Reversed in the program's text, so that its own file does not hold them.
    reversed_ = [tracker.secret[::-1], tools_mcp.token[::-1]]
    code = f"""
import os, tools
secrets = [s[::-1] for s in {reversed_!r}]
found = []
def look(where, data):
    for s in secrets:
        if s.encode() in data:
            found.append(where)
look("environ", repr(dict(os.environ)).encode())
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for name in ("environ", "cmdline"):
            try:
                look(f"/proc/{{pid}}/{{name}}", open(f"/proc/{{pid}}/{{name}}", "rb").read())
            except OSError:
                pass
for top in ("/run", "/etc", "/home", "/tmp", "/opt/deps"):
    for folder, _, files in os.walk(top):
        for name in files:
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as f:
                    look(path, f.read(1 << 20))
            except OSError:
                pass
look("the module", repr(tools.list()).encode())
look("get-env", repr(tools.everything.get_env()).encode())
print(found)
"""
    async with tools_mcp.client() as client:
        content = await run(client, "python", code, timeoutMs=60000)
    assert content["stdout"] == "[]\n", content


async def test_search_tools_and_the_run_descriptions_name_the_servers(tools_mcp: Mcp) -> None:
    async with tools_mcp.client() as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert "search_tools" in listed
        for name in ("run_python", "run_typescript", "run_node"):
            description = listed[name].description or ""
            assert "tools" in description and "tracker" in description and "everything" in description, name
        result = await call(client, "search_tools", {"query": "issue"})
        stubs = text(result)
        assert "def search_issues(" in stubs and "def get_issue(" in stubs, stubs
        assert "search_issues(" in stubs and "Promise<" in stubs, stubs
        assert "delete_everything" not in stubs and "get_sum" not in stubs, stubs
        everything = text(await call(client, "search_tools", {}))
        assert "get_sum" in everything and "echo" in everything, everything


async def test_without_upstreams_nothing_of_it_is_visible(mcp: Mcp) -> None:
    async with mcp.client() as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert "search_tools" not in listed
        assert "import tools" not in (listed["run_python"].description or "")
        content = (await call(client, "run_python", {"code": "import tools"})).structured_content
        assert content["exitCode"] == 1 and "ModuleNotFoundError" in content["stderr"], content


async def test_an_upstream_that_dies_comes_back(runner: Runner) -> None:
    tracker = start_tracker(secrets.token_hex(16))
    try:
        with mcp_with_upstreams(runner, tracker, everything=False) as mcp:
            code = "import tools\nprint(tools.tracker.status())"
            async with mcp.client() as client:
                assert (await run(client, "python", code))["stdout"] == "200 issues, all systems nominal\n"
                port = tracker.port
                tracker.stop()
                down = (await call(client, "run_python", {"code": code})).structured_content
                assert down["exitCode"] != 0, down
                tracker = start_tracker(tracker.secret, port)
                deadline = time.monotonic() + 60
                while True:
                    again = (await call(client, "run_python", {"code": code})).structured_content
                    if again["exitCode"] == 0 or time.monotonic() > deadline:
                        break
                    await anyio.sleep(1)
                assert again["stdout"] == "200 issues, all systems nominal\n", again
    finally:
        tracker.stop()
