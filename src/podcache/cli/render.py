"""How ``podcache`` prints: tables, JSON and YAML documents, IDs, states and ages; it formats
what it is given and never reads a runtime or decides which pods to show.

Tables follow crictl: container and sandbox IDs cut to 13 characters (``--no-trunc``: full),
ages as "3m ago", states capitalised (Running, Exited; pods Ready/NotReady). A table is built
as plain data (``TableData``) and drawn, without importing rich, on a terminal (bold header,
coloured states, cells cut with an ellipsis to fit the width: ``terminal_lines``) or on a pipe
as plain text: one row per line, every cell whole, columns left-aligned and separated by at
least three spaces, no empty cells ("-" instead), so it can be parsed. ``watch`` draws its live
screen with rich (``rich_table``, the same fitting). JSON and YAML use ``podcache.jsonview``'s
shape; YAML (like rich) is imported only when used.
"""

# ruff: noqa: PLC0415 -- rich and yaml are imported only when used: piped output stays fast

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import IO, TYPE_CHECKING, Any

import msgspec

from podcache.cli.options import OutputOptions
from podcache.jsonview import container_to_json
from podcache.model import Container, ContainerState, Pod

if TYPE_CHECKING:
    from rich.table import Table

__all__ = [
    "COLUMN_GAP",
    "STATE_STYLES",
    "TRUNCATED_ID_LENGTH",
    "TableData",
    "containers_document",
    "containers_table",
    "fit_widths",
    "human_age",
    "matched_document",
    "matched_text",
    "member_kind",
    "pod_attempt",
    "pod_detail",
    "pod_id",
    "pod_state",
    "pods_table",
    "print_document",
    "print_tables",
    "rich_table",
    "short_id",
    "terminal_lines",
]

TRUNCATED_ID_LENGTH = 13
"""crictl's truncated ID length."""
COLUMN_GAP = 3
"""Spaces between table columns."""
_NONE = "-"
STATE_STYLES = {
    "Running": "green",
    "Ready": "green",
    "Created": "cyan",
    "Exited": "dim",
    "NotReady": "yellow",
    "Unknown": "red",
}
"""rich styles of state cells on a terminal."""


# -- cells --------------------------------------------------------------------------------------


