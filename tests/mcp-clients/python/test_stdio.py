"""The official Python SDK's stdio client against `sandbox-mcp stdio`."""

from __future__ import annotations

import pytest

from conftest import Runner, _bin
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

pytestmark = pytest.mark.anyio


def params(**env: str) -> StdioServerParameters:
    return StdioServerParameters(command=_bin("SANDBOX_MCP_BIN"), args=["stdio"], env={"RUST_LOG": "warn", **env})


async def test_stdio_lists_tools_and_explains_without_a_runner() -> None:
    async with Client(params(), mode="legacy") as client:
        tools = await client.list_tools()
        assert {t.name for t in tools.tools} == {
            "run_bash", "run_python", "run_node", "run_code",
            "create_sandbox", "upload_file", "download_file", "list_files", "close_sandbox",
            "pause_sandbox", "snapshot_sandbox", "fork_sandbox",
            "start_process", "process_output", "write_stdin", "kill_process", "list_processes",
        }
        result = await client.call_tool("run_python", {"code": "print(1)"})
    assert result.is_error is True
    assert "SANDBOX_RUNNER_URL" in result.content[0].text


async def test_stdio_needs_no_auth_token_and_honours_the_flag() -> None:
    async with Client(params(FEATURE_SANDBOX_EXEC="false"), mode="legacy") as client:
        assert (await client.list_tools()).tools == []


@pytest.mark.runner
async def test_stdio_runs_code(runner: Runner) -> None:
    env = {"SANDBOX_RUNNER_URL": runner.url, "SANDBOX_RUNNER_TOKEN": runner.token}
    async with Client(params(**env), mode="legacy") as client:
        result = await client.call_tool("run_python", {"code": "print(6 * 7)"})
    assert result.is_error is False, result.content
    assert result.structured_content["stdout"].strip() == "42"
