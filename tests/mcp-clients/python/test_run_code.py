"""run_code through the official Python SDK: one tool for every language the runner
offers, whose description lists them with their versions; programs of bash and python
run through it, one-shot and in a sandbox; an unknown language is an error result naming
the offered ones; MCP_LANGUAGE_TOOLS says which languages keep a tool of their own.
"""

from __future__ import annotations

import anyio
import pytest

from conftest import Mcp, Runner, running, start_mcp

pytestmark = [pytest.mark.anyio, pytest.mark.runner]

CALL_TIMEOUT = 60  # the SDK's pings keep a hung call open: bound each one


def text(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def call(client, name: str, arguments: dict):
    with anyio.fail_after(CALL_TIMEOUT):
        return await client.call_tool(name, arguments)


async def test_run_code_runs_any_offered_language(mcp: Mcp) -> None:
    async with mcp.client(mode="auto") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        run_code = tools["run_code"]
        assert run_code.input_schema["required"] == ["language", "code"]
        assert "Languages (name version): bash 5." in run_code.description, run_code.description
        assert ", python 3." in run_code.description, run_code.description
        for language, code in [
            ("bash", 'read -r line; echo "hello bash${line}"; exit 3'),
            ("python", "import sys\nprint('hello python' + sys.stdin.read())\nsys.exit(3)"),
        ]:
            result = await call(client, "run_code", {"language": language, "code": code})
            assert result.is_error is False, text(result)
            report = result.structured_content
            assert report["stdout"] == f"hello {language}\n", report
            assert report["exitCode"] == 3 and report["compileError"] is False, report

        created = await call(client, "create_sandbox", {})
        sandbox = created.structured_content["sandboxId"]
        try:
            await call(client, "run_code", {"language": "python", "code": "kept = 41", "sandboxId": sandbox})
            result = await call(client, "run_code", {"language": "python", "code": "print(kept + 1)", "sandboxId": sandbox})
            assert result.structured_content["stdout"] == "42\n", text(result)
        finally:
            await call(client, "close_sandbox", {"sandboxId": sandbox})


async def test_an_unknown_language_is_an_error_naming_the_offered_ones(mcp: Mcp) -> None:
    async with mcp.client(mode="auto") as client:
        result = await call(client, "run_code", {"language": "klingon", "code": "x"})
        assert result.is_error is True
        assert result.structured_content["error"]["code"] == "invalid_arguments"
        message = text(result)
        assert '"klingon"' in message and "bash" in message and "python" in message, message
        missing = await call(client, "run_code", {"code": "echo hi"})
        assert missing.is_error is True and "language" in text(missing)


async def test_the_operators_list_chooses_the_tools_of_their_own(runner: Runner) -> None:
    with running(start_mcp(runner, MCP_LANGUAGE_TOOLS="python,klingon")) as server:
        async with server.client(mode="auto") as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert {t for t in tools if t.startswith("run_")} == {"run_python", "run_code"}, tools
            result = await call(client, "run_code", {"language": "bash", "code": "echo still runs"})
            assert result.structured_content["stdout"] == "still runs\n", text(result)
    assert any("klingon" in line for line in server.proc.stderr), "the name nothing offers is logged"
