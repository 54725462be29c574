"""Processes in a sandbox (start_process, process_output, write_stdin, kill_process,
list_processes) through the official Python SDK against a real runner, over Streamable HTTP
in both the legacy (session) and the 2026-07-28 (stateless) modes.
"""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

import anyio
import pytest

from conftest import Mcp, Runner, running, start_mcp
from mcp.client import Client
from test_sandboxes import MODES, create, ok, refused, text

pytestmark = pytest.mark.anyio

# Every call of these tests is bounded (the SDK's pings keep a hung call alive forever).
CALL_LIMIT = 60.0
# The program a second: five lines, a second apart.
TICKS = "for i in 1 2 3 4 5; do echo tick $i; sleep 1; done"
# A run that fetches a page from a server on the sandbox's loopback, trying until it answers.
FETCH = r"""
import time, urllib.request
for attempt in range(100):
    try:
        print(urllib.request.urlopen('http://127.0.0.1:8000/hello.txt', timeout=2).read().decode(), end='')
        break
    except OSError:
        time.sleep(0.1)
else:
    raise SystemExit('the server never answered')
"""


@contextlib.asynccontextmanager
async def sandbox(client: Client) -> AsyncIterator[str]:
    """A new sandbox's id, closed after the block."""
    sid = await create(client)
    try:
        yield sid
    finally:
        await client.call_tool("close_sandbox", {"sandboxId": sid})


async def start(client: Client, sid: str, command: str) -> int:
    started = (await ok(client, "start_process", {"sandboxId": sid, "command": command})).structured_content
    assert isinstance(started["pid"], int) and started["pid"] > 0, started
    assert started["command"] == command and started["startedAt"]
    return started["pid"]


async def read(client: Client, sid: str, pid: int, cursor: str | None = None, wait_ms: int = 0) -> dict:
    arguments = {"sandboxId": sid, "pid": pid, "waitMs": wait_ms}
    if cursor is not None:
        arguments["cursor"] = cursor
    answer = (await ok(client, "process_output", arguments)).structured_content
    assert isinstance(answer["cursor"], str) and answer["cursor"], answer
    return answer


async def until_ended(client: Client, sid: str, pid: int, cursor: str | None = None) -> tuple[dict, str]:
    """Reads with waitMs until the process has ended, then once more (what it wrote as it ended may
    come just after): the last answer, and all it wrote to stdout."""
    stdout = ""
    with anyio.fail_after(CALL_LIMIT):
        while True:
            answer = await read(client, sid, pid, cursor, wait_ms=2000)
            stdout += answer["stdout"]
            cursor = answer["cursor"]
            if not answer["running"]:
                await anyio.sleep(0.2)
                last = await read(client, sid, pid, cursor)
                return last, stdout + last["stdout"]


@pytest.mark.runner
@pytest.mark.parametrize("mode", MODES)
async def test_a_server_started_as_a_process_serves_a_run_in_the_same_sandbox(mcp: Mcp, mode: str) -> None:
    async with mcp.client(mode=mode) as client:
        async with sandbox(client) as sid:
            await ok(client, "upload_file", {"sandboxId": sid, "path": "hello.txt", "content": "hello from the sandbox\n"})
            pid = await start(client, sid, "python3 -m http.server 8000 --bind 127.0.0.1")
            with anyio.fail_after(CALL_LIMIT):
                fetched = await ok(client, "run_python", {"code": FETCH, "sandboxId": sid})
            assert fetched.structured_content["stdout"] == "hello from the sandbox\n", text(fetched)
            # The server logged the request on its stderr, which the process keeps.
            with anyio.fail_after(CALL_LIMIT):
                logged = await read(client, sid, pid, wait_ms=2000)
            assert "GET /hello.txt" in logged["stderr"], logged
            assert logged["running"] is True and logged["exitCode"] is None
            listed = (await ok(client, "list_processes", {"sandboxId": sid})).structured_content
            assert [(p["pid"], p["running"]) for p in listed["processes"]] == [(pid, True)]


@pytest.mark.runner
@pytest.mark.parametrize("mode", MODES)
async def test_a_process_is_watched_with_wait_and_cursor(mcp: Mcp, mode: str) -> None:
    """A line a second, read with waitMs and the cursor: each line once, none lost, as it comes."""
    async with mcp.client(mode=mode) as client:
        async with sandbox(client) as sid:
            pid = await start(client, sid, TICKS)
            reads_with_output = 0
            stdout, cursor = "", None
            with anyio.fail_after(CALL_LIMIT):
                while True:
                    answer = await read(client, sid, pid, cursor, wait_ms=3000)
                    reads_with_output += answer["stdout"] != ""
                    stdout += answer["stdout"]
                    cursor = answer["cursor"]
                    if not answer["running"]:
                        break
            assert stdout == "".join(f"tick {i}\n" for i in range(1, 6)), stdout
            assert reads_with_output >= 3, "the lines came while the process ran, not all at its end"
            assert answer["exitCode"] == 0
            # Read again from the last cursor: nothing new, and it says so.
            again = await ok(client, "process_output", {"sandboxId": sid, "pid": pid, "cursor": cursor})
            assert again.structured_content["stdout"] == ""
            assert "nothing new came" in text(again)
            # From the start again (no cursor), everything is still there.
            whole = await read(client, sid, pid)
            assert whole["stdout"] == stdout


