"""docs/architecture.md is the design the code cites: its layers hold, its citations resolve.

- Every ``podcache`` import in src/ (also inside functions and under TYPE_CHECKING) goes to a
  layer its own layer may import (docs/architecture.md §2), the layer table has no cycle, and
  every layer of the table is named in §2.
- Every citation ``docs/architecture.md §N`` (and ``§N rule(s) ...``) in src/, tests/ and
  benchmarks/ names a section (and rules) that exist; nothing cites the founding brief
  (DESIGN.md), which is not in the repository.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"
CITING = ("src", "tests", "benchmarks")

_BELOW_SERVE = {
    "podcache",
    "model",
    "ipaddr",
    "errors",
    "duration",
    "defaults",
    "unixsocket",
    "procs",
    "jsonview",
    "cache",
    "watchjson",
    "cri",
    "cri.wire",
    "cri.proto",
    "sim",
}
LAYERS: dict[str, set[str]] = {
    "model": {"errors", "ipaddr"},
    "ipaddr": set(),
    "errors": set(),
    "duration": set(),
    "defaults": set(),
    "unixsocket": set(),
    "procs": {"errors"},
    "jsonview": {"model"},
    "cache": {"model", "errors", "procs"},
    "watchjson": {"cache", "jsonview"},
    "fake": {"model", "errors"},
    "cri.proto": set(),
    "cri.wire": set(),
    "cri": {"model", "errors", "cri.proto", "cri.wire"},
    "podcache": {"model", "errors", "cache", "fake", "jsonview", "procs"},
    "sim": {"podcache", "cri.proto", "unixsocket", "defaults"},
    "serve.response": {"errors"},
    "serve.http1": {"serve.response"},
    "serve.eventhub": {"model", "errors"},
    "serve.crisock": {
        "model",
        "errors",
        "unixsocket",
        "cache",
        "cri",
        "cri.wire",
        "cri.proto",
        "serve.eventhub",
    },
    "serve": _BELOW_SERVE | {"serve.http1", "serve.response", "serve.eventhub", "serve.crisock"},
    "cli": _BELOW_SERVE,
}
"""Layer -> the layers it may import (docs/architecture.md §2). Within a layer, imports are free."""


def layer_of(module: str) -> str:
    """``podcache.cri.proto.api_pb2`` -> ``cri.proto``; ``podcache.serve.app`` -> ``serve``;
    ``podcache.serve.http1.parsing`` -> ``serve.http1``."""
    parts = module.split(".")
    if parts[0] != "podcache":
        raise ValueError(f"{module} is not a podcache module")
    if parts[1:3] in (
        ["cri", "proto"],
        ["cri", "wire"],
        ["serve", "http1"],
        ["serve", "response"],
        ["serve", "eventhub"],
        ["serve", "crisock"],
    ):
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 else "podcache"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(module: str, source: str, *, package: bool = False) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every podcache module that ``source`` (of ``module``) imports."""
    home = module if package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
            if node.level:  # relative: resolved against this module's package
                parts = home.split(".")
                base = parts[: len(parts) - node.level + 1]
                names = [".".join([*base, node.module] if node.module else base)]
        else:
            continue
        yield from ((node.lineno, n) for n in names if n.split(".")[0] == "podcache")


def violations(module: str, source: str, *, package: bool = False) -> list[str]:
    """The imports of ``source`` that its layer may not make."""
    own = layer_of(module)
    return [
        f"line {line}: {name} (layer {layer_of(name)!r})"
        for line, name in imports_of(module, source, package=package)
        if layer_of(name) != own and layer_of(name) not in LAYERS[own]
    ]


def _source_files() -> list[Path]:
    return sorted(p for p in (SRC / "podcache").rglob("*.py") if "proto" not in p.parts)


def test_the_source_tree_has_modules_to_check() -> None:
    assert len(_source_files()) > 30


