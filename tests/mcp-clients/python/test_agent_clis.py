"""Agent CLIs nobody on the team wrote, driven against `sandbox-mcp up` with the lines its
banner prints, before and after a restart: Claude Code (`claude mcp add`, `add-json`,
`list`) and Codex (`config.toml` and its app-server listing and calling the tools). Neither
needs a model or a login for this. The CLIs are the npm packages pinned in ../cli
(run.sh installs them)."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import Proc, _bin

CLI_BIN = Path(__file__).resolve().parent.parent / "cli" / "node_modules" / ".bin"
TIMEOUT = 90


def _cli(name: str) -> str:
    path = CLI_BIN / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: run tests/mcp-clients/run.sh (it installs ../cli)")
    return str(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Up:
    """`sandbox-mcp up` on a fixed port with its own state folder; `lines` is its banner."""

    def __init__(self, state: Path, port: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_", "SANDBOX_RUNNER"))}
        env.update(XDG_STATE_HOME=str(state), PORT=str(port), RUNNER_POOL_SIZE="1", RUST_LOG="warn")
        self.process = subprocess.Popen(
            [_bin("SANDBOX_MCP_BIN"), "up"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.proc = Proc(self.process, url="")
        self.lines: list[str] = []
        assert self.process.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if line.startswith("Stop with Ctrl-C"):
                return
        self.stop()
        raise RuntimeError(f"up did not print its banner: {self.lines}")

    def line_with(self, needle: str) -> str:
        return next(line.strip() for line in self.lines if needle in line)

    def codex_toml(self) -> str:
        start = next(i for i, line in enumerate(self.lines) if line.strip() == "[mcp_servers.sandbox]")
        block = []
        for line in self.lines[start:]:
            if not line.strip():
                break
            block.append(line.strip())
        return "\n".join(block) + "\n"

    @property
    def token(self) -> str:
        return self.line_with("Bearer token:").split()[2]

    def stop(self) -> None:
        self.proc.stop()


def _claude(home: Path, *args: str) -> str:
    env = dict(os.environ, HOME=str(home), DISABLE_AUTOUPDATER="1", DISABLE_TELEMETRY="1")
    done = subprocess.run(
        [_cli("claude"), *args], env=env, cwd=home, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, f"claude {args}: {done.stdout}{done.stderr}"
    return done.stdout


def _paste(home: Path, line: str) -> None:
    """Runs a `claude ...` line as the banner printed it, through a shell."""
    assert line.startswith("claude mcp add"), line
    env = dict(os.environ, HOME=str(home), DISABLE_AUTOUPDATER="1", DISABLE_TELEMETRY="1")
    env["PATH"] = f"{CLI_BIN}:{env['PATH']}"
    done = subprocess.run(["bash", "-c", line], env=env, cwd=home, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"


class CodexAppServer:
    """Codex's app-server over stdio (JSON-RPC lines), with `config.toml` in `home`."""

    def __init__(self, home: Path) -> None:
        env = dict(os.environ, CODEX_HOME=str(home))
        self.process = subprocess.Popen(
            [_cli("codex"), "app-server"],
            env=env,
            cwd=home,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.next_id = 0
        self.request("initialize", {"clientInfo": {"name": "sandbox-mcp-tests", "version": "1"}})
        self.send({"method": "initialized"})

    def send(self, message: dict) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        assert self.process.stdout is not None
        deadline = time.monotonic() + TIMEOUT
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if not ready:
                break
            line = self.process.stdout.readline()
            if not line:
                break
            message = json.loads(line)
            if message.get("id") == self.next_id:
                assert "error" not in message, f"{method}: {message}"
                return message["result"]
        raise AssertionError(f"codex app-server did not answer {method}")

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def _codex_checks(home: Path) -> None:
    codex = CodexAppServer(home)
    try:
        servers = codex.request("mcpServerStatus/list", {})["data"]
        sandbox = next(s for s in servers if s["name"] == "sandbox")
        assert {"run_bash", "run_python", "run_node"} <= set(sandbox["tools"]), sandbox
        thread = codex.request("thread/start", {})["thread"]["id"]
        result = codex.request(
            "mcpServer/tool/call",
            {"server": "sandbox", "threadId": thread, "tool": "run_python", "arguments": {"code": "print(6 * 7)"}},
        )
        assert result["isError"] is False, result
        assert result["structuredContent"]["stdout"] == "42\n", result
    finally:
        codex.close()


def _connected(listing: str, name: str, url: str) -> bool:
    return re.search(rf"^{name}: {re.escape(url)} \(HTTP\) - \S+ Connected$", listing, re.M) is not None


def test_claude_code_and_codex_connect_with_the_banners_lines_across_a_restart() -> None:
    work = Path(tempfile.mkdtemp(prefix="agent-clis-"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    add_home, json_home, codex_home = work / "claude-add", work / "claude-add-json", work / "codex"
    for home in (add_home, json_home, codex_home):
        home.mkdir()
    up = Up(work / "state", port)
    try:
        token = up.token
        # Pasted once, each into its own client.
        _paste(add_home, up.line_with("claude mcp add --transport http"))
        _paste(json_home, up.line_with("claude mcp add-json"))
        (codex_home / "config.toml").write_text(up.codex_toml())
        for home in (add_home, json_home):
            listing = _claude(home, "mcp", "list")
            assert _connected(listing, "sandbox", url), listing
        _codex_checks(codex_home)

        up.stop()
        up = Up(work / "state", port)
        assert up.token == token, "a restart keeps the token"
        for home in (add_home, json_home):
            listing = _claude(home, "mcp", "list")
            assert _connected(listing, "sandbox", url), f"after a restart: {listing}"
        _codex_checks(codex_home)

        # A wrong token is refused plainly: no OAuth flow is started.
        _claude(add_home, "mcp", "add", "--transport", "http", "wrong", url, "--header", "Authorization: Bearer wrong-token")
        listing = _claude(add_home, "mcp", "list")
        wrong = next(line for line in listing.splitlines() if line.startswith("wrong:"))
        assert "Failed to connect" in wrong and "401" in wrong, wrong
    finally:
        up.stop()
        shutil.rmtree(work, ignore_errors=True)
