"""The HTTP API's route table: every route, and all that is said of it; nothing else is served.

The one place that says what ``podcache serve`` answers (docs/architecture.md §5, item 3).
Every route is GET and HEAD (read-only).

Deliberately not here: how a route is answered (``handlers``), how a path is matched
(``router``), and the body schemas (``openapi.SCHEMAS``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from podcache.serve.handlers import Handlers
from podcache.serve.params import (
    ALL,
    CONTAINER,
    FRESHNESS,
    IP,
    LABEL,
    NAMESPACE,
    PID,
    POD_NAME,
    POD_NAMESPACE,
    SINCE,
    UID,
    WATCH,
    WHO,
    Param,
)
from podcache.serve.plan import Plan
from podcache.serve.query import Query

__all__ = ["ROUTES", "Handler", "Ok", "Route", "routes_help"]

Handler = Callable[[Handlers, Query, dict[str, str], tuple[Any, ...]], Plan]
"""A route's handler: the handlers' object, the parsed query, the request's headers and the
path's parameters (parsed) to how the request will be answered (``serve.plan``)."""


@dataclass(frozen=True, slots=True)
class Ok:
    """What the OpenAPI document says of a route's 200.

    ``body``: a schema name of ``openapi.SCHEMAS`` or an inline schema. ``snapshot``: the
    answer carries the snapshot's headers (age, staleness, revision); ``etag``: and its ETag.
    ``departed``: the schema of the answer with ``departed=1`` or ``at``; ``stream``: the
    schema of one line of ``watch=1``'s stream."""

    description: str
    body: str | Mapping[str, Any]
    media: str = "application/json"
    snapshot: bool = True
    etag: bool = False
    departed: str | None = None
    stream: str | None = None


@dataclass(frozen=True, slots=True)
class Route:
    """One route: ``template`` (``{name}`` for each path parameter, named as its ``Param``),
    its ``handler``, its ``help`` line, and its OpenAPI entry: ``summary``, ``ok``, ``params``
    (path ones first, in the template's order; the query and header ones as documented and
    read), ``errors`` (statuses and descriptions beyond, or instead of, the common ones),
    ``error_bodies`` (a status's body schema, when not ``Error``). ``revalidated``: the answer
    is from a snapshot (304 on If-None-Match); ``open``: no token needed."""

    template: str
    handler: Handler
    help: str
    summary: str
    ok: Ok
    params: tuple[Param[Any], ...] = ()
    errors: Mapping[str, str] = field(default_factory=dict)
    error_bodies: Mapping[str, str] = field(default_factory=dict)
    revalidated: bool = False
    open: bool = False


_NOT_FOUND = {"404": "Nothing with that identity in the snapshot."}
_WHO_NOT_FOUND = {
    "404": "Nothing with that identity in the snapshot (its held_until says when a pod held "
    "it lately, and departed_at when that pod left: ask again with departed=1); with "
    "departed=1 or at, nobody known held it."
}

