"""Request parsing and validation: sizes, queries, freshness, labels, ETags; no cache, no clock.

Pure functions from request text to values or an ``HTTPError`` (4xx) that names the bad input;
no routing (the application maps wall time onto the cache's clock).
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from urllib.parse import unquote_plus

from podcache.model import normalise_ip
from podcache.procs import PID_MAX
from podcache.serve.response import HTTPError

__all__ = [
    "AT_EXAMPLES",
    "BOOLEANS",
    "CONTAINER_ID_PATTERN",
    "LABEL_SELECTOR_PATTERN",
    "MAX_HEADERS",
    "MAX_HEADER_BYTES",
    "MAX_ID_LENGTH",
    "MAX_LABELS",
    "MAX_NEWER_THAN",
    "MAX_PARAMS",
    "MAX_PATH",
    "MAX_QUERY",
    "NAME_PATTERN",
    "PID_PATTERN",
    "POD_NAME_PATTERN",
    "LabelSelector",
    "Query",
    "check_name",
    "check_path",
    "collect_headers",
    "etag_matches",
    "parse_at",
    "parse_bool",
    "parse_ip",
    "parse_newer_than",
    "parse_pid",
    "parse_query",
]

MAX_PATH = 2048
"""Longest request path accepted (longer: 414)."""
MAX_QUERY = 2048
"""Longest query string accepted (longer: 414)."""
MAX_HEADERS = 64
"""Most request header fields accepted (more: 431)."""
MAX_HEADER_BYTES = 8192
"""Most bytes of header names and values accepted, all fields together (more: 431)."""
MAX_PARAMS = 32
"""Most query parameters accepted (more: 400)."""
MAX_LABELS = 16
"""Most ``label`` selectors in one request (more: 400)."""
MAX_ID_LENGTH = 253
"""Longest pod UID, name, namespace, container ID or label part accepted (longer: 400)."""

MAX_NEWER_THAN = 1e12
"""Largest ``newer_than`` accepted (unix seconds, the year 33658); anything later is a 400."""

# The patterns below are also the OpenAPI document's (ECMA-262 and Python agree on them), so
# what the document calls valid is exactly what the API accepts.
_LABEL_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_SELECTOR_PATTERN = (
    rf"^(?:[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}(?:={{1,2}}(?:{_LABEL_NAME})?)?$"
)
"""``label``: a Kubernetes label key (optional DNS prefix and "/"), then ``=VALUE`` (or
``==VALUE``) or nothing."""
NAME_PATTERN = r"^[^\x00-\x1f\x7f\ufffd]+$"
"""UIDs, container IDs, namespaces in queries: no control characters (nor U+FFFD, which stands
for bytes that were not UTF-8)."""
CONTAINER_ID_PATTERN = r"^(?!.*://.*://)(?!://)(?!.*://$)[^\x00-\x1f\x7f\ufffd]{4,}$"
"""``/containers/{id}``: a bare ID or prefix of at least 4 characters, or ``type://id`` with
both parts non-empty. (An exact ID shorter than 4 characters is found too.)"""
POD_NAME_PATTERN = r"^[^_/\x00-\x1f\x7f\ufffd]+$"
"""Pod names and namespaces in paths: also no ``_`` (it would make ``name_namespace``
ambiguous) and no ``/``."""

PID_PATTERN = r"^[1-9][0-9]{0,6}$"
"""``/pids/{pid}``: a process ID in decimal, no sign, no leading zero (at most ``PID_MAX``)."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f\ufffd]")
_LABEL_SELECTOR = re.compile(LABEL_SELECTOR_PATTERN)
_NUMBER = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")

Query = dict[str, list[str]]
"""Query parameters by name, each with its values in order."""


def check_path(path: str) -> None:
    """414 for an over-long path; 400 for control characters or bytes that are not UTF-8."""
    if len(path) > MAX_PATH:
        raise HTTPError(414, f"request path is longer than {MAX_PATH} characters")
    if _CONTROL.search(path):
        raise HTTPError(400, "request path holds control characters or invalid UTF-8")