def human_age(created_ns: int, now_ns: int) -> str:
    """``"45s ago"``, ``"3m ago"``, ``"5h ago"``, ``"2d ago"``; ``"-"`` for an unknown time."""
    if created_ns <= 0:
        return _NONE
    seconds = max(0, (now_ns - created_ns) // 1_000_000_000)
    if seconds < 60:
        return f"{seconds}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    if seconds < 48 * 3600:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"


def short_id(ident: str, no_trunc: bool = False) -> str:
    """The ID cut to crictl's 13 characters unless ``no_trunc``."""
    return ident if no_trunc else ident[:TRUNCATED_ID_LENGTH]


def pod_id(pod: Pod) -> str:
    """The pod's ID as crictl shows it: its newest sandbox's ID (its UID if it has none)."""
    return pod.sandboxes[0].id.id if pod.sandboxes else pod.id


def pod_state(pod: Pod) -> str:
    """``Ready`` when any of the pod's sandboxes is running, else ``NotReady``."""
    ready = any(s.state is ContainerState.RUNNING for s in pod.sandboxes)
    return "Ready" if ready else "NotReady"


def _state(state: ContainerState) -> str:
    return state.value.capitalize()


def _or_none(text: str) -> str:
    return text or _NONE


def _labels(pod: Pod) -> str:
    return ",".join(f"{k}={v}" for k, v in pod.label_map().items()) or _NONE


# -- tables as data -----------------------------------------------------------------------------


class TableData(msgspec.Struct):
    """Columns and rows of text. ``styled`` names the columns whose cells are states;
    ``flexible`` the columns a terminal too narrow for the table cuts (the others keep their
    width as long as they fit)."""

    columns: list[str]
    rows: list[list[str]] = msgspec.field(default_factory=list)
    styled: frozenset[str] = frozenset({"STATE"})
    flexible: frozenset[str] = frozenset(
        {"IMAGE", "IMAGE ID", "CONTAINER NAMES", "LABELS", "UID", "POD UID", "VALUE"}
    )
    show_header: bool = True

    def add(self, *cells: str) -> None:
        """Add a row (one cell per column)."""
        assert len(cells) == len(self.columns), (cells, self.columns)
        self.rows.append(list(cells))

    def natural_widths(self) -> list[int]:
        """Each column's width with every cell shown whole (the header's too, when shown)."""
        shown = [self.columns, *self.rows] if self.show_header else self.rows
        return [max((len(row[i]) for row in shown), default=0) for i in range(len(self.columns))]

    def fitted_widths(self, width: int) -> list[int]:
        """Each column's width in a terminal ``width`` characters wide (``fit_widths``)."""
        flexible = [column in self.flexible for column in self.columns]
        return fit_widths(self.natural_widths(), flexible, width)

    def state_columns(self) -> list[bool]:
        """Whether each column's cells are states (styled)."""
        return [column in self.styled for column in self.columns]

    def plain_lines(self, widths: Sequence[int] | None = None) -> list[str]:
        """The table as text lines: every cell whole (or cut with "…" to ``widths``), columns
        COLUMN_GAP apart, no trailing spaces."""
        shown = [self.columns, *self.rows] if self.show_header else self.rows
        if widths is None:
            widths = self.natural_widths()
        gap = " " * COLUMN_GAP
        return [
            gap.join(
                _cut(cell, width).ljust(width) for cell, width in zip(row, widths, strict=True)
            ).rstrip()
            for row in shown
        ]


HOST_NETWORK_IP = "host"
"""The IP cell of a host-network pod."""


def pod_ip(pod: Pod) -> str:
    """A pod's IP cell: its primary IP, ``host`` on the host network, else ``-``."""
    if pod.host_network:
        return HOST_NETWORK_IP
    return pod.ips[0] if pod.ips else _NONE


def pod_attempt(pod: Pod) -> str:
    """A pod's ATTEMPT cell, as crictl's: its newest sandbox's attempt (the sandbox POD ID
    names); ``-`` for a pod without one."""
    return str(pod.sandboxes[0].attempt) if pod.sandboxes else _NONE


def pods_table(pods: Sequence[Pod], out: OutputOptions, now_ns: int) -> TableData:
    """One row per pod: POD ID, CREATED, STATE, NAME, NAMESPACE, ATTEMPT (``pod_attempt``),
    CONTAINERS (a count; where crictl has RUNTIME, which the model does not keep);
    ``wide`` adds IP (the primary, as ``kubectl get pods -o wide``; ``host`` for a pod on the
    host network, which has none of its own), UID, SANDBOXES (a count), CONTAINER NAMES and
    LABELS."""
    wide = out.format == "wide"
    columns = ["POD ID", "CREATED", "STATE", "NAME", "NAMESPACE", "ATTEMPT", "CONTAINERS"]
    if wide:
        columns += ["IP", "UID", "SANDBOXES", "CONTAINER NAMES", "LABELS"]
    table = TableData(columns)
    for pod in pods:
        row = [
            short_id(pod_id(pod), out.no_trunc),
            human_age(pod.created_at, now_ns),
            pod_state(pod),
            _or_none(pod.name),
            _or_none(pod.namespace),
            pod_attempt(pod),
            str(len(pod.containers)),
        ]
        if wide:
            names = ",".join(c.name or _NONE for c in pod.containers)
            row += [
                pod_ip(pod),
                pod.id,
                str(len(pod.sandboxes)),
                names or _NONE,
                _labels(pod),
            ]
        table.add(*row)
    return table


def containers_table(rows: Sequence[tuple[Pod, Container]], out: OutputOptions) -> TableData:
    """One row per (pod, container): CONTAINER, IMAGE, STATE, NAME, ATTEMPT (the container's
    CRI attempt, as crictl's), POD ID, POD, NAMESPACE; ``wide`` adds IMAGE ID (``image_id``,
    else ``image_ref``), HASH and POD UID.

    POD ID is the sandbox the container ran in (``Container.sandbox_id``), as crictl's: an old
    attempt's may be an older sandbox than the pod's newest (``pod_id``, which a container the
    runtime gave no sandbox shows). There is no CREATED: the model has no container time.
    """
    wide = out.format == "wide"
    columns = ["CONTAINER", "IMAGE", "STATE", "NAME", "ATTEMPT", "POD ID", "POD", "NAMESPACE"]
    if wide:
        columns += ["IMAGE ID", "HASH", "POD UID"]
    table = TableData(columns)
    for pod, container in rows:
        row = [
            short_id(container.id.id, out.no_trunc),
            _or_none(container.image),
            _state(container.state),
            _or_none(container.name),
            str(container.attempt),
            short_id(container.sandbox_id or pod_id(pod), out.no_trunc),
            _or_none(pod.name),
            _or_none(pod.namespace),
        ]
        if wide:
            image_id = container.image_id or container.image_ref
            row += [_or_none(image_id), f"{container.hash:x}", pod.id]
        table.add(*row)
    return table


def member_kind(pod: Pod, member: Container) -> str:
    """``"sandbox"`` when ``member`` is one of ``pod``'s sandboxes, else ``"container"``."""
    return "sandbox" if member in pod.sandboxes else "container"


def matched_text(pod: Pod, member: Container, no_trunc: bool = False) -> str:
    """What an ID matched, in words: ``container web (3f2a...)`` or ``sandbox (9c1d...)``."""
    kind = member_kind(pod, member)
    name = f" {member.name}" if kind == "container" and member.name else ""
    return f"{kind}{name} ({short_id(member.id.id, no_trunc)})"


def matched_document(pod: Pod, member: Container | None) -> dict[str, Any] | None:
    """``inspect``'s ``"matched"`` member: the container or sandbox the ID named
    (``kind``, ``id`` as ``type://id``, ``name``, ``attempt``), None for a UID or
    name_namespace."""
    if member is None:
        return None
    return {
        "kind": member_kind(pod, member),
        "id": member.id.qualified,
        "name": member.name,
        "attempt": member.attempt,
    }


def pod_detail(
    pod: Pod, out: OutputOptions, now_ns: int, matched: Container | None = None
) -> list[TableData]:
    """One pod for ``inspect -o table``: its fields (with ``Matched:``, the container or
    sandbox the ID named, when it named one), then its sandboxes and containers, the matched
    one marked ``*`` in the first column."""
    fields = TableData(["FIELD", "VALUE"], show_header=False)
    for name, value in (
        ("Name", _or_none(pod.name)),
        ("Namespace", _or_none(pod.namespace)),
        ("UID", pod.id),
        ("Pod ID", pod_id(pod)),
        ("State", pod_state(pod)),
        ("Created", human_age(pod.created_at, now_ns)),
        ("Labels", _labels(pod)),
    ):
        fields.add(f"{name}:", value)
    if matched is not None:
        fields.add("Matched:", matched_text(pod, matched, out.no_trunc))
    members = TableData(["KIND", "ID", "NAME", "STATE", "ATTEMPT", "IMAGE"])
    rows: list[tuple[str, Container]] = [("sandbox", s) for s in pod.sandboxes]
    rows += [("container", c) for c in pod.containers]
    for kind, member in rows:
        members.add(
            f"{kind} *" if member is matched else kind,
            short_id(member.id.id, out.no_trunc),
            _or_none(member.name),
            _state(member.state),
            str(member.attempt),
            _or_none(member.image),
        )
    return [fields, members]


# -- drawing ------------------------------------------------------------------------------------


def fit_widths(natural: Sequence[int], flexible: Sequence[bool], available: int) -> list[int]:
    """Column widths that fit ``available`` characters (COLUMN_GAP between columns): the
    widest flexible column is narrowed first, down to 8 characters, then the widest other one,
    down to 4; a table that still does not fit keeps those minimums."""
    widths = list(natural)
    excess = sum(widths) + COLUMN_GAP * max(len(widths) - 1, 0) - available
    for candidates, floor in ((flexible, 8), ([not f for f in flexible], 4)):
        while excess > 0:
            shrinkable = [i for i, c in enumerate(candidates) if c and widths[i] > floor]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1
    return widths


def rich_table(data: TableData, width: int | None = None) -> Table:
    """The table as a rich renderable, its columns fitted to ``width`` (for a terminal and for
    ``watch``): IDs and names keep their width while flexible columns are cut with "…"."""
    from rich.table import Table
    from rich.text import Text

    table = Table(
        box=None,
        pad_edge=False,
        padding=(0, COLUMN_GAP, 0, 0),
        show_edge=False,
        show_header=data.show_header,
        header_style="bold",
    )
    widths = data.natural_widths() if width is None else data.fitted_widths(width)
    for column, column_width in zip(data.columns, widths, strict=True):
        table.add_column(column, no_wrap=True, overflow="ellipsis", width=column_width)
    styled = data.state_columns()
    for row in data.rows:
        table.add_row(
            *(
                Text(cell, style=STATE_STYLES.get(cell, "")) if is_state else Text(cell)
                for cell, is_state in zip(row, styled, strict=True)
            )
        )
    return table


_ANSI = {"green": "32", "cyan": "36", "dim": "2", "yellow": "33", "red": "31", "bold": "1"}
"""SGR codes of the styles ``STATE_STYLES`` and the header use (what rich writes for them)."""


def _styled(text: str, style: str, color: bool) -> str:
    return f"\x1b[{_ANSI[style]}m{text}\x1b[0m" if color and style else text


def _cut(cell: str, width: int) -> str:
    """``cell`` within ``width`` characters: whole, or cut with an ellipsis as rich cuts it."""
    return cell if len(cell) <= width else cell[: max(width - 1, 0)] + "…"


def terminal_lines(data: TableData, width: int, color: bool) -> list[str]:
    """The table as a terminal shows it, without rich: columns fitted to ``width``
    (``fit_widths``), cells cut with "…", COLUMN_GAP spaces between columns; with ``color``,
    a bold header and state cells in ``STATE_STYLES`` (SGR codes, as rich draws them)."""
    widths = data.fitted_widths(width)
    gap = " " * COLUMN_GAP
    if sum(widths) + COLUMN_GAP * (len(widths) - 1) > width:  # narrower than the minimums:
        return [_cut(line, width) for line in data.plain_lines(widths)]  # cut, uncoloured
    lines = []
    if data.show_header:
        cells = [_cut(c, w).ljust(w) for c, w in zip(data.columns, widths, strict=True)]
        lines.append(_styled(gap.join(cells).rstrip(), "bold", color))
    styled = data.state_columns()
    for row in data.rows:
        cells = [
            _styled_cell(cell, cell_width, is_state, color)
            for cell, cell_width, is_state in zip(row, widths, styled, strict=True)
        ]
        lines.append(gap.join(cells).rstrip())
    return lines


def _styled_cell(cell: str, width: int, is_state: bool, color: bool) -> str:
    """A cell cut to ``width`` and padded to it; a state in its style (with ``color``)."""
    text = _cut(cell, width)
    style = STATE_STYLES.get(cell, "") if is_state else ""
    return _styled(text, style, color) + " " * (width - len(text))


def _colors_wanted() -> bool:
    """Whether a terminal gets colours: not with NO_COLOR set or TERM=dumb (rich's rules)."""
    return not os.environ.get("NO_COLOR") and os.environ.get("TERM", "") != "dumb"


def print_tables(tables: Iterable[TableData], file: IO[str] | None = None) -> None:
    """Print tables one after the other (a blank line between): on a terminal fitted to its
    width, cells cut with "…", a bold header and coloured states (``terminal_lines``, without
    importing rich: a one-shot command starts faster); on a pipe as plain text, every cell
    whole."""
    stream = file if file is not None else sys.stdout
    if stream.isatty():
        import shutil  # a terminal only: shutil imports zlib, bz2 and lzma

        width = shutil.get_terminal_size().columns
        color = _colors_wanted()
        blocks = [
            "".join(f"{line}\n" for line in terminal_lines(data, width, color)) for data in tables
        ]
    else:
        blocks = ["".join(f"{line}\n" for line in data.plain_lines()) for data in tables]
    stream.write("\n".join(blocks))


# -- documents ----------------------------------------------------------------------------------


def containers_document(rows: Iterable[tuple[Pod, Container]]) -> dict[str, Any]:
    """``{"items": [...]}`` of containers, each with ``pod``: the pod's UID (``id``), name,
    namespace and ``sandbox_id``: the sandbox the container ran in, as the table's POD ID
    (else the pod's newest sandbox's ID, "" when it has none)."""
    return {
        "items": [
            container_to_json(container)
            | {
                "pod": {
                    "id": pod.id,
                    "name": pod.name,
                    "namespace": pod.namespace,
                    "sandbox_id": container.sandbox_id
                    or (pod.sandboxes[0].id.id if pod.sandboxes else ""),
                }
            }
            for pod, container in rows
        ]
    }


def print_document(document: Any, fmt: str, file: IO[str] | None = None) -> None:
    """Print a JSON-ready document as ``json`` (indented) or ``yaml`` (block style)."""
    stream = file if file is not None else sys.stdout
    if fmt == "json":
        import json  # -o json only: a table starts without it

        stream.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    elif fmt == "yaml":
        import yaml

        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        stream.write(
            yaml.dump(
                document,
                Dumper=dumper,
                sort_keys=False,
                allow_unicode=True,
                default_flow_style=False,
            )
        )
    else:  # pragma: no cover - callers pass a checked choice
        raise ValueError(f"not a document format: {fmt!r}")
