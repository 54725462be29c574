"""The official Python SDK against `sandbox-mcp serve` over Streamable HTTP."""

from __future__ import annotations

import json
import re
import time

import anyio
import httpx2
import pytest

from conftest import Mcp, running, start_mcp, start_runner
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.anyio

RUN_TOOLS = {"run_bash", "run_python", "run_node"}
SANDBOX_TOOLS = {"create_sandbox", "upload_file", "download_file", "list_files", "close_sandbox"}
SNAPSHOT_TOOLS = {"pause_sandbox", "snapshot_sandbox", "fork_sandbox"}
PROCESS_TOOLS = {"start_process", "process_output", "write_stdin", "kill_process", "list_processes"}
TOOLS = RUN_TOOLS | {"run_code"} | SANDBOX_TOOLS | SNAPSHOT_TOOLS | PROCESS_TOOLS
PROGRAMS = {
    "run_bash": 'echo "hello from bash $((6 * 7))"',
    "run_python": "print('hello from python', 6 * 7)",
    "run_node": "console.log('hello from node', 6 * 7)",
}
JSON_POST = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def text(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


# --- protocol, without a runner --------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_initialize_and_list_tools(mcp_unconfigured: Mcp, mode: str) -> None:
    async with mcp_unconfigured.client(mode=mode) as client:
        listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == TOOLS
    for tool in (tools[name] for name in RUN_TOOLS):
        assert tool.input_schema["required"] == ["code"]
        assert tool.input_schema["properties"]["timeoutMs"]["maximum"] == 300000
        assert tool.output_schema is not None and "exitCode" in tool.output_schema["properties"]
        for needle in ("fresh", "no network", "256 MB", "half a CPU", "15000 ms", "1 MiB"):
            assert needle in tool.description
        a = tool.annotations
        assert a.title and a.read_only_hint is False and a.destructive_hint is False
        assert a.idempotent_hint is False and a.open_world_hint is False
    for tool in tools.values():
        assert tool.output_schema is not None and "error" in tool.output_schema["properties"]
        assert tool.annotations.open_world_hint is False


async def test_not_configured_calls_say_503_and_what_to_set(mcp_unconfigured: Mcp) -> None:
    async with mcp_unconfigured.client() as client:
        for name in TOOLS:
            arguments = {"language": "bash", "code": "true", "sandboxId": "sbx_x", "path": "x", "content": ""}
            result = await client.call_tool(name, arguments)
            assert result.is_error is True
            message = text(result)
            assert "503" in message and "not configured" in message and "SANDBOX_RUNNER_URL" in message
            assert result.structured_content["error"]["code"] == "not_configured"


async def test_bad_arguments_are_a_tool_error(mcp_unconfigured: Mcp) -> None:
    async with mcp_unconfigured.client() as client:
        result = await client.call_tool("run_python", {"code": "1", "timeoutMs": 300001})
        assert result.is_error is True and "timeoutMs" in text(result)
        result = await client.call_tool("run_python", {})
        assert result.is_error is True and "code" in text(result)


async def test_unknown_tool_is_a_protocol_error(mcp_unconfigured: Mcp) -> None:
    async with mcp_unconfigured.client() as client:
        with pytest.raises(MCPError):
            await client.call_tool("run_ruby", {"code": "puts 1"})


async def test_flag_off_hides_the_tools_and_refuses_calls() -> None:
    with running(start_mcp(FEATURE_SANDBOX_EXEC="false")) as server:
        async with server.client() as client:
            assert (await client.list_tools()).tools == []
            with pytest.raises(MCPError):
                await client.call_tool("run_python", {"code": "print(1)"})


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789"])
async def test_401_without_or_with_a_wrong_token(mcp_unconfigured: Mcp, token: str | None) -> None:
    headers = {**JSON_POST, **({"Authorization": f"Bearer {token}"} if token else {})}
    async with httpx2.AsyncClient() as http:
        response = await http.post(mcp_unconfigured.url, headers=headers, json=INITIALIZE)
        assert response.status_code == 401
        assert "www-authenticate" not in response.headers  # no OAuth flow to start
        get = await http.get(mcp_unconfigured.url, headers={"Accept": "text/event-stream"})
        assert get.status_code == 401
    statuses: list[int] = []

    async def record(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"} if token else {}, event_hooks={"response": [record]}
    )
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    with pytest.raises(Exception):
        async with Client(streamable_http_client(mcp_unconfigured.url, http_client=http), mode="legacy"):
            pass
    assert 401 in statuses


async def test_403_for_a_foreign_origin(mcp_unconfigured: Mcp) -> None:
    async with httpx2.AsyncClient() as http:
        for headers in (mcp_unconfigured.headers(), {}):
            response = await http.post(
                mcp_unconfigured.url,
                headers={**JSON_POST, **headers, "Origin": "http://evil.example"},
                json=INITIALIZE,
            )
            assert response.status_code == 403
        local = await http.post(
            mcp_unconfigured.url,
            headers={**JSON_POST, **mcp_unconfigured.headers(), "Origin": "http://localhost:5173"},
            json=INITIALIZE,
        )
        assert local.status_code == 200


async def test_allowed_origins_are_configurable() -> None:
    with running(start_mcp(MCP_ALLOWED_ORIGINS="https://app.example.com")) as server:
        async with httpx2.AsyncClient() as http:
            headers = {**JSON_POST, **server.headers()}
            ok = await http.post(server.url, headers={**headers, "Origin": "https://app.example.com"}, json=INITIALIZE)
            bad = await http.post(server.url, headers={**headers, "Origin": "http://localhost:3000"}, json=INITIALIZE)
    assert (ok.status_code, bad.status_code) == (200, 403)


async def test_host_headers_are_checked(mcp_unconfigured: Mcp) -> None:
    async with httpx2.AsyncClient() as http:
        headers = {**JSON_POST, **mcp_unconfigured.headers()}
        evil = await http.post(mcp_unconfigured.url, headers={**headers, "Host": "evil.example"}, json=INITIALIZE)
        assert evil.status_code == 403
    with running(start_mcp(MCP_ALLOWED_HOSTS="sandbox.example")) as server:
        async with httpx2.AsyncClient() as http:
            headers = {**JSON_POST, **server.headers()}
            named = await http.post(server.url, headers={**headers, "Host": "sandbox.example:8443"}, json=INITIALIZE)
            local = await http.post(server.url, headers={**headers, "Host": "localhost"}, json=INITIALIZE)
    assert (named.status_code, local.status_code) == (200, 403)


async def test_health_needs_no_token(mcp_unconfigured: Mcp) -> None:
    async with httpx2.AsyncClient() as http:
        health = (await http.get(mcp_unconfigured.base + "/health")).json()
    assert health["status"] == "ok"
    assert health["runnerConfigured"] is False and health["runnerReachable"] is False
    assert health["version"]


async def _initialize(http: httpx2.AsyncClient, server: Mcp) -> str:
    response = await http.post(server.url, headers={**JSON_POST, **server.headers()}, json=INITIALIZE)
    assert response.status_code == 200
    session = response.headers["mcp-session-id"]
    notified = await http.post(
        server.url,
        headers={**JSON_POST, **server.headers(), "Mcp-Session-Id": session},
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
    )
    assert notified.status_code == 202
    return session


async def test_get_stream_opens_and_delete_ends_the_session(mcp_unconfigured: Mcp) -> None:
    server = mcp_unconfigured
    async with httpx2.AsyncClient(timeout=10) as http:
        session = await _initialize(http, server)
        headers = {**server.headers(), "Mcp-Session-Id": session, "Accept": "text/event-stream"}
        async with http.stream("GET", server.url, headers=headers) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
        deleted = await http.delete(server.url, headers={**server.headers(), "Mcp-Session-Id": session})
        assert deleted.status_code in (200, 204)
        after = await http.post(
            server.url,
            headers={**JSON_POST, **server.headers(), "Mcp-Session-Id": session},
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        )
        assert after.status_code == 404


async def test_a_client_that_accepts_only_json_gets_json(mcp_unconfigured: Mcp) -> None:
    server = mcp_unconfigured
    headers = {"Content-Type": "application/json", "Accept": "application/json", **server.headers()}
    async with httpx2.AsyncClient(timeout=10) as http:
        init = await http.post(server.url, headers=headers, json=INITIALIZE)
        assert init.status_code == 200
        assert init.headers["content-type"].startswith("application/json")
        assert init.json()["result"]["serverInfo"]["name"] == "sandbox-mcp"
        session = {**headers, "Mcp-Session-Id": init.headers["mcp-session-id"]}
        await http.post(server.url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = await http.post(
            server.url,
            headers=session,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": {"name": "run_bash", "arguments": {"code": "echo hi"}}},
        )
    assert call.headers["content-type"].startswith("application/json")
    answer = call.json()
    assert answer["id"] == 2 and answer["result"]["isError"] is True
    assert answer["result"]["structuredContent"]["error"]["code"] == "not_configured"


async def test_two_sessions_at_once(mcp_unconfigured: Mcp) -> None:
    async with mcp_unconfigured.client() as first, mcp_unconfigured.client() as second:
        a, b = await first.list_tools(), await second.list_tools()
        assert {t.name for t in a.tools} == {t.name for t in b.tools} == TOOLS
        assert first.session is not second.session


async def test_runner_unreachable_is_a_retryable_tool_error() -> None:
    # A port nothing listens on: take one from the kernel, then close it.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with running(start_mcp(SANDBOX_RUNNER_URL=f"http://127.0.0.1:{port}", SANDBOX_RUNNER_TOKEN="x")) as server:
        async with server.client() as client:
            started = time.monotonic()
            result = await client.call_tool("run_bash", {"code": "echo hi"})
            assert time.monotonic() - started < 10
        async with httpx2.AsyncClient() as http:
            health = (await http.get(server.base + "/health")).json()
    assert result.is_error is True
    assert "unreachable" in text(result) and "retry" in text(result)
    assert result.structured_content["error"]["retryable"] is True
    assert health == {**health, "status": "degraded", "runnerConfigured": True, "runnerReachable": False}


# --- with a real runner ----------------------------------------------------------------


@pytest.mark.runner
async def test_each_tool_runs_its_language(mcp: Mcp) -> None:
    async with mcp.client() as client:
        for name, code in PROGRAMS.items():
            result = await client.call_tool(name, {"code": code})
            assert result.is_error is False, text(result)
            language = name.removeprefix("run_")
            assert f"hello from {language} 42" in result.structured_content["stdout"]
            assert f"hello from {language} 42" in text(result)
            assert result.structured_content["exitCode"] == 0
            assert "exit code: 0" in text(result)


@pytest.mark.runner
async def test_a_failing_program_is_a_result_with_its_stderr(mcp: Mcp) -> None:
    async with mcp.client() as client:
        result = await client.call_tool("run_python", {"code": "import sys\nprint('oops', file=sys.stderr)\nsys.exit(3)"})
    assert result.is_error is False
    assert result.structured_content["exitCode"] == 3
    assert "oops" in result.structured_content["stderr"]
    assert "exit code: 3" in text(result) and "oops" in text(result)


@pytest.mark.runner
async def test_a_timeout_is_reported_and_bounded(mcp: Mcp) -> None:
    async with mcp.client() as client:
        started = time.monotonic()
        result = await client.call_tool("run_bash", {"code": "sleep 30", "timeoutMs": 1000})
        elapsed = time.monotonic() - started
    assert result.is_error is False
    assert result.structured_content["timedOut"] is True
    assert "timed out" in text(result) and "1000 ms" in text(result)
    assert elapsed < 1 + 5 + 2


@pytest.mark.runner
async def test_nothing_is_kept_between_calls_without_a_sandbox(mcp: Mcp) -> None:
    async with mcp.client() as client:
        await client.call_tool("run_bash", {"code": "echo kept > /tmp/mark; echo kept > ~/mark"})
        result = await client.call_tool("run_bash", {"code": "cat /tmp/mark ~/mark 2>&1; echo done"})
    assert "kept" not in result.structured_content["stdout"]


@pytest.mark.runner
async def test_long_output_is_cut_between_whole_lines(mcp: Mcp) -> None:
    code = "for i in range(150000):\n    print(i)"  # 0.94 MB, under the 1 MiB cap
    async with mcp.client() as client:
        result = await client.call_tool("run_python", {"code": code})
    shown = result.structured_content["stdout"]
    head, marker, tail = re.split(r"(\[\.\.\. .* omitted \.\.\.\]\n)", shown)
    head_lines, tail_lines = head.splitlines(), tail.splitlines()
    assert head_lines == [str(i) for i in range(len(head_lines))]
    first = int(tail_lines[0])
    assert tail_lines == [str(i) for i in range(first, 150000)]
    omitted = result.structured_content["stdoutOmittedLines"]
    assert omitted == first - len(head_lines)
    assert marker.startswith(f"[... {omitted} lines and ")


@pytest.mark.runner
async def test_a_flood_of_output_is_cut_to_head_and_tail(mcp: Mcp) -> None:
    code = "import sys\nsys.stdout.write('a' * 100000 + 'b' * 3000000)"
    async with mcp.client() as client:
        result = await client.call_tool("run_python", {"code": code})
    body = text(result)
    assert len(body) < 40000
    assert "bytes omitted" in body and "truncated" in body
    assert result.structured_content["stdoutOmittedBytes"] > 0
    assert result.structured_content["stdoutTruncated"] is True
    assert result.structured_content["stdout"].startswith("a" * 1000)


@pytest.mark.runner
async def test_eight_parallel_calls_in_one_session(mcp: Mcp) -> None:
    results: dict[int, str] = {}
    async with mcp.client() as client:

        async def one(i: int) -> None:
            result = await client.call_tool("run_python", {"code": f"print({i} * {i})"})
            assert result.is_error is False, text(result)
            results[i] = result.structured_content["stdout"].strip()

        async with anyio.create_task_group() as group:
            for i in range(8):
                group.start_soon(one, i)
    assert results == {i: str(i * i) for i in range(8)}


@pytest.mark.runner
async def test_two_sessions_run_at_once(mcp: Mcp) -> None:
    outputs: list[str] = []

    async def session(word: str) -> None:
        async with mcp.client() as client:
            result = await client.call_tool("run_node", {"code": f"console.log('{word}')"})
            outputs.append(result.structured_content["stdout"].strip())

    async with anyio.create_task_group() as group:
        group.start_soon(session, "one")
        group.start_soon(session, "two")
    assert sorted(outputs) == ["one", "two"]


@pytest.mark.runner
async def test_progress_is_reported_while_a_run_is_in_flight(mcp: Mcp) -> None:
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with mcp.client() as client:
        result = await client.call_tool(
            "run_bash", {"code": "sleep 2.5; echo done"}, progress_callback=on_progress
        )
    assert result.is_error is False, text(result)
    assert len(seen) >= 2, seen
    assert [p for p, _ in seen] == sorted(p for p, _ in seen)


@pytest.mark.runner
async def test_progress_shows_the_output_before_the_result(mcp: Mcp) -> None:
    """A program that prints, sleeps 2 s and prints: its first line reaches the progress
    callback well before the result, in a fresh sandbox and in a sandbox of create_sandbox."""
    seen: list[tuple[float, float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((time.monotonic(), progress, message))

    code = "import time\nprint('first line')\ntime.sleep(2)\nprint('second line')"
    async with mcp.client() as client:
        created = await client.call_tool("create_sandbox", {})
        sandbox_id = created.structured_content["sandboxId"]
        for arguments in ({"code": code}, {"code": code, "sandboxId": sandbox_id}):
            seen.clear()
            with anyio.fail_after(60):
                result = await client.call_tool("run_python", arguments, progress_callback=on_progress)
            answered = time.monotonic()
            assert result.is_error is False, text(result)
            assert result.structured_content["stdout"] == "first line\nsecond line\n"
            first = [(at, message) for at, _, message in seen if message and "first line" in message]
            assert first, seen
            at, message = first[0]
            assert "second line" not in message, seen
            assert answered - at > 1.0, (answered - at, seen)
            progress = [p for _, p, _ in seen]
            assert progress == sorted(progress) and len(set(progress)) == len(progress), seen
            assert all(len(m or "") <= 1024 for _, _, m in seen), seen
        await client.call_tool("close_sandbox", {"sandboxId": sandbox_id})


@pytest.mark.runner
async def test_health_reports_the_runner(mcp: Mcp) -> None:
    async with httpx2.AsyncClient() as http:
        health = (await http.get(mcp.base + "/health")).json()
    assert health["status"] == "ok" and health["runnerConfigured"] is True and health["runnerReachable"] is True


@pytest.mark.runner
async def test_runner_stopped_mid_test() -> None:
    runner = start_runner()
    with running(runner), running(start_mcp(runner)) as server:
        async with server.client() as client:
            before = await client.call_tool("run_bash", {"code": "echo up"})
            assert before.is_error is False, text(before)
            runner.proc.stop()
            started = time.monotonic()
            after = await client.call_tool("run_bash", {"code": "echo up"})
            assert time.monotonic() - started < 10
    assert after.is_error is True
    assert "unreachable" in text(after) and "retry" in text(after)
    assert after.structured_content["error"]["retryable"] is True
    json.dumps(after.structured_content)


@pytest.mark.runner
async def test_code_output_and_tokens_stay_out_of_the_logs(runner) -> None:
    with running(start_mcp(runner, RUST_LOG="info")) as server:
        async with server.client() as client:
            result = await client.call_tool("run_python", {"code": "print('CODE_MARKER'[::-1])"})
            assert result.is_error is False, text(result)
        server.proc.stop()
        logs = "".join(server.proc.stderr)
    assert "run finished" in logs
    for secret in ("CODE_MARKER", "REKRAM_EDOC", server.token, runner.token):
        assert secret not in logs


@pytest.mark.runner
async def test_a_wrong_runner_token_says_retrying_will_not_help(runner) -> None:
    from conftest import Runner

    impostor = Runner(runner.proc, "not-the-runner-token")
    with running(start_mcp(impostor)) as server:
        async with server.client() as client:
            result = await client.call_tool("run_bash", {"code": "echo hi"})
    assert result.is_error is True
    assert "401" in text(result) and "SANDBOX_RUNNER_TOKEN" in text(result) and "will not help" in text(result)
    assert result.structured_content["error"]["retryable"] is False


async def test_a_runner_that_never_answers_cannot_hang_a_call() -> None:
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # accepts connections in the kernel, never answers
        port = silent.getsockname()[1]
        with running(start_mcp(SANDBOX_RUNNER_URL=f"http://127.0.0.1:{port}")) as server:
            async with server.client() as client:
                started = time.monotonic()
                result = await client.call_tool("run_bash", {"code": "echo hi", "timeoutMs": 1000})
                elapsed = time.monotonic() - started
    assert result.is_error is True
    assert "did not answer" in text(result) and "retry" in text(result)
    assert 1 <= elapsed < 1 + 10 + 3


@pytest.mark.runner
async def test_cancelling_a_call_stops_the_wait(runner) -> None:
    with running(start_mcp(runner, RUST_LOG="info")) as server:
        async with server.client() as client:
            with anyio.move_on_after(1.0):
                await client.call_tool("run_bash", {"code": "sleep 20", "timeoutMs": 3000})
            for _ in range(50):
                if "run cancelled by the client" in "".join(server.proc.stderr):
                    break
                await anyio.sleep(0.1)
            after = await client.call_tool("run_bash", {"code": "echo still here"})
    assert "run cancelled by the client" in "".join(server.proc.stderr)
    assert after.structured_content["stdout"] == "still here\n"


@pytest.mark.runner
async def test_running_out_of_memory_is_reported(mcp: Mcp) -> None:
    async with mcp.client() as client:
        result = await client.call_tool("run_python", {"code": "x = bytearray(400 * 1024 * 1024)\nprint(len(x))"})
    assert result.is_error is False
    assert result.structured_content["oomKilled"] is True
    assert "out of memory" in text(result)


@pytest.mark.runner
async def test_calls_work_on_the_2026_protocol_too(mcp: Mcp) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with mcp.client(mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool(
            "run_python", {"code": "import time; time.sleep(1.5); print(2)"}, progress_callback=on_progress
        )
    assert result.is_error is False and result.structured_content["stdout"] == "2\n"
    assert len(seen) >= 2