def collect_headers(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Request headers as a dict by lower-case name, within the limits (431 beyond them).

    Repeated fields are joined with ", " (RFC 9110 5.3), except those that must appear once
    (``authorization``, ``x-podcache-newer-than``): repeating them is a 400.
    """
    headers: dict[str, str] = {}
    size = 0
    for count, (name, value) in enumerate(items, 1):
        size += len(name) + len(value)
        if count > MAX_HEADERS:
            raise HTTPError(431, f"more than {MAX_HEADERS} request header fields")
        if size > MAX_HEADER_BYTES:
            raise HTTPError(431, f"request header fields exceed {MAX_HEADER_BYTES} bytes")
        key = name.lower()
        if key in headers:
            if key in ("authorization", "x-podcache-newer-than"):
                raise HTTPError(400, f"header {name} given more than once")
            headers[key] = f"{headers[key]}, {value}"
        else:
            headers[key] = value
    return headers


def parse_query(text: str, allowed: frozenset[str], repeatable: frozenset[str]) -> Query:
    """Parse ``a=1&b=2`` (``+`` and ``%XX`` decoded as UTF-8) into ``Query``.

    Unknown names, repeats of a name not in ``repeatable``, too many parameters, malformed
    percent-encoding and control characters are a 400 naming the parameter.
    """
    if len(text) > MAX_QUERY:
        raise HTTPError(414, f"query string is longer than {MAX_QUERY} characters")
    query: Query = {}
    if not text:
        return query
    pieces = [piece for piece in text.split("&") if piece]
    if len(pieces) > MAX_PARAMS:
        raise HTTPError(400, f"more than {MAX_PARAMS} query parameters")
    for piece in pieces:
        raw_name, _, raw_value = piece.partition("=")
        try:
            name = unquote_plus(raw_name, errors="strict")
            value = unquote_plus(raw_value, errors="strict")
        except UnicodeDecodeError:
            raise HTTPError(400, "query string is not valid UTF-8 once percent-decoded") from None
        if _CONTROL.search(name) or _CONTROL.search(value):
            raise HTTPError(400, "query string holds control characters")
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise HTTPError(400, f"unknown query parameter {name!r} (known here: {known})")
        values = query.setdefault(name, [])
        if values and name not in repeatable:
            raise HTTPError(400, f"query parameter {name!r} given more than once")
        values.append(value)
    return query


def parse_newer_than(text: str, where: str) -> float:
    """Unix seconds (``1735689600.25``) from ``where``; 400 unless finite and >= 0."""
    if not _NUMBER.fullmatch(text):
        raise HTTPError(400, f"{where} must be unix seconds (e.g. 1735689600.5), got {text[:64]!r}")
    value = float(text)
    if not math.isfinite(value) or not 0 <= value <= MAX_NEWER_THAN:
        raise HTTPError(
            400, f"{where} must be unix seconds from 0 to {MAX_NEWER_THAN:.0e}, got {text[:64]!r}"
        )
    return value


_EPOCH = re.compile(r"[0-9]{1,11}(?:\.[0-9]{1,9})?")
_RFC3339 = re.compile(
    r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ](?P<minute>[0-9]{2}:[0-9]{2}):(?P<second>[0-9]{2})"
    r"(?P<fraction>\.[0-9]{1,9})?(?P<offset>[Zz]|[-+ ][0-9]{2}:[0-9]{2})"
)
AT_EXAMPLES = ("2026-12-02T01:02:03Z", "2026-12-02T02:02:03%2B01:00", "1796173323.5")
"""``?at=`` values that work as typed (in a URL: ``%2B`` is ``+``), for the 400's message."""


def _at_error(text: str, why: str) -> HTTPError:
    return HTTPError(
        400,
        f"at {why}, got {text[:64]!r}: give an RFC 3339 time with an offset "
        f"({AT_EXAMPLES[0]}, or {AT_EXAMPLES[1]} with its + encoded) or unix seconds "
        f"({AT_EXAMPLES[2]})",
    )


def _in_utc_years(seconds: float, text: str) -> float:
    """``seconds`` when its UTC time lies in years 1-9999 (what RFC 3339 and the answer's
    ``departed_at`` can write), else the 400."""
    try:
        datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, ValueError, OSError):
        raise _at_error(text, "must fall in the years 1 to 9999 in UTC") from None
    return seconds


def _leap_second_ends_a_month(moment: datetime) -> bool:
    """Is ``moment`` (the second before a leap second: ``:59`` where ``:60`` was written)
    23:59:59 UTC on the last day of a month, where leap seconds are inserted (ITU-R TF.460)?"""
    utc = moment.astimezone(UTC)
    last_day = calendar.monthrange(utc.year, utc.month)[1]
    return (utc.day, utc.hour, utc.minute, utc.second) == (last_day, 23, 59, 59)


