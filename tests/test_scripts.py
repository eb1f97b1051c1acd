"""The main job installs the runtime only; the test and benchmark jobs add the dev tools.

Static checks of the scripts and of pyproject.toml (running a fresh install is the job of the
before/after timing in the maintenance notes, not of a unit test).
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.containerd.harness import instance_cgroup_parent

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


@pytest.mark.parametrize("directory", ["/tmp/podcache-containerd/1.7", "/tmp/pc-ctd-21/2.1"])
def test_the_harness_and_containerd_down_agree_on_an_instance_cgroup_parent(
    directory: str,
) -> None:
    """Each instance's pods live under a cgroup parent of their own (containerd-down kills what
    is left under it, so a shared one let one instance's teardown kill another's pods); the
    script's own line computes it, as the harness does."""
    line = next(
        text
        for text in (ROOT / "scripts/containerd-down").read_text().splitlines()
        if text.startswith("CGPARENT=")
    )
    env = {"PATH": os.environ.get("PATH", os.defpath), "B": directory}
    script = f'{line}\nprintf "%s" "$CGPARENT"'
    computed = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert computed == instance_cgroup_parent(f"{directory}/containerd.sock")
    assert computed.startswith("podcachetest-")
    assert instance_cgroup_parent("/tmp/a/1.7/containerd.sock") != instance_cgroup_parent(
        "/tmp/b/1.7/containerd.sock"
    )
