"""The main job installs the runtime only; the test and benchmark jobs add the dev tools.

Static checks of the scripts and of pyproject.toml (running a fresh install is the job of the
before/after timing in the maintenance notes, not of a unit test).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEV_TOOLS = ("pytest", "mypy", "ruff", "hypothesis", "schemathesis", "kubectl", "matplotlib")


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()


def _setup_calls(script: str) -> list[str]:
    """The argument lists every line of ``script`` passes to ./scripts/setup."""
    text = (ROOT / script).read_text()
    return [m.group(1).strip() for m in re.finditer(r"^\./scripts/setup\b(.*)$", text, re.M)]


def test_the_runtime_dependencies_hold_no_development_tool() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_requirement_name(r) for r in project["dependencies"]}
    dev = {_requirement_name(r) for r in project["optional-dependencies"]["dev"]}
    assert not runtime & dev
    assert not [name for name in runtime for tool in DEV_TOOLS if tool in name]


def test_the_main_job_sets_up_the_runtime_only() -> None:
    assert _setup_calls("scripts/run") == [""]


@pytest.mark.parametrize("script", ["scripts/test", "benchmarks/run"])
def test_the_test_and_benchmark_jobs_add_the_dev_tools(script: str) -> None:
    assert _setup_calls(script) == ["--dev"]
