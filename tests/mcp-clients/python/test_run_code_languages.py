"""A hello world in every language the runner offers, through `run_code` with the official
Python SDK: at least 32 are offered where the toolchains are installed (the test command's
scripts/test-toolchains puts them in), every offered one has a program in
tests/languages/hello-world.json, and each program prints `hello world` and exits 0
(isError false, no compile error).

The calls go out CONCURRENCY at a time, one bounded call per language, once for the module;
each language's test then checks its own result.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest

from conftest import Mcp, Runner

pytestmark = [pytest.mark.runner]

HELLO_WORLD = json.loads((Path(__file__).parents[2] / "languages" / "hello-world.json").read_text())
PROGRAMS: dict[str, str] = HELLO_WORLD["programs"]
EXPECTED: str = HELLO_WORLD["stdout"]
AT_LEAST = 32  # the count, on a machine where scripts/test-toolchains ran
CONCURRENCY = 2  # the suite's runner has a pool of 2 (and refuses a request that waits 5 s for one)
# The runner bounds each run (its timeout plus the row's compile time, 120 s at most for
# the slow compilers); the SDK's pings keep a hung call open, so each call is bounded here.
CALL_TIMEOUT = 240


@dataclass
class Outcome:
    """One language's call: its result, or why there is none, and how long it took."""

    seconds: float
    result: object | None = None
    error: str | None = None


def offered(runner: Runner) -> dict[str, str]:
    """The runner's languages, name to version, from its /health."""
    answer = httpx2.get(
        f"{runner.url}/health", headers={"Authorization": f"Bearer {runner.token}"}, timeout=30
    )
    answer.raise_for_status()
    return {lang["name"]: lang["version"] for lang in answer.json()["languages"]}


async def call_each(mcp: Mcp, languages: list[str]) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    limit = anyio.Semaphore(CONCURRENCY)
    async with mcp.client(mode="auto") as client:

        async def one(language: str) -> None:
            async with limit:
                started = time.monotonic()
                arguments = {"language": language, "code": PROGRAMS[language]}
                try:
                    with anyio.fail_after(CALL_TIMEOUT):
                        result = await client.call_tool("run_code", arguments)
                    outcomes[language] = Outcome(time.monotonic() - started, result=result)
                except Exception as e:  # this language's test reports it
                    outcomes[language] = Outcome(time.monotonic() - started, error=repr(e))

        async with anyio.create_task_group() as group:
            for language in languages:
                group.start_soon(one, language)
    return outcomes


@pytest.fixture(scope="module")
def languages(runner: Runner) -> dict[str, str]:
    return offered(runner)


@pytest.fixture(scope="module")
def outcomes(mcp: Mcp, languages: dict[str, str]) -> dict[str, Outcome]:
    known = [name for name in languages if name in PROGRAMS]
    started = time.monotonic()
    results = anyio.run(call_each, mcp, known)
    print(f"\nrun_code: {len(known)} languages in {time.monotonic() - started:.1f} s, {CONCURRENCY} at a time")
    return results


def text(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


def test_at_least_32_languages_are_offered_each_with_a_program(languages: dict[str, str]) -> None:
    assert len(languages) >= AT_LEAST, (
        f"{len(languages)} offered (run scripts/test-toolchains, which the test command runs): "
        f"{sorted(languages)}"
    )
    missing = sorted(set(languages) - set(PROGRAMS))
    assert not missing, f"offered, no program in tests/languages/hello-world.json: {missing}"


@pytest.mark.parametrize("language", list(PROGRAMS))
def test_hello_world_through_run_code(
    language: str, languages: dict[str, str], outcomes: dict[str, Outcome]
) -> None:
    if language not in languages:
        pytest.skip(f"{language} is not offered (its toolchain is missing)")
    outcome = outcomes[language]
    assert outcome.error is None, f"{language} ({outcome.seconds:.1f} s): {outcome.error}"
    result = outcome.result
    report = result.structured_content
    assert result.is_error is False, f"{language}: {text(result)}"
    assert report["stdout"] == EXPECTED, f"{language} {languages[language]}: {report}"
    assert report["exitCode"] == 0 and report["compileError"] is False, f"{language}: {report}"
