"""Pause, snapshots and forks (pause_sandbox, snapshot_sandbox, fork_sandbox, and
create_sandbox with snapshotId) through the official Python SDK against the real runner.
"""

from __future__ import annotations

import anyio
import pytest

from conftest import Mcp, Runner, running, start_mcp
from mcp.client import Client

pytestmark = [pytest.mark.anyio, pytest.mark.runner]

# The longest one call may take here (a wake, a fork of three, on a busy machine).
CALL_LIMIT = 60


def text(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def call(client: Client, name: str, arguments: dict):
    with anyio.fail_after(CALL_LIMIT):
        return await client.call_tool(name, arguments)


async def ok(client: Client, name: str, arguments: dict) -> dict:
    result = await call(client, name, arguments)
    assert result.is_error is False, f"{name}: {text(result)}"
    assert result.structured_content["error"] is None, result.structured_content
    return result.structured_content


async def refused(client: Client, name: str, arguments: dict, code: str) -> str:
    result = await call(client, name, arguments)
    assert result.is_error is True, f"{name}: {text(result)}"
    assert result.structured_content["error"]["code"] == code, result.structured_content
    return text(result)


async def bash(client: Client, sid: str, code: str) -> dict:
    return await ok(client, "run_bash", {"code": code, "sandboxId": sid})


async def test_a_paused_sandbox_wakes_at_its_next_run(mcp: Mcp) -> None:
    async with mcp.client() as client:
        sid = (await ok(client, "create_sandbox", {}))["sandboxId"]
        await bash(client, sid, "echo kept > ~/kept.txt")
        await ok(client, "run_python", {"code": "x = 1", "sandboxId": sid})
        paused = await ok(client, "pause_sandbox", {"sandboxId": sid})
        assert paused["paused"] is True and paused["bytes"] > 0 and paused["pausedAt"]
        result = await call(
            client, "run_python", {"code": "print(open('kept.txt').read(), 'x' in globals())", "sandboxId": sid}
        )
        assert result.is_error is False, text(result)
        woken = result.structured_content
        assert woken["stdout"] == "kept\n False\n", woken
        assert woken["resumed"] is True and woken["stateLost"] is True, woken
        assert "this call woke it" in text(result)
        assert (await bash(client, sid, "true"))["resumed"] is False
        await ok(client, "close_sandbox", {"sandboxId": sid})


async def test_a_snapshot_starts_new_sandboxes_with_its_files(mcp: Mcp) -> None:
    async with mcp.client() as client:
        sid = (await ok(client, "create_sandbox", {}))["sandboxId"]
        await bash(client, sid, "mkdir -p data && echo good > data/state")
        taken = await ok(client, "snapshot_sandbox", {"sandboxId": sid})
        snapshot_id = taken["snapshotId"]
        assert snapshot_id.startswith("snap_") and taken["expiresAt"], taken
        await bash(client, sid, "echo broken > data/state")
        made = (await ok(client, "create_sandbox", {"snapshotId": snapshot_id}))["sandboxId"]
        assert made != sid
        assert (await bash(client, made, "cat data/state"))["stdout"] == "good\n"
        assert (await bash(client, sid, "cat data/state"))["stdout"] == "broken\n"
        for each in (sid, made):
            await ok(client, "close_sandbox", {"sandboxId": each})


async def test_three_forks_are_independent(mcp: Mcp) -> None:
    async with mcp.client() as client:
        sid = (await ok(client, "create_sandbox", {}))["sandboxId"]
        await bash(client, sid, "echo base > common")
        forks = (await ok(client, "fork_sandbox", {"sandboxId": sid, "count": 3}))["sandboxIds"]
        assert len(forks) == 3 and len({sid, *forks}) == 4, forks
        for i, fork in enumerate(forks):
            await bash(client, fork, f"echo {i} > mine; echo changed-{i} >> common")
        for i, fork in enumerate(forks):
            out = await bash(client, fork, "cat mine common")
            assert out["stdout"] == f"{i}\nbase\nchanged-{i}\n", out
        assert (await bash(client, sid, "cat common; ls mine 2>&1 || true"))["stdout"].startswith("base\n")
        for each in (sid, *forks):
            await ok(client, "close_sandbox", {"sandboxId": each})


async def test_another_tokens_and_tampered_handles_are_refused(runner: Runner, mcp: Mcp) -> None:
    async with mcp.client() as client:
        sid = (await ok(client, "create_sandbox", {}))["sandboxId"]
        snapshot_id = (await ok(client, "snapshot_sandbox", {"sandboxId": sid}))["snapshotId"]
        middle = len(snapshot_id) // 2
        tampered = snapshot_id[:middle] + ("B" if snapshot_id[middle] != "B" else "C") + snapshot_id[middle + 1 :]
        for bad in (tampered, sid, "snap_" + "A" * 70):
            message = await refused(client, "create_sandbox", {"snapshotId": bad}, "invalid_snapshot_id")
            assert "snapshot_sandbox" in message
        with running(start_mcp(runner)) as other:
            async with other.client() as stranger:
                message = await refused(stranger, "create_sandbox", {"snapshotId": snapshot_id}, "invalid_snapshot_id")
                assert "snapshot_sandbox" in message
                for name in ("pause_sandbox", "snapshot_sandbox", "fork_sandbox"):
                    await refused(stranger, name, {"sandboxId": sid}, "invalid_sandbox_id")
        # The holder still can.
        made = (await ok(client, "create_sandbox", {"snapshotId": snapshot_id}))["sandboxId"]
        for each in (sid, made):
            await ok(client, "close_sandbox", {"sandboxId": each})


async def test_the_tools_say_when_to_use_them(mcp: Mcp) -> None:
    async with mcp.client() as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert "long wait" in tools["pause_sandbox"].description
    assert "alternatives" in tools["fork_sandbox"].description
    assert "known good state" in tools["snapshot_sandbox"].description
    assert "snapshotId" in tools["create_sandbox"].input_schema["properties"]
    assert tools["fork_sandbox"].output_schema["properties"]["sandboxIds"]["type"] == "array"
