"""Sandboxes (create_sandbox and sandboxId) through the official Python SDK, over Streamable
HTTP in both the legacy (session) and the 2026-07-28 (stateless) modes, and over stdio.
"""

from __future__ import annotations

import base64

import pytest

from conftest import Mcp, Runner, _bin, running, start_mcp
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

pytestmark = [pytest.mark.anyio, pytest.mark.runner]

MODES = ["legacy", "auto"]  # auto negotiates 2026-07-28: stateless, no Mcp-Session-Id
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)
# A program that writes a real PNG and a CSV file under outputs/.
WRITE_OUTPUTS = r"""
import os, struct, zlib
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
png = (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0))
       + chunk(b'IDAT', zlib.compress(b'\x00\xff\x00\x00')) + chunk(b'IEND', b''))
os.makedirs('/home/sandbox/outputs', exist_ok=True)
open('/home/sandbox/outputs/plot.png', 'wb').write(png)
open('/home/sandbox/outputs/data.csv', 'w').write('a,b\n1,2\n')
print('written')
"""


def text(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def ok(client: Client, name: str, arguments: dict):
    result = await client.call_tool(name, arguments)
    assert result.is_error is False, f"{name}: {text(result)}"
    assert result.structured_content["error"] is None, result.structured_content
    return result


async def refused(client: Client, name: str, arguments: dict, code: str) -> str:
    result = await client.call_tool(name, arguments)
    assert result.is_error is True, f"{name}: {text(result)}"
    assert result.structured_content["error"]["code"] == code, result.structured_content
    return text(result)


async def create(client: Client) -> str:
    created = (await ok(client, "create_sandbox", {})).structured_content
    assert created["sandboxId"].startswith("sbx_")
    assert created["idleTimeoutMs"] > 0 and created["expiresAt"]
    return created["sandboxId"]


async def check_sandbox_flow(client: Client) -> None:
    sid = await create(client)
    write = "open('/home/sandbox/kept.txt', 'w').write('kept 42')\nprint('wrote')"
    first = await ok(client, "run_python", {"code": write, "sandboxId": sid})
    assert first.structured_content["stdout"] == "wrote\n"
    assert first.structured_content["stateLost"] is False
    second = await ok(client, "run_python", {"code": "print(open('kept.txt').read())", "sandboxId": sid})
    assert second.structured_content["stdout"] == "kept 42\n"
    await ok(client, "run_python", {"code": "x = 41", "sandboxId": sid})
    answer = await ok(client, "run_python", {"code": "print(x + 1)", "sandboxId": sid})
    assert answer.structured_content["stdout"] == "42\n"

    await ok(client, "upload_file", {"sandboxId": sid, "path": "data/in.csv", "content": "a,b\n1,2\n"})
    summed = await ok(
        client,
        "run_python",
        {"code": "import csv\nprint(sum(int(r['b']) for r in csv.DictReader(open('data/in.csv'))))", "sandboxId": sid},
    )
    assert summed.structured_content["stdout"] == "2\n"
    csv = await ok(client, "download_file", {"sandboxId": sid, "path": "data/in.csv"})
    assert text(csv) == "a,b\n1,2\n"
    assert csv.structured_content["mimeType"] == "text/csv"

    png = base64.b64encode(PNG).decode()
    await ok(client, "upload_file", {"sandboxId": sid, "path": "pic.png", "content": png, "encoding": "base64"})
    image = await ok(client, "download_file", {"sandboxId": sid, "path": "pic.png"})
    assert image.content[0].type == "image" and image.content[0].mime_type == "image/png"
    assert base64.b64decode(image.content[0].data) == PNG

    blob_bytes = bytes(range(256))
    await ok(
        client,
        "upload_file",
        {"sandboxId": sid, "path": "b.bin", "content": base64.b64encode(blob_bytes).decode(), "encoding": "base64"},
    )
    blob = await ok(client, "download_file", {"sandboxId": sid, "path": "b.bin"})
    assert blob.content[0].type == "resource"
    assert base64.b64decode(blob.content[0].resource.blob) == blob_bytes

    listed = (await ok(client, "list_files", {"sandboxId": sid})).structured_content
    paths = {entry["path"] for entry in listed["files"]}
    assert {"kept.txt", "data", "data/in.csv", "pic.png", "b.bin"} <= paths

    message = await refused(client, "download_file", {"sandboxId": sid, "path": "missing.txt"}, "file_not_found")
    assert "list_files" in message

    assert (await ok(client, "close_sandbox", {"sandboxId": sid})).structured_content["closed"] is True
    after = await refused(client, "run_python", {"code": "print(1)", "sandboxId": sid}, "sandbox_not_found")
    assert "create_sandbox" in after


async def check_outputs_come_back(client: Client) -> None:
    sid = await create(client)
    try:
        for arguments in ({"code": WRITE_OUTPUTS}, {"code": WRITE_OUTPUTS, "sandboxId": sid}):
            result = await ok(client, "run_python", arguments)
            assert result.structured_content["stdout"] == "written\n"
            outputs = [(o["path"], o["mimeType"]) for o in result.structured_content["outputs"]]
            assert outputs == [("data.csv", "text/csv"), ("plot.png", "image/png")], result.structured_content
            images = [block for block in result.content if block.type == "image"]
            assert images and images[0].mime_type == "image/png"
            assert base64.b64decode(images[0].data).startswith(b"\x89PNG")
            resources = [block for block in result.content if block.type == "resource"]
            assert resources and resources[0].resource.text == "a,b\n1,2\n"
    finally:
        await client.call_tool("close_sandbox", {"sandboxId": sid})


# --- Streamable HTTP ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_the_new_tools_are_listed(mcp: Mcp, mode: str) -> None:
    async with mcp.client(mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert {"create_sandbox", "upload_file", "download_file", "list_files", "close_sandbox"} <= set(tools)
    assert "sandboxId" in tools["run_python"].input_schema["properties"]
    assert "Without sandboxId" in tools["run_python"].description
    assert "multi-step" in tools["create_sandbox"].description
    assert set(tools["create_sandbox"].output_schema["properties"]) >= {"sandboxId", "expiresAt", "idleTimeoutMs"}


@pytest.mark.parametrize("mode", MODES)
async def test_a_sandbox_keeps_files_and_moves_them_in_and_out(mcp: Mcp, mode: str) -> None:
    async with mcp.client(mode=mode) as client:
        if mode == "auto":
            assert client.protocol_version == "2026-07-28"
        await check_sandbox_flow(client)


async def test_a_sandbox_outlives_the_connection_and_the_protocol(mcp: Mcp) -> None:
    async with mcp.client(mode="legacy") as legacy:
        sid = await create(legacy)
        await ok(legacy, "run_bash", {"code": "echo across > note", "sandboxId": sid})
    async with mcp.client(mode="auto") as stateless:
        read = await ok(stateless, "run_bash", {"code": "cat note", "sandboxId": sid})
        assert read.structured_content["stdout"] == "across\n"
        await ok(stateless, "close_sandbox", {"sandboxId": sid})


async def test_another_token_or_an_altered_id_is_refused(runner: Runner, mcp: Mcp) -> None:
    async with mcp.client() as client:
        sid = await create(client)
        middle = len(sid) // 2
        altered = sid[:middle] + ("B" if sid[middle] != "B" else "C") + sid[middle + 1 :]
        for bad in (altered, "sbx_" + "A" * 70, "not-an-id"):
            message = await refused(client, "run_python", {"code": "print(1)", "sandboxId": bad}, "invalid_sandbox_id")
            assert "create_sandbox" in message
        with running(start_mcp(runner)) as other:
            async with other.client() as stranger:
                message = await refused(stranger, "list_files", {"sandboxId": sid}, "invalid_sandbox_id")
                assert "create_sandbox" in message
        await ok(client, "close_sandbox", {"sandboxId": sid})


@pytest.mark.parametrize("mode", MODES)
async def test_outputs_come_back_as_image_content(mcp: Mcp, mode: str) -> None:
    """A PNG written to outputs/ arrives as image content, one-shot and in a sandbox."""
    async with mcp.client(mode=mode) as client:
        await check_outputs_come_back(client)


# --- stdio -------------------------------------------------------------------------------


def stdio(runner: Runner) -> Client:
    env = {"RUST_LOG": "warn", "SANDBOX_RUNNER_URL": runner.url, "SANDBOX_RUNNER_TOKEN": runner.token}
    return Client(StdioServerParameters(command=_bin("SANDBOX_MCP_BIN"), args=["stdio"], env=env), mode="legacy")


async def test_stdio_sandbox(runner: Runner) -> None:
    async with stdio(runner) as client:
        await check_sandbox_flow(client)


async def test_stdio_outputs_come_back_as_image_content(runner: Runner) -> None:
    """A PNG written to outputs/ arrives as image content, one-shot and in a sandbox."""
    async with stdio(runner) as client:
        await check_outputs_come_back(client)