def _rfc3339_seconds(match: re.Match[str], text: str) -> float:
    """An RFC 3339 match as unix seconds. A space where the offset's sign belongs is a ``+``
    (an unencoded ``+`` in a query reads as a space); second 60 is a leap second, read as the
    next second (unix time has none), and only where one can be: 23:59:60 UTC on a month's
    last day."""
    offset = match["offset"].upper()
    offset = "+00:00" if offset == "Z" else offset.replace(" ", "+")
    leap = match["second"] == "60"
    second = "59" if leap else match["second"]
    try:
        moment = datetime.fromisoformat(f"{match['date']}T{match['minute']}:{second}{offset}")
        leap_ok = not leap or _leap_second_ends_a_month(moment)
    except (ValueError, OverflowError):
        raise _at_error(text, "is not a valid date and time") from None
    if not leap_ok:
        raise _at_error(
            text,
            "has second 60, a leap second, where none can be "
            "(only at 23:59:60 UTC on a month's last day)",
        )
    fraction = float(match["fraction"]) if match["fraction"] else 0.0
    return moment.timestamp() + leap + fraction


def parse_at(text: str) -> float:
    """``?at=`` as unix seconds in UTC years 1-9999 (docs/architecture.md §5, "Who held a
    key"); a 400 naming ``at`` and examples that work else."""
    if _EPOCH.fullmatch(text):
        return _in_utc_years(float(text), text)
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise _at_error(text, "must be an RFC 3339 time with an offset or unix seconds")
    return _in_utc_years(_rfc3339_seconds(match, text), text)


def parse_ip(text: str) -> str:
    """An IP address from a path (IPv4, or IPv6 as written, ``::`` and all), in its canonical
    text; 400 naming it otherwise (no zones, no prefixes, no brackets)."""
    try:
        return normalise_ip(text)
    except ValueError:
        raise HTTPError(400, f"{text[:64]!r} is not an IP address (IPv4 or IPv6)") from None


_PID = re.compile(PID_PATTERN)


def parse_pid(text: str) -> int:
    """A process ID from a path: decimal digits, 1 to ``PID_MAX``; 400 otherwise."""
    if not _PID.fullmatch(text) or int(text) > PID_MAX:
        raise HTTPError(400, f"a PID is a number from 1 to {PID_MAX}, got {text[:24]!r}")
    return int(text)


BOOLEANS = {"1": True, "true": True, "0": False, "false": False}
"""The values a yes/no parameter takes."""


def parse_bool(text: str, where: str) -> bool:
    """``1``/``true`` or ``0``/``false``; 400 otherwise."""
    value = BOOLEANS.get(text)
    if value is None:
        raise HTTPError(400, f"{where} must be 1 or 0 (true or false), got {text[:64]!r}")
    return value


def check_name(value: str, what: str, *, underscore: bool = True) -> str:
    """A path or query value naming something: non-empty, at most ``MAX_ID_LENGTH`` characters,
    no control characters, and no ``_`` when ``underscore`` is False (pod names and namespaces,
    which the ``name_namespace`` full name would make ambiguous). 400 otherwise.
    """
    if not value:
        raise HTTPError(400, f"{what} is empty")
    if len(value) > MAX_ID_LENGTH:
        raise HTTPError(400, f"{what} is longer than {MAX_ID_LENGTH} characters")
    if _CONTROL.search(value):
        raise HTTPError(400, f"{what} holds control characters")
    if not underscore and "_" in value:
        raise HTTPError(400, f"{what} {value!r} cannot contain '_' (Kubernetes names never do)")
    return value


class LabelSelector:
    """``key=value`` (the pod has the label with that value) or ``key`` (it has the label).

    Keys and values follow Kubernetes' label syntax; anything else is a 400.
    """

    __slots__ = ("key", "value")

    def __init__(self, key: str, value: str | None) -> None:
        self.key = key
        self.value = value

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        key, sep, value = text.partition("=")
        if sep and value.startswith("="):  # accept "k==v" as Kubernetes selectors do
            value = value[1:]
        if not _LABEL_SELECTOR.fullmatch(text):
            raise HTTPError(
                400,
                f"label selector {text[:80]!r} is not KEY=VALUE or KEY with Kubernetes label "
                "syntax (e.g. app=web, app.kubernetes.io/name=web)",
            )
        return cls(key, value if sep else None)

    def matches(self, labels: Iterable[tuple[str, str]]) -> bool:
        """Does a pod with these ``(key, value)`` labels satisfy the selector?"""
        for key, value in labels:
            if key == self.key:
                return self.value is None or value == self.value
        return False

    def __repr__(self) -> str:
        return f"LabelSelector({self.key!r}, {self.value!r})"


def etag_matches(if_none_match: str, etag: str) -> bool:
    """Does an ``If-None-Match`` value match ``etag`` by weak comparison (``*`` matches any)?"""
    if if_none_match.strip() == "*":
        return True
    opaque = etag.removeprefix("W/")
    for candidate in if_none_match.split(","):
        if candidate.strip().removeprefix("W/") == opaque:
            return True
    return False