ROUTES: tuple[Route, ...] = (
    Route(
        "/pods",
        Handlers.pods,
        "the node's running pods (watch=1: their changes)",
        "The node's running pods (newest first), optionally filtered; with watch=1, their "
        "changes as a stream.",
        Ok(
            "The pods; with watch=1, the stream of their changes.",
            "PodList",
            etag=True,
            stream="WatchEvent",
        ),
        (NAMESPACE, LABEL, ALL, *FRESHNESS, WATCH, SINCE),
        errors={
            "410": "watch=1 with a since older than the history kept or newer than the "
            "cache's revision: list again (the list's revision), then watch from it."
        },
        revalidated=True,
    ),
    Route(
        "/pods/{uid}",
        Handlers.pod,
        "one pod by UID",
        "One pod by UID (or, asked, one that left or held the UID at a time).",
        Ok("The pod.", "PodResponse", etag=True, departed="DepartedPodResponse"),
        (UID, ALL, *FRESHNESS, *WHO),
        errors=_WHO_NOT_FOUND,
        revalidated=True,
    ),
    Route(
        "/namespaces/{namespace}/pods/{name}",
        Handlers.pod_by_name,
        "one pod by namespace and name",
        "One pod by namespace and name (the newest, if several share them).",
        Ok("The pod.", "PodResponse", etag=True),
        (POD_NAMESPACE, POD_NAME, ALL, *FRESHNESS),
        errors=_NOT_FOUND,
        revalidated=True,
    ),
    Route(
        "/ips/{ip}",
        Handlers.ip,
        "the pod holding an IP address",
        "The pod holding an IP address now (host-network pods skipped), or, asked, one that "
        "left or held it at a time.",
        Ok("The pod and the IP.", "IPResponse", etag=True, departed="DepartedIPResponse"),
        (IP, ALL, *FRESHNESS, *WHO),
        errors={**_WHO_NOT_FOUND, "400": "Not an IP address, or a bad at or departed."},
        revalidated=True,
    ),
    Route(
        "/containers/{id}",
        Handlers.container,
        "a container or sandbox and its pod, by ID or prefix",
        "A container or sandbox and its pod, by ID (or, asked, one that exited or left, by "
        "its ID or a unique prefix).",
        Ok(
            "The container and its pod.",
            "ContainerResponse",
            etag=True,
            departed="DepartedContainerResponse",
        ),
        (CONTAINER, ALL, *FRESHNESS, *WHO),
        errors={
            **_WHO_NOT_FOUND,
            "409": "The prefix matches several containers (the message lists them; with "
            "departed=1 or at, listed and released ones together, also in matches).",
        },
        revalidated=True,
    ),
    Route(
        "/pids/{pid}",
        Handlers.pid,
        "the pod and container of a node's process",
        "The pod and container of a process on this node, by PID (read from the host's "
        "/proc: the process's cgroup names its container; PID reuse is detected).",
        Ok("The process's pod and container.", "ProcessResponse"),
        (PID, ALL, *FRESHNESS[:3]),
        errors={
            "404": "No such process, a process in no container, or one in a container or pod "
            "the runtime does not list (after one refresh if the process is newer than the "
            "snapshot): reason says which.",
        },
        error_bodies={"404": "ProcessNotFound"},
    ),
    Route(
        "/healthz",
        Handlers.healthz,
        "the process is up (no token needed)",
        "The process is up (never asks the runtime; needs no token).",
        Ok("Up.", "Health", snapshot=False),
        open=True,
    ),
    Route(
        "/readyz",
        Handlers.readyz,
        "the runtime answered within the cache period",
        "The runtime answered within the last cache period (refreshes if it must).",
        Ok("Ready.", "Ready"),
        errors={
            "503": "Not ready: the runtime is not reachable or did not answer in time; while "
            "a stale snapshot is served in its place, the answer carries X-Podcache-Stale: "
            "true.",
        },
    ),
    Route(
        "/metrics",
        Handlers.metrics,
        "Prometheus metrics",
        "Prometheus metrics.",
        Ok("The text exposition format.", {"type": "string"}, "text/plain", snapshot=False),
    ),
    Route(
        "/openapi.json",
        Handlers.openapi,
        "this API's OpenAPI document",
        "This document.",
        Ok("The OpenAPI document.", {"type": "object"}, snapshot=False),
    ),
)
"""Every route ``podcache serve`` answers, in the OpenAPI document's and the help's order."""


def routes_help() -> str:
    """The routes as ``podcache serve --help`` lists them: one line each, its template and its
    ``help`` (a click paragraph kept as written)."""
    width = max(len(route.template) for route in ROUTES)
    lines = [f"  {route.template:<{width}}  {route.help}" for route in ROUTES]
    return "\b\nRoutes (GET and HEAD; the OpenAPI document describes each):\n" + "\n".join(lines)