@pytest.mark.parametrize("path", _source_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_follow_the_layers(path: Path) -> None:
    module = _module_name(path)
    own = layer_of(module)
    assert own in LAYERS, (
        f"{path.relative_to(ROOT)} is in layer {own!r}, which docs/architecture.md §2 and "
        "LAYERS here do not list: add it to both"
    )
    wrong = violations(module, path.read_text(), package=path.name == "__init__.py")
    assert not wrong, (
        f"{path.relative_to(ROOT)} (layer {own!r}, may import {sorted(LAYERS[own])}) imports "
        f"across the layers of docs/architecture.md §2: {wrong}"
    )


@pytest.mark.parametrize(
    ("module", "source", "found"),
    [
        ("podcache.model", "from podcache.cache import RuntimeCache", ["podcache.cache"]),
        ("podcache.cache.core", "import podcache.cri.client", ["podcache.cri.client"]),
        ("podcache.cri.client", "from ..cache import core", ["podcache.cache"]),
        ("podcache.sim.server", "from podcache.cri.convert import Memo", ["podcache.cri.convert"]),
        ("podcache.serve.app", "def f():\n    from podcache.cli import main", ["podcache.cli"]),
        ("podcache.sim.server", "from podcache.cri.proto import api_pb2", []),
        ("podcache.serve.app", "from . import snapshot", []),
    ],
)
def test_the_layer_check_reports_what_crosses(module: str, source: str, found: list[str]) -> None:
    reported = violations(module, source)
    assert [text.split(" ")[2] for text in reported] == found


def test_the_layers_have_no_cycle() -> None:
    try:
        tuple(TopologicalSorter(LAYERS).static_order())
    except CycleError as error:
        pytest.fail(f"the layers of docs/architecture.md §2 import each other in a cycle: {error}")


def test_every_layer_is_named_in_the_document() -> None:
    section = sections()[2]
    missing = [layer for layer in LAYERS if f"`{layer}`" not in section]
    assert not missing, f"docs/architecture.md §2 does not name the layers {missing}"


# -- citations -----------------------------------------------------------------------------
_HEADING = re.compile(r"^## (\d+)\. ", re.M)
_RULE = re.compile(r"^(\d+)\. ", re.M)
_CITATION = re.compile(
    r"docs/architecture\.md\s+§(\d+)(?:,?\s+rules?\s+(\d+(?:\s*(?:-|,|and)\s*\d+)*))?"
)
_LOOSE = re.compile(r"DESIGN\.md|(?:semantics|the cache's rule)\s+\d", re.I)


def sections() -> dict[int, str]:
    """Section number -> its text, from docs/architecture.md."""
    text = DOC.read_text()
    starts = [(int(m[1]), m.start()) for m in _HEADING.finditer(text)]
    ends = [start for _, start in starts[1:]] + [len(text)]
    return {number: text[start:end] for (number, start), end in zip(starts, ends, strict=True)}


def rule_numbers(text: str) -> set[int]:
    """``1-4, 6 and 9`` -> {1, 2, 3, 4, 6, 9}."""
    numbers: set[int] = set()
    for part in re.split(r"\s*(?:,|and)\s*", text.strip()):
        low, _, high = part.partition("-")
        numbers.update(range(int(low), int(high or low) + 1))
    return numbers


def citations() -> Iterator[tuple[str, str, int, set[int]]]:
    """``(file, citation, section, rules)`` for every citation of the document."""
    for top in CITING:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.resolve() == Path(__file__).resolve():
                continue
            text = path.read_text()
            for match in _CITATION.finditer(text):
                rules = rule_numbers(match[2]) if match[2] else set()
                yield str(path.relative_to(ROOT)), match[0], int(match[1]), rules


def test_the_document_is_cited() -> None:
    cited = {section for _, _, section, _ in citations()}
    assert {3, 4} <= cited  # the cache tests and the conversion cite it


def test_every_citation_names_a_section_and_rules_that_exist() -> None:
    known = sections()
    wrong = []
    for where, text, section, rules in citations():
        if section not in known:
            wrong.append(f"{where}: {text!r}: there is no §{section}")
            continue
        listed = {int(n) for n in _RULE.findall(known[section])}
        if rules - listed:
            wrong.append(f"{where}: {text!r}: §{section} has no rule {sorted(rules - listed)}")
    assert not wrong, "\n".join(wrong)


def test_no_citation_points_outside_the_repository() -> None:
    loose = [
        f"{path.relative_to(ROOT)}: {match[0]!r}"
        for top in CITING
        for path in sorted((ROOT / top).rglob("*.py"))
        if path.resolve() != Path(__file__).resolve()
        for match in _LOOSE.finditer(path.read_text())
    ]
    assert not loose, f"cite docs/architecture.md §N (rule N) instead: {loose}"


@pytest.mark.parametrize(
    ("text", "section", "rules"),
    [
        ("docs/architecture.md §3 rules 1-4, 6 and 9", 3, {1, 2, 3, 4, 6, 9}),
        ("docs/architecture.md §3 rule 5", 3, {5}),
        ("docs/architecture.md §4", 4, set()),
    ],
)
def test_citations_are_read_as_written(text: str, section: int, rules: set[int]) -> None:
    match = _CITATION.search(text)
    assert match is not None
    assert int(match[1]) == section
    assert (rule_numbers(match[2]) if match[2] else set()) == rules


def test_the_readme_links_the_document() -> None:
    readme = (ROOT / "README.md").read_text()
    development = readme[readme.index("## Development") :]
    assert "](docs/architecture.md)" in development


def _module_imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The podcache modules ``module`` imports (every import: in functions and under
    TYPE_CHECKING too); ``from pkg import name`` counts as importing ``pkg.name`` when that is a
    module (a C extension with its .pyi stub included), else ``pkg``."""
    home = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = home.split(".")
                kept = parts[: len(parts) - node.level + 1]
                base = ".".join([*kept, node.module] if node.module else kept)
            names = []
            for alias in node.names:
                full = f"{base}.{alias.name}"
                stub = SRC.joinpath(*full.split(".")).with_suffix(".pyi")
                names.append(full if full in known or stub.exists() else base)
        else:
            continue
        found |= {name for name in names if name in known and name != module}
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the podcache modules it imports, over src/podcache (the stubs left out)."""
    paths = {_module_name(path): path for path in _source_files()}
    known = set(paths)
    return {module: _module_imports(module, path, known) for module, path in paths.items()}


def test_no_module_imports_itself_through_others() -> None:
    """No import cycle between modules, not only between layers: each module
    can be read knowing only what it imports."""
    try:
        list(TopologicalSorter(import_graph()).static_order())
    except CycleError as error:
        pytest.fail(f"an import cycle: {' -> '.join(error.args[1])}")


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = import_graph()
    graph["podcache.cache.core"] = {*graph["podcache.cache.core"], "podcache.cache.aio"}
    with pytest.raises(CycleError):
        list(TopologicalSorter(graph).static_order())
