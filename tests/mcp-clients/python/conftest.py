"""Fixtures that start the real binaries on loopback.

SANDBOX_MCP_BIN and SANDBOX_RUNNER_BIN name the binaries. Tests marked `runner` need a real
sandbox-runner; every other test runs sandbox-mcp alone.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Iterator

import httpx2
import pytest

from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

START_TIMEOUT = 60.0



def _bin(var: str) -> str:
    path = os.environ.get(var)
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"{var} must name the built binary (got {path!r})")
    return path


@dataclass
class Proc:
    """A started server: its process, the URL it printed and its stderr so far."""

    process: subprocess.Popen[str]
    url: str
    stderr: list[str] = field(default_factory=list)
    stderr_reader: threading.Thread | None = None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.stderr_reader is not None:
            self.stderr_reader.join(5)


def start(argv: list[str], env: dict[str, str], prefix: str) -> Proc:
    """Starts a server and waits for its one stdout line `<prefix> http://ADDR...`."""
    process = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr: list[str] = []
    assert process.stderr is not None
    stderr_reader = threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True)
    stderr_reader.start()
    line: list[str] = []
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: line.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT)
    if not line or not line[0].startswith(prefix):
        process.kill()
        raise RuntimeError(f"{argv[0]} did not start: stdout={line!r} stderr={''.join(stderr)[-2000:]}")
    return Proc(process, line[0].split()[-1], stderr, stderr_reader)


@dataclass
class Runner:
    proc: Proc
    token: str

    @property
    def url(self) -> str:
        return self.proc.url


def start_runner() -> Runner:
    token = secrets.token_hex(16)
    argv = [_bin("SANDBOX_RUNNER_BIN"), "serve", "--listen", "127.0.0.1:0", "--token", token, "--pool-size", "2"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_")}
    # A data folder of its own: no two runners may share one.
    env["RUNNER_DATA_DIR"] = os.path.join(tempfile.mkdtemp(prefix="runner-data-"), "data")
    return Runner(start(argv, env, "sandbox-runner listening on "), token)


@dataclass
class Mcp:
    proc: Proc
    token: str

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}

    def client(self, token: str | None = None, mode: str = "legacy", **kwargs) -> Client:
        http = httpx2.AsyncClient(headers=self.headers(token), timeout=httpx2.Timeout(60.0))
        return Client(streamable_http_client(self.url, http_client=http), mode=mode, **kwargs)


def start_mcp(runner: Runner | None = None, **env_extra: str) -> Mcp:
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDBOX_", "MCP_", "FEATURE_"))}
    env.update({"MCP_AUTH_TOKEN": token, "PORT": "0", "BIND": "127.0.0.1", "RUST_LOG": "info"})
    if runner is not None:
        env.update({"SANDBOX_RUNNER_URL": runner.url, "SANDBOX_RUNNER_TOKEN": runner.token})
    env.update(env_extra)
    return Mcp(start([_bin("SANDBOX_MCP_BIN"), "serve"], env, "sandbox-mcp listening on "), token)


@contextlib.contextmanager
def running(server: Mcp | Runner) -> Iterator[Mcp | Runner]:
    try:
        yield server
    finally:
        server.proc.stop()


@pytest.fixture(scope="session")
def runner() -> Iterator[Runner]:
    with running(start_runner()) as r:
        yield r


@pytest.fixture(scope="session")
def mcp(runner: Runner) -> Iterator[Mcp]:
    """sandbox-mcp wired to the shared runner."""
    with running(start_mcp(runner)) as m:
        yield m


@pytest.fixture(scope="session")
def mcp_unconfigured() -> Iterator[Mcp]:
    """sandbox-mcp without SANDBOX_RUNNER_URL."""
    with running(start_mcp()) as m:
        yield m


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