@pytest.mark.runner
async def test_stdin_is_echoed_back_and_closed(mcp: Mcp) -> None:
    async with mcp.client() as client:
        async with sandbox(client) as sid:
            pid = await start(client, sid, "cat")
            written = await ok(client, "write_stdin", {"sandboxId": sid, "pid": pid, "data": "hello\n"})
            assert written.structured_content == {"written": 6, "closed": False, "error": None}
            with anyio.fail_after(CALL_LIMIT):
                echoed = await read(client, sid, pid, wait_ms=5000)
            assert echoed["stdout"] == "hello\n" and echoed["running"] is True
            closed = await ok(client, "write_stdin", {"sandboxId": sid, "pid": pid, "data": "bye", "eof": True})
            assert closed.structured_content["closed"] is True
            last, stdout = await until_ended(client, sid, pid, echoed["cursor"])
            assert stdout == "bye" and last["exitCode"] == 0
            message = await refused(client, "write_stdin", {"sandboxId": sid, "pid": pid, "data": "x"}, "process_ended")
            assert "process_output" in message


@pytest.mark.runner
async def test_term_and_kill_end_processes_with_their_exit_codes(mcp: Mcp) -> None:
    async with mcp.client() as client:
        async with sandbox(client) as sid:
            polite = await start(client, sid, "sleep 300")
            stubborn = await start(client, sid, "trap '' TERM; while true; do sleep 1; done")
            sent = await ok(client, "kill_process", {"sandboxId": sid, "pid": polite})
            assert sent.structured_content == {"signal": "TERM", "sent": True, "error": None}
            last, _ = await until_ended(client, sid, polite)
            assert last["exitCode"] == 143, last
            await ok(client, "kill_process", {"sandboxId": sid, "pid": stubborn, "signal": "TERM"})
            with anyio.fail_after(CALL_LIMIT):
                ignored = await read(client, sid, stubborn, wait_ms=1500)
            assert ignored["running"] is True, "a process that ignores TERM still runs"
            await ok(client, "kill_process", {"sandboxId": sid, "pid": stubborn, "signal": "KILL"})
            last, _ = await until_ended(client, sid, stubborn)
            assert last["exitCode"] == 137, last
            listed = (await ok(client, "list_processes", {"sandboxId": sid})).structured_content["processes"]
            ended = {p["pid"]: (p["running"], p["exitCode"], p["endedAt"] is not None) for p in listed}
            assert ended == {polite: (False, 143, True), stubborn: (False, 137, True)}


@pytest.mark.runner
async def test_errors_say_what_to_do(runner: Runner, mcp: Mcp) -> None:
    async with mcp.client() as client:
        async with sandbox(client) as sid:
            message = await refused(client, "process_output", {"sandboxId": sid, "pid": 999999}, "process_not_found")
            assert "list_processes" in message
            await refused(client, "kill_process", {"sandboxId": sid, "pid": 999999}, "process_not_found")
            pid = await start(client, sid, "sleep 300")
            for cursor in ("not-a-cursor", "AAAA"):
                message = await refused(
                    client, "process_output", {"sandboxId": sid, "pid": pid, "cursor": cursor}, "invalid_arguments"
                )
                assert "cursor" in message and "omit it" in message
            other = await start(client, sid, "true")
            foreign = (await read(client, sid, other))["cursor"]
            message = await refused(
                client, "process_output", {"sandboxId": sid, "pid": pid, "cursor": foreign}, "invalid_arguments"
            )
            assert f"process {other}" in message
            await refused(client, "process_output", {"sandboxId": sid, "pid": pid, "waitMs": 30001}, "invalid_arguments")
            message = await refused(
                client, "kill_process", {"sandboxId": sid, "pid": pid, "signal": "STOP"}, "invalid_arguments"
            )
            assert "INT, TERM, KILL, HUP, QUIT, USR1 or USR2" in message
            await refused(
                client, "start_process", {"sandboxId": sid, "command": "ls", "cwd": "../.."}, "invalid_arguments"
            )
            with running(start_mcp(runner)) as stranger_server:
                async with stranger_server.client() as stranger:
                    for name, arguments in (
                        ("list_processes", {"sandboxId": sid}),
                        ("process_output", {"sandboxId": sid, "pid": pid}),
                        ("kill_process", {"sandboxId": sid, "pid": pid, "signal": "KILL"}),
                        ("start_process", {"sandboxId": sid, "command": "true"}),
                    ):
                        message = await refused(stranger, name, arguments, "invalid_sandbox_id")
                        assert "create_sandbox" in message
            # The stranger's kill did not reach it.
            assert (await read(client, sid, pid))["running"] is True
        message = await refused(client, "list_processes", {"sandboxId": sid}, "sandbox_not_found")
        assert "create_sandbox" in message


async def test_the_process_tools_say_when_to_use_them(mcp_unconfigured: Mcp) -> None:
    async with mcp_unconfigured.client(mode="auto") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    start_process = tools["start_process"].description
    for needle in ("server", "long job", "watch", "feed", "run_*"):
        assert needle in start_process, needle
    assert "start_process" in tools["run_bash"].description
    assert tools["process_output"].input_schema["properties"]["waitMs"]["maximum"] == 30000
    assert set(tools["process_output"].output_schema["properties"]) >= {"stdout", "stderr", "running", "exitCode", "cursor"}
    assert tools["kill_process"].input_schema["properties"]["signal"]["enum"] == [
        "INT", "TERM", "KILL", "HUP", "QUIT", "USR1", "USR2"
    ]
