"""The HTTP API's parameters: each one's name, place, OpenAPI description and schema, and its
parser; no routes, no cache.

A ``Param`` is both what the OpenAPI document says of a parameter and how its value is read,
so the two cannot disagree: the patterns in the schemas are ``query``'s, which the parsers
use (ECMA-262 and Python read them alike). Which route takes which parameters is the route
table's (``routes``). A parser takes one value as sent (a query value percent-decoded, a path
segment as it arrived) and returns the value the handler uses, or raises a 400 naming it
(a ``partial`` where it only names the parameter: no Python frame of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import unquote

from podcache.procs import PID_MAX
from podcache.serve.query import (
    BOOLEANS,
    CONTAINER_ID_PATTERN,
    LABEL_SELECTOR_PATTERN,
    MAX_ID_LENGTH,
    MAX_LABELS,
    MAX_NEWER_THAN,
    NAME_PATTERN,
    POD_NAME_PATTERN,
    LabelSelector,
    Query,
    check_name,
    parse_at,
    parse_bool,
    parse_ip,
    parse_newer_than,
    parse_pid,
)
from podcache.serve.response import HTTPError

__all__ = [
    "ALL",
    "AT",
    "CONTAINER",
    "DEPARTED",
    "FRESH",
    "FRESHNESS",
    "IF_NONE_MATCH",
    "IP",
    "LABEL",
    "NAMESPACE",
    "NEWER_THAN",
    "NEWER_THAN_HEADER",
    "PID",
    "POD_NAME",
    "POD_NAMESPACE",
    "SINCE",
    "UID",
    "WATCH",
    "WHO",
    "Param",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Param(Generic[T]):
    """One parameter: where it is sent, what the document says of it, how it is read.

    A path parameter spans one segment unless ``slashes`` (then the rest of the path, which
    ``/`` may be part of: ``containerd://...``); it must be non-empty unless ``empty`` (then
    its parser refuses the empty value with a 400, not the router with a 404).
    """

    name: str
    where: Literal["path", "query", "header"]
    description: str
    schema: Mapping[str, Any]
    parse: Callable[[str], T]
    repeatable: bool = False
    slashes: bool = False
    empty: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
    """More members of the OpenAPI parameter object (``style``, ``explode``)."""

    def first(self, query: Query) -> T | None:
        """The first value of this query parameter, parsed; None when it was not given."""
        values = query.get(self.name)
        return self.parse(values[0]) if values else None

    def openapi(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": self.name, "in": self.where}
        if self.where == "path":
            entry["required"] = True
        entry["description"] = self.description
        entry["schema"] = self.schema
        entry.update(self.extra)
        return entry


def _text(value: str) -> str:
    return value


def _name_schema(pattern: str) -> dict[str, Any]:
    return {"type": "string", "maxLength": MAX_ID_LENGTH, "pattern": pattern}


_YES_NO = {"type": "string", "enum": list(BOOLEANS)}
_NEWER = {"type": "number", "minimum": 0, "maximum": MAX_NEWER_THAN}


def _yes_no(name: str, description: str) -> Param[bool]:
    return Param(name, "query", description, _YES_NO, partial(parse_bool, where=name))


def _full_name_part(name: str, description: str, what: str) -> Param[str]:
    """A path parameter that is part of a pod's full name, ``name_namespace``: no ``_``."""
    parse = partial(check_name, what=what, underscore=False)
    return Param(name, "path", description, _name_schema(POD_NAME_PATTERN), parse)


def _parse_ip_segment(text: str) -> str:
    """``/ips/{ip}``: the segment percent-decoded (``::ffff:...`` arrives as ``%3A``), then
    ``parse_ip``."""
    return parse_ip(unquote(text))


def parse_since(text: str) -> int:
    """``since``: a revision, an integer from 0 to 2**63 - 1; else a 400."""
    if not (text.isascii() and text.isdigit()) or int(text) >= 2**63:
        raise HTTPError(400, f"since must be a revision (an integer >= 0), got {text[:32]!r}")
    return int(text)


