"""Complexity is checked, not switched off: the ruff settings and every ``noqa``,
function length and radon's grades.

ruff itself enforces the limits; these tests keep the limits from being quietly turned off: the
complexity rules stay selected and out of the global ignore list, per-file ignores of them name
the work that removes them, and every ``noqa`` says why on its own line. What ruff does not
check is checked here: no function in src/ over 50 lines (but those listed with the work that
removes them), no block radon grades D or worse (``radon cc -n D src/``), at most
``MAX_C_BLOCKS`` graded C, and every module's maintainability index graded A or B
(``radon mi src/``).
"""

from __future__ import annotations

import ast
import re
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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


# -- function length and radon's grades ---------------------------------------------------------
MAX_FUNCTION_LINES = 50
"""Most lines of a function in src/, from its ``def`` to its last line (decorators not
counted, its signature and docstring counted): the project's rule, "no function over 50 lines
except declarative data" (data goes in module-level constants, not in a function)."""

LONG_FUNCTIONS: dict[str, str] = {}
"""Functions over the limit today, each with the work that removes it (an entry whose
function is no longer over the limit fails, so the list only shrinks)."""


def function_lengths(source: str) -> Iterator[tuple[str, int]]:
    """``(qualified name, lines)`` for every function and method of ``source``."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                yield name, (child.end_lineno or child.lineno) - child.lineno + 1
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")

    yield from walk(ast.parse(source), "")


def _src_modules() -> list[Path]:
    return sorted(
        path for path in (ROOT / "src").rglob("*.py") if "proto" not in path.relative_to(ROOT).parts
    )


def _long_functions() -> dict[str, int]:
    return {
        f"{path.relative_to(ROOT)}::{name}": lines
        for path in _src_modules()
        for name, lines in function_lengths(path.read_text())
        if lines > MAX_FUNCTION_LINES
    }


def test_no_function_is_over_50_lines() -> None:
    over = {name: lines for name, lines in _long_functions().items() if name not in LONG_FUNCTIONS}
    assert not over, (
        f"functions over {MAX_FUNCTION_LINES} lines (split them, or make their data a "
        f"module-level constant): {over}"
    )


def test_every_long_function_excused_is_still_long() -> None:
    stale = set(LONG_FUNCTIONS) - set(_long_functions())
    assert not stale, f"no longer over {MAX_FUNCTION_LINES} lines: drop them from the list: {stale}"


@pytest.mark.parametrize(("lines", "over"), [(50, False), (51, True)])
def test_the_length_check_counts_from_def_to_the_last_line(lines: int, over: bool) -> None:
    body = "".join(f"    x{n} = {n}\n" for n in range(lines - 1))
    source = f"class C:\n    @staticmethod\n    def f() -> None:\n{textwrap.indent(body, '    ')}"
    assert dict(function_lengths(source)) == {"C.f": lines}
    assert (lines > MAX_FUNCTION_LINES) is over


def test_radon_grades_no_function_d_or_worse() -> None:
    """``radon cc -n D src/`` prints nothing: every block's cyclomatic complexity is at most 20."""
    from radon.complexity import cc_rank, cc_visit

    graded = [
        f"{path.relative_to(ROOT)}: {block.fullname} {cc_rank(block.complexity)} "
        f"({block.complexity})"
        for path in _src_modules()
        for block in cc_visit(path.read_text())
        if cc_rank(block.complexity) >= "D"
    ]
    assert not graded, f"radon grades these D or worse: {graded}"


MAX_C_BLOCKS = 23
"""Most blocks radon may grade C (cyclomatic complexity 11 to 20) in src/: a function past
10 is split by concern, or stays one of these few."""


def _c_blocks() -> list[str]:
    from radon.complexity import cc_rank, cc_visit

    return [
        f"{path.relative_to(ROOT)}: {block.fullname} ({block.complexity})"
        for path in _src_modules()
        for block in cc_visit(path.read_text())
        if cc_rank(block.complexity) == "C"
    ]


def test_radon_grades_few_blocks_c() -> None:
    """``radon cc -n C src/`` lists at most ``MAX_C_BLOCKS`` blocks."""
    graded = _c_blocks()
    assert len(graded) <= MAX_C_BLOCKS, f"{len(graded)} blocks graded C: {graded}"


def test_the_c_count_sees_a_c_block() -> None:
    """The count reads radon's grade: a function of 11 branches is one C block."""
    from radon.complexity import cc_rank, cc_visit

    branches = "".join(f"    if x == {n}:\n        return {n}\n" for n in range(10))
    (block,) = cc_visit(f"def f(x):\n{branches}    return -1\n")
    assert (block.complexity, cc_rank(block.complexity)) == (11, "C")


def test_radon_grades_every_module_a_or_b() -> None:
    """``radon mi src/``: every module's maintainability index is A or B (at least 10)."""
    from radon.metrics import mi_rank, mi_visit

    graded = {
        str(path.relative_to(ROOT)): round(index, 2)
        for path in _src_modules()
        if mi_rank(index := mi_visit(path.read_text(), multi=True)) not in ("A", "B")
    }
    assert not graded, f"radon grades these modules' maintainability C: {graded}"
