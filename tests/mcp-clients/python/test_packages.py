"""The package set through the official Python SDK: the tools name what is installed, a
matplotlib plot comes back as image content with no code to save it, and a PEP 723 block
brings a package outside the set (or is refused, clearly). The runner's store is the one
`sandbox-runner packages build` makes (the README's test command builds it first).
"""

from __future__ import annotations

import base64

import pytest

from conftest import Mcp, Runner, _bin
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

pytestmark = [pytest.mark.anyio, pytest.mark.runner]

MODES = ["legacy", "auto"]  # auto negotiates 2026-07-28: stateless, no Mcp-Session-Id
# A model's first plot: no savefig, no backend, just show().
PLOT = """
import pandas as pd, matplotlib.pyplot as plt
df = pd.DataFrame({"month": [1, 2, 3, 4], "sales": [3, 5, 4, 6]})
print(df["sales"].mean())
df.plot(x="month", y="sales")
plt.show()
"""


def text(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def check_plot(client: Client, arguments: dict) -> None:
    result = await client.call_tool("run_python", {"code": PLOT, **arguments})
    assert result.is_error is False, text(result)
    assert result.structured_content["stdout"] == "4.5\n", result.structured_content
    outputs = [(o["path"], o["mimeType"]) for o in result.structured_content["outputs"]]
    assert outputs == [("figure-1.png", "image/png")], result.structured_content
    images = [block for block in result.content if block.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    assert base64.b64decode(images[0].data).startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize("mode", MODES)
async def test_the_tools_name_what_is_installed(mcp: Mcp, mode: str) -> None:
    async with mcp.client(mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    python = tools["run_python"].description
    for name in ("numpy", "pandas", "matplotlib", "scikit-learn", "PEP 723", "PNG images"):
        assert name in python, python
    assert "lodash" in tools["run_node"].description


@pytest.mark.parametrize("mode", MODES)
async def test_a_plot_arrives_as_image_content(mcp: Mcp, mode: str) -> None:
    async with mcp.client(mode=mode) as client:
        await check_plot(client, {})
        created = await client.call_tool("create_sandbox", {})
        sid = created.structured_content["sandboxId"]
        try:
            await check_plot(client, {"sandboxId": sid})
        finally:
            await client.call_tool("close_sandbox", {"sandboxId": sid})


async def test_a_plot_arrives_as_image_content_over_stdio(runner: Runner) -> None:
    env = {"RUST_LOG": "warn", "SANDBOX_RUNNER_URL": runner.url, "SANDBOX_RUNNER_TOKEN": runner.token}
    params = StdioServerParameters(command=_bin("SANDBOX_MCP_BIN"), args=["stdio"], env=env)
    async with Client(params, mode="legacy") as client:
        await check_plot(client, {})


async def test_an_inline_dependency_resolves_and_a_bad_one_is_refused(mcp: Mcp) -> None:
    code = '# /// script\n# dependencies = ["humanize"]\n# ///\nimport humanize\nprint(humanize.intword(12000000))\n'
    async with mcp.client(mode="auto") as client:
        result = await client.call_tool("run_python", {"code": code})
        assert result.is_error is False, text(result)
        assert result.structured_content["stdout"] == "12.0 million\n", result.structured_content
        missing = "no-such-package-sandbox-mcp-7f3a"
        bad = f'# /// script\n# dependencies = ["{missing}"]\n# ///\nprint("RAN")\n'
        refused = await client.call_tool("run_python", {"code": bad})
    assert refused.is_error is True, text(refused)
    assert refused.structured_content["error"]["code"] == "dependency_not_found", refused.structured_content
    assert missing in text(refused) and "RAN" not in text(refused)
