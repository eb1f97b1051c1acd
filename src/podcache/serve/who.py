"""Lookups that may answer a pod that left: the ``departed`` and ``at`` parameters, the bodies
and the header (docs/architecture.md §3 rule 12, §5); no routing, no cache."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, NamedTuple

from podcache.cache import Found
from podcache.jsonview import container_to_json, pod_to_json
from podcache.serve.query import Query, parse_at, parse_bool

__all__ = ["DEPARTED", "WHO_ROUTES", "Who", "rfc3339", "who_document", "who_of"]


class Who(NamedTuple):
    """A lookup that asked for pods that left: ``departed=1``, or ``at`` (unix seconds)."""

    at: float | None


WHO_ROUTES = {"ip": "/ips/{ip}", "uid": "/pods/{uid}", "container_id": "/containers/{id}"}
DEPARTED = ("x-podcache-departed", "true")


def who_of(query: Query) -> Who | None:
    """``departed`` and ``at`` checked (400 naming them); None when neither asks for the
    departed (``departed=0`` and no ``at``: the snapshot alone, as without them)."""
    ats = query.get("at")
    at = parse_at(ats[0]) if ats else None
    departed = query.get("departed")
    asked = parse_bool(departed[0], "departed") if departed else False
    if at is None and not asked:
        return None
    return Who(at)


def rfc3339(seconds: float) -> str:
    """Unix seconds as RFC 3339 in UTC, to the microsecond (``2026-12-02T01:02:03.500000Z``)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def who_document(found: Found, key: tuple[str, str]) -> dict[str, Any]:
    """The body of a lookup that may answer a pod that left: as the route's usual one, with
    ``departed_at`` (RFC 3339; null for a pod still there) and ``held_until`` (when the pod
    stopped holding the key, RFC 3339; null while it holds it)."""
    document: dict[str, Any] = {}
    if key[0] == "ip":
        document["ip"] = key[1]
    if found.container is not None:
        document["container"] = container_to_json(found.container)
    document["pod"] = pod_to_json(found.pod)
    document["departed_at"] = None if found.departed_at is None else rfc3339(found.departed_at)
    document["held_until"] = None if found.held_until is None else rfc3339(found.held_until)
    return document