# -- path parameters --------------------------------------------------------------------------
UID = Param(
    "uid", "path", "The pod UID.", _name_schema(NAME_PATTERN), partial(check_name, what="pod UID")
)
POD_NAMESPACE = _full_name_part("namespace", "The namespace (no '_').", "namespace")
POD_NAME = _full_name_part("name", "The pod name (no '_').", "pod name")
CONTAINER = Param(
    "id",
    "path",
    "A full ID type://id (URL-encoded or not), a bare ID, or a unique prefix of at least 4 "
    "characters.",
    _name_schema(CONTAINER_ID_PATTERN),
    partial(check_name, what="container ID"),
    slashes=True,
)
IP = Param(
    "ip",
    "path",
    "An IPv4 or IPv6 address (any spelling; no zone, no prefix; an IPv4-mapped IPv6 address, "
    "::ffff:10.0.0.7, is its IPv4 one).",
    {"anyOf": [{"type": "string", "format": "ipv4"}, {"type": "string", "format": "ipv6"}]},
    _parse_ip_segment,
    slashes=True,
    empty=True,
)
PID = Param(
    "pid",
    "path",
    "A process ID as the node (the host PID namespace) sees it, in decimal without a sign or "
    "leading zeros.",
    {"type": "integer", "minimum": 1, "maximum": PID_MAX},
    parse_pid,
    slashes=True,
    empty=True,
)

# -- query and header parameters --------------------------------------------------------------
NAMESPACE = Param(
    "namespace",
    "query",
    "Only pods in this namespace.",
    _name_schema(NAME_PATTERN),
    partial(check_name, what="namespace"),
)
LABEL = Param(
    "label",
    "query",
    "Only pods with this label: KEY=VALUE, or KEY for any value. Repeat for several (all must "
    "match).",
    {
        "type": "array",
        "items": {"type": "string", "pattern": LABEL_SELECTOR_PATTERN},
        "maxItems": MAX_LABELS,
    },
    LabelSelector.parse,
    repeatable=True,
    extra={"style": "form", "explode": True},
)
ALL = _yes_no(
    "all",
    "1 (or true): NotReady pods too, as podcache pods -a: not-ready sandboxes and exited "
    "containers (the kubelet's GetPods(all=true)). Answered from a cache of its own (the same "
    "period and freshness rules), whose revisions are numbered from 2**52: a since from the "
    "other view is always 410. 0 or false: the default, running pods only.",
)
NEWER_THAN = Param(
    "newer_than",
    "query",
    "Read-your-writes: answer from a snapshot read from the runtime at or after this unix time "
    "(seconds); the cache refreshes if it holds an older one. Times in the future count as "
    "now. Refreshes asked for this way start at most once per --min-refresh-interval: a "
    "request arriving sooner waits for the next one.",
    _NEWER,
    partial(parse_newer_than, where="newer_than"),
)
FRESH = _yes_no(
    "fresh",
    "1 (or true): answer from a snapshot read after this request arrived (newer_than now; "
    "rate-limited the same way).",
)
NEWER_THAN_HEADER = Param(
    "X-Podcache-Newer-Than",
    "header",
    "Same as newer_than (the later of the two wins when both are given).",
    _NEWER,
    partial(parse_newer_than, where="X-Podcache-Newer-Than"),
)
IF_NONE_MATCH = Param(
    "If-None-Match",
    "header",
    "An ETag from an earlier answer: 304 while the pods are unchanged.",
    {"type": "string"},
    _text,
)
WATCH = _yes_no(
    "watch",
    "1 (or true): stream the changes instead (application/x-ndjson, chunked, one WatchEvent "
    "per line, until the client or the server ends it): without since, an ADDED line for "
    "every pod first. Not with newer_than or fresh.",
)
SINCE = Param(
    "since",
    "query",
    "With watch=1: stream exactly the changes after this revision (from X-Podcache-Revision "
    "or a list's revision); 410 when it is out of the history kept. Ignored without watch=1.",
    {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
    parse_since,
)
DEPARTED = Param(
    "departed",
    "query",
    "Answer a key released in the last departed_for seconds too (a pod that left, a "
    "container that exited or was removed): 200, with departed_at, held_until and "
    "X-Podcache-Departed: true.",
    {"type": "string", "enum": ["1", "true", "0", "false"]},
    partial(parse_bool, where="departed"),
)
AT = Param(
    "at",
    "query",
    "The pod that held this key at that time (RFC 3339 with an offset, or unix seconds with an "
    "optional fraction), in UTC years 1 to 9999: from its sandbox's creation until it left. A "
    "space where the offset's + belongs (an unencoded + decodes to one) is read as +; a leap "
    "second (23:59:60Z) is the next second.",
    {
        "anyOf": [
            {"type": "string", "pattern": r"^[0-9]{1,11}(\.[0-9]{1,9})?$"},
            {"type": "string", "format": "date-time"},
        ]
    },
    parse_at,
)

FRESHNESS: tuple[Param[Any], ...] = (NEWER_THAN, FRESH, NEWER_THAN_HEADER, IF_NONE_MATCH)
"""Read-your-writes and revalidation, taken by every route answered from a snapshot."""
WHO: tuple[Param[Any], ...] = (DEPARTED, AT)
"""The lookups that may answer a pod that left (``departed=1``) or held a key at a time."""
