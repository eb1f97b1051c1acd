"""README.md says only what runs: every ```python block is run as written, and the sample table
is the real output of the command it names.

Each Python block runs alone (as a reader would paste it) in a fresh interpreter, against a
simulated runtime found the crictl way: ``CONTAINER_RUNTIME_ENDPOINT`` names a ``SimRuntime``
of this process (12 pods, seed 0, as ``--sim``), and no crictl config exists. The blocks are
found by their fence, so a block added to the README is run without a change here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from podcache.defaults import DEFAULT_SIM_PODS
from podcache.sim import SimRuntime

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK_TIMEOUT = 120.0  # a block that hangs (a watch that never ends) fails, never blocks CI
FENCE = re.compile(
    r"^(?P<indent>[ ]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


def blocks(text: str, language: str) -> list[tuple[int, str]]:
    """The fenced blocks of ``language``: (line number of the fence, the code). A fence
    indented inside a list item gives its code without that indentation."""
    found = []
    for match in FENCE.finditer(text):
        if match["info"].strip().split(" ")[0] == language:
            indent = len(match["indent"])
            code = "".join(line[indent:] for line in match["body"].splitlines(keepends=True))
            found.append((text.count("\n", 0, match.start()) + 1, code))
    return found


PYTHON_BLOCKS = blocks(README.read_text(encoding="utf-8"), "python")


def test_the_readme_has_python_blocks_and_the_fence_parser_finds_them() -> None:
    sample = "x\n```python\nprint(1)\n```\n```sh\nls\n```\n```python title\nprint(2)\n```\n"
    assert blocks(sample, "python") == [(2, "print(1)\n"), (8, "print(2)\n")]
    listed = "- item:\n\n  ```yaml\n  a:\n    b: 1\n  ```\n"
    assert blocks(listed, "yaml") == [(3, "a:\n  b: 1\n")]
    assert len(PYTHON_BLOCKS) >= 2  # the thread and the asyncio examples


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(DEFAULT_SIM_PODS, seed=0) as runtime:
        yield runtime


@pytest.mark.parametrize(
    "code", [code for _, code in PYTHON_BLOCKS], ids=[f"README.md:{n}" for n, _ in PYTHON_BLOCKS]
)
def test_each_python_block_runs_as_written(sim: SimRuntime, tmp_path: Path, code: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CRI_CONFIG_FILE"}
    env["CONTAINER_RUNTIME_ENDPOINT"] = sim.endpoint
    env["CRI_CONFIG_FILE"] = str(tmp_path / "no-crictl.yaml")
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", str(script)],
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, f"the block failed:\n{code}\n--- stderr:\n{done.stderr}"
    assert done.stderr == "", done.stderr  # no warning (unclosed resources, deprecations)


def sample_after(text: str, words: str) -> list[str]:
    """The lines of the first ```text block after ``words``."""
    start = text.index(words)
    body = next(code for line, code in blocks(text[start:], "text"))
    return body.splitlines()


def test_the_sample_table_is_the_whole_real_output_of_pods_sim() -> None:
    sample = sample_after(
        README.read_text(encoding="utf-8"), "Real output of `podcache pods --sim`"
    )
    done = subprocess.run(
        [str(Path(sys.executable).parent / "podcache"), "pods", "--sim"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "CONTAINER_RUNTIME_ENDPOINT"},
        check=True,
    )
    notice = re.sub(r"podcache-sim-\w+", "podcache-sim-XXXXXXXX", done.stderr.strip())
    assert sample[0] == notice
    assert sample[1:] == done.stdout.splitlines()  # every row: nothing cut


def test_the_changelog_names_this_version_and_gives_upgrade_notes() -> None:
    from podcache import __version__

    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert headings[0] == "Unreleased" and __version__ in headings, headings
    unreleased = text.split("\n## ")[1]
    assert "### Upgrade notes" in unreleased
