"""Complexity is checked, not switched off: the ruff settings and every ``noqa`` (issue 16 item 7).

ruff itself enforces the limits; these tests keep the limits from being quietly turned off: the
complexity rules stay selected and out of the global ignore list, per-file ignores of them name
the work that removes them, and every ``noqa`` says why on its own line.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COMPLEXITY = ("PLR0911", "PLR0912", "PLR0915", "C901")
_NOQA = re.compile(r"#\s*(?:ruff:\s*)?noqa(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?(.*)$")


def _lint() -> dict[str, Any]:
    lint: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"][
        "lint"
    ]
    return lint


def test_the_complexity_rules_are_selected_and_not_ignored() -> None:
    lint = _lint()
    selected = set(lint["select"])
    assert all(rule in selected or rule[:2] in selected for rule in COMPLEXITY)
    assert not set(COMPLEXITY) & set(lint.get("ignore", ()))
    assert lint["mccabe"]["max-complexity"] <= 10


def test_per_file_complexity_ignores_say_what_removes_them() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    for pattern, rules in _lint()["per-file-ignores"].items():
        if set(rules) & set(COMPLEXITY):
            line = text.index(f'"{pattern}"')
            comment = text.rfind("\n#", 0, line)
            assert comment != -1 and "helper" in text[comment:line], (
                f"{pattern}: a complexity ignore needs a comment above it naming the work "
                "that removes it"
            )


def _sources() -> list[Path]:
    return sorted(
        path
        for top in ("src", "tests", "benchmarks")
        for path in (ROOT / top).rglob("*.py")
        if "proto" not in path.relative_to(ROOT).parts
    )


def test_every_noqa_gives_its_reason_on_the_same_line() -> None:
    bare = []
    for path in _sources():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = _NOQA.search(line)
            if match is not None and not re.search(r"[a-z]{3}", match[1]):
                bare.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bare, "a noqa without a reason:\n" + "\n".join(bare)


def test_the_noqa_check_tells_a_reason_from_none() -> None:
    marker = "# " + "noqa"  # split, so this file's own lines are not found by the check
    with_reason = _NOQA.search(f"x = 1  {marker}: PLW2901 -- the loop rebinds on purpose")
    without = _NOQA.search(f"def Status(  {marker}: N802")
    assert with_reason is not None and re.search(r"[a-z]{3}", with_reason[1])
    assert without is not None and not re.search(r"[a-z]{3}", without[1])
