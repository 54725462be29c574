"""Languages as data through the official Python SDK: tools/list offers a run tool for
each of the runner's eight built-in languages, each description naming its toolchain and
how the program is built, a hello world in each comes back through MCP, and a compile
error is told apart from a failed run in structuredContent.
"""

from __future__ import annotations

import pytest

from conftest import Mcp

pytestmark = [pytest.mark.anyio, pytest.mark.runner]

MODES = ["legacy", "auto"]  # auto negotiates 2026-07-28: stateless, no Mcp-Session-Id
HELLO = {
    "run_bash": "echo hello bash",
    "run_python": "print('hello python')",
    "run_node": "console.log('hello node')",
    "run_typescript": "const who: string = 'typescript';\nconsole.log(`hello ${who}`);",
    "run_c": '#include <stdio.h>\nint main(void) { puts("hello c"); return 0; }\n',
    "run_cpp": '#include <iostream>\nint main() { std::cout << "hello cpp" << std::endl; }\n',
    "run_go": 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello go") }\n',
    "run_java": 'public class Main {\n  public static void main(String[] a) {\n    System.out.println("hello java");\n  }\n}\n',
}
# What each description says of its toolchain.
TOOLCHAIN = {
    "run_typescript": "TypeScript 5",
    "run_c": "gcc",
    "run_cpp": "g++",
    "run_go": "go1.",
    "run_java": "openjdk",
}


def text(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


@pytest.mark.parametrize("mode", MODES)
async def test_every_language_has_a_tool_and_says_its_hello(mcp: Mcp, mode: str) -> None:
    async with mcp.client(mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(HELLO) <= set(tools), sorted(tools)
        for name, needle in TOOLCHAIN.items():
            description = tools[name].description
            assert needle in description, description
            assert "Toolchain:" in description and "compile" in description, description
            assert tools[name].output_schema["properties"]["compileError"]["type"] == "boolean"
        for name, code in HELLO.items():
            result = await client.call_tool(name, {"code": code})
            assert result.is_error is False, text(result)
            language = name.removeprefix("run_")
            report = result.structured_content
            assert report["stdout"] == f"hello {language}\n", report
            assert report["exitCode"] == 0 and report["compileError"] is False, report


async def test_a_compile_error_is_not_a_failed_run(mcp: Mcp) -> None:
    async with mcp.client(mode="auto") as client:
        result = await client.call_tool("run_c", {"code": "int main(void) { return nope; }\n"})
        assert result.is_error is False, text(result)
        report = result.structured_content
        assert report["compileError"] is True and report["exitCode"] != 0, report
        assert "nope" in report["stderr"], report
        assert "did not compile" in text(result)
        result = await client.call_tool("run_c", {"code": "int main(void) { return 3; }\n"})
        report = result.structured_content
        assert report["compileError"] is False and report["exitCode"] == 3, report


async def test_a_language_the_runner_lacks_has_no_tool(mcp: Mcp) -> None:
    async with mcp.client(mode="auto") as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert "run_klingon" not in tools
        with pytest.raises(Exception) as refused:
            result = await client.call_tool("run_klingon", {"code": "x"})
            # A server may also answer with an error result rather than a protocol error.
            assert result.is_error, text(result)
            raise RuntimeError(text(result))
        assert "klingon" in str(refused.value)
