"""The OpenAPI 3.1 document of ``podcache serve``, as data; no routing, no validation.

Data only, built once per server (it differs only in whether a bearer token is required). The
pod schemas describe ``podcache.jsonview``'s shape; a test compares them with that module's
output, so the two cannot drift apart silently. It holds no routing and no validation.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from podcache.jsonview import PID_MISS_REASONS
from podcache.model import ContainerState
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
)

__all__ = ["SCHEMAS", "document"]

_REF = "#/components/schemas/"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _envelope(**members: dict[str, Any]) -> dict[str, Any]:
    properties = {
        **members,
        "cache_time": {
            "type": "number",
            "description": "Unix time (seconds, wall clock) the snapshot was read from the "
            "runtime: it reflects every change made before then.",
        },
        "age_seconds": {
            "type": "number",
            "minimum": 0,
            "description": "Seconds between cache_time and this response.",
        },
    }
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


_DEPARTED_AT = {
    "type": "string",
    "format": "date-time",
    "description": "When the cache first saw the pod gone (RFC 3339, UTC).",
}
_DEPARTED_OR_NULL = {
    "oneOf": [_DEPARTED_AT, {"type": "null"}],
    "description": "When the pod left (RFC 3339, UTC); null for a pod still there.",
}


def _error_schema(**required: dict[str, Any]) -> dict[str, Any]:
    """The JSON error body, with ``required`` members more (a /pids 404's ``reason``)."""
    return {
        "type": "object",
        "properties": {
            "error": {"type": "string", "description": "What went wrong."},
            "status": {"type": "integer", "description": "The HTTP status code."},
            **required,
            "departed_at": {
                **_DEPARTED_AT,
                "description": "A lookup's 404 for a key a pod that left held: when it "
                "left (ask again with departed=1).",
            },
            "cache_time": {
                "type": "number",
                "description": "When the answer came from a snapshot (404 from a "
                "lookup): that snapshot's time.",
            },
            "age_seconds": {"type": "number", "minimum": 0},
        },
        "required": ["error", "status", *required],
        "additionalProperties": False,
    }


_REVISION = {
    "type": "integer",
    "minimum": 0,
    "description": "The snapshot's revision: +1 each time a refresh finds the pods changed.",
}

_CONTAINER_PROPERTIES: dict[str, Any] = {
    "id": {
        "type": "string",
        "description": "The runtime-qualified ID, type://id (containerd://3f2a...).",
    },
    "name": {"type": "string", "description": "Empty for sandboxes."},
    "image": {"type": "string"},
    "image_id": {"type": "string"},
    "image_ref": {"type": "string"},
    "image_runtime_handler": {"type": "string"},
    "hash": {"type": "integer", "minimum": 0},
    "state": {"type": "string", "enum": [state.value for state in ContainerState]},
    "attempt": {
        "type": "integer",
        "minimum": 0,
        "description": "The CRI metadata's attempt: a container's restarts in its sandbox, "
        "a sandbox's predecessors (crictl's ATTEMPT).",
    },
}
_POD_PROPERTIES: dict[str, Any] = {
    "id": {"type": "string", "description": "The pod UID."},
    "name": {"type": "string"},
    "namespace": {"type": "string"},
    "created_at": {
        "type": "integer",
        "description": "Creation time of the pod's newest sandbox, ns since the epoch.",
    },
    "labels": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "The pod's own labels (without the kubelet's io.kubernetes.pod.*).",
    },
    "ips": {
        "type": "array",
        "items": {"type": "string", "anyOf": [{"format": "ipv4"}, {"format": "ipv6"}]},
        "uniqueItems": True,
        "description": "The IP addresses of the pod's newest ready sandbox (its "
        "PodSandboxStatus), the primary first, in canonical text (IPv6 compressed, lower "
        "case). Empty while the runtime has not said, and for a host-network pod.",
    },
    "host_network": {
        "type": "boolean",
        "description": "The pod's sandbox shares the node's network namespace.",
    },
    "containers": {"type": "array", "items": _ref("Container")},
    "sandboxes": {"type": "array", "items": _ref("Container")},
}
SCHEMAS: dict[str, Any] = {
    "Container": {
        "type": "object",
        "description": "A container or a pod sandbox, as the kubelet lists them.",
        "properties": _CONTAINER_PROPERTIES,
        "required": list(_CONTAINER_PROPERTIES),
        "additionalProperties": False,
    },
    "Pod": {
        "type": "object",
        "description": "A pod: containers and sandboxes newest first.",
        "properties": _POD_PROPERTIES,
        "required": list(_POD_PROPERTIES),
        "additionalProperties": False,
    },
    "PodList": _envelope(
        items={"type": "array", "items": _ref("Pod"), "description": "Newest first."},
        revision=_REVISION,
    ),
    "WatchEvent": {
        "description": "One line of a watch stream (application/x-ndjson: one JSON object "
        "per line): a change (its pod as in /pods), a BOOKMARK (every change up to "
        "revision has been sent; at least every 15 s, after the first ADDED lines of a "
        "watch without since, and first of all with since), or a last ERROR line (code "
        "410: list again, then watch from the list's revision).",
        "oneOf": [
            {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["ADDED", "MODIFIED", "DELETED"]},
                    "revision": _REVISION,
                    "object": _ref("Pod"),
                },
                "required": ["type", "revision", "object"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["BOOKMARK"]},
                    "revision": _REVISION,
                },
                "required": ["type", "revision"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["ERROR"]},
                    "code": {"type": "integer", "enum": [410]},
                    "message": {"type": "string"},
                },
                "required": ["type", "code", "message"],
                "additionalProperties": False,
            },
        ],
    },
    "PodResponse": _envelope(pod=_ref("Pod")),
    "ContainerResponse": _envelope(container=_ref("Container"), pod=_ref("Pod")),
    "IPResponse": _envelope(ip={"type": "string"}, pod=_ref("Pod")),
    "DepartedPodResponse": _envelope(pod=_ref("Pod"), departed_at=_DEPARTED_OR_NULL),
    "DepartedContainerResponse": _envelope(
        container=_ref("Container"), pod=_ref("Pod"), departed_at=_DEPARTED_OR_NULL
    ),
    "DepartedIPResponse": _envelope(
        ip={"type": "string"}, pod=_ref("Pod"), departed_at=_DEPARTED_OR_NULL
    ),
    "ProcessResponse": _envelope(
        pid={"type": "integer", "minimum": 1, "maximum": PID_MAX},
        pod=_ref("Pod"),
        container={
            "oneOf": [_ref("Container"), {"type": "null"}],
            "description": "The container or sandbox the process runs in; null when its "
            "cgroup names the pod but no container (e.g. CRI-O's conmon).",
        },
    ),
    "Ready": _envelope(status={"type": "string", "enum": ["ready"]}),
    "Health": {
        "type": "object",
        "properties": {"status": {"type": "string", "enum": ["ok"]}},
        "required": ["status"],
        "additionalProperties": False,
    },
    "Error": _error_schema(),
    "ProcessNotFound": _error_schema(
        reason={
            "type": "string",
            "enum": sorted(set(PID_MISS_REASONS.values())),
            "description": "Why the process has no pod: no_process (no such process), "
            "not_in_container (its cgroup names no container or pod), container_unknown "
            "(it names one the runtime does not list, after one refresh if the process is "
            "newer than the snapshot).",
        }
    ),
}
"""The document's ``components.schemas``: the bodies the API answers (data; ``document`` copies
it, so no document shares it)."""

_AGE_HEADER = {
    "description": "Age of the snapshot in seconds (absent before the first refresh).",
    "schema": {"type": "string"},
}
_STALE_HEADER = {
    "description": "true when the snapshot is older than the cache period: the runtime is "
    "failing and the last good snapshot is served, at most --max-stale past its period "
    "(absent otherwise; X-Podcache-Age says how old it is).",
    "schema": {"type": "string", "enum": ["true"]},
}
_ETAG_HEADER = {
    "description": "Weak ETag of the snapshot's content.",
    "schema": {"type": "string"},
}

_ERRORS = {
    "400": "A malformed or unknown parameter, a bad header value, a missing or repeated Host "
    "header.",
    "405": "Any method but GET and HEAD (the API is read-only).",
    "414": "Request path or query string too long.",
    "421": "The Host header does not name this server: a TCP listener without a token serves "
    "only Host values naming itself (localhost, 127.0.0.1, [::1], its address, with or "
    "without the port) and the names given with --allow-host. The connection is closed.",
    "431": "Too many or too large request header fields.",
    "500": "An unexpected failure (logged by the server; no details are returned).",
    "503": "The container runtime is not reachable or did not answer in time (the message "
    "names it), and no snapshot within --max-stale of its period can stand in; a request "
    "asking for newer data (fresh, newer_than) always gets 503 then. Also: the server already "
    "holds --max-connections connections (the connection is closed).",
}


_REVISION_HEADER = {
    "description": "The snapshot's revision (a watch's: the revision it starts from).",
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
}


def _json(schema: str, description: str, *, etag: bool = False) -> dict[str, Any]:
    headers: dict[str, Any] = {
        "X-Podcache-Age": _AGE_HEADER,
        "X-Podcache-Stale": _STALE_HEADER,
        "X-Podcache-Revision": _REVISION_HEADER,
    }
    if etag:
        headers["ETag"] = _ETAG_HEADER
    return {
        "description": description,
        "headers": headers,
        "content": {"application/json": {"schema": _ref(schema)}},
    }


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": _ref("Error")}},
    }


def _operation(
    summary: str,
    ok: dict[str, Any],
    *,
    parameters: Sequence[dict[str, Any]] = (),
    extra: dict[str, str] | None = None,
    snapshot: bool = False,
    auth: bool,
    open_route: bool = False,
) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": ok}
    if snapshot:
        responses["304"] = {
            "description": "The If-None-Match ETag still names the snapshot's content.",
            "headers": {
                "X-Podcache-Age": _AGE_HEADER,
                "X-Podcache-Stale": _STALE_HEADER,
                "ETag": _ETAG_HEADER,
            },
        }
    errors = dict(_ERRORS)
    if extra:
        errors.update(extra)
    if auth and not open_route:
        errors["401"] = "No or wrong bearer token."
    for status in sorted(errors):
        responses[status] = _error(errors[status])
    operation: dict[str, Any] = {"summary": summary, "responses": responses}
    if parameters:
        operation["parameters"] = list(parameters)
    if auth and open_route:
        operation["security"] = []
    return {"get": operation}


_NEWER_THAN = {"type": "number", "minimum": 0, "maximum": MAX_NEWER_THAN}
_FRESHNESS: list[dict[str, Any]] = [
    {
        "name": "newer_than",
        "in": "query",
        "description": "Read-your-writes: answer from a snapshot read from the runtime at or "
        "after this unix time (seconds); the cache refreshes if it holds an older one. Times "
        "in the future count as now. Refreshes asked for this way start at most once per "
        "--min-refresh-interval: a request arriving sooner waits for the next one.",
        "schema": _NEWER_THAN,
    },
    {
        "name": "fresh",
        "in": "query",
        "description": "1 (or true): answer from a snapshot read after this request arrived "
        "(newer_than now; rate-limited the same way).",
        "schema": {"type": "string", "enum": list(BOOLEANS)},
    },
    {
        "name": "X-Podcache-Newer-Than",
        "in": "header",
        "description": "Same as newer_than (the later of the two wins when both are given).",
        "schema": _NEWER_THAN,
    },
    {
        "name": "If-None-Match",
        "in": "header",
        "description": "An ETag from an earlier answer: 304 while the pods are unchanged.",
        "schema": {"type": "string"},
    },
]


_ALL: dict[str, Any] = {
    "name": "all",
    "in": "query",
    "description": "1 (or true): NotReady pods too, as podcache pods -a: not-ready sandboxes "
    "and exited containers (the kubelet's GetPods(all=true)). Answered from a cache of its "
    "own (the same period and freshness rules), whose revisions are numbered from 2**52: a "
    "since from the other view is always 410. 0 or false: the default, running pods only.",
    "schema": {"type": "string", "enum": list(BOOLEANS)},
}

_WATCH: list[dict[str, Any]] = [
    {
        "name": "watch",
        "in": "query",
        "description": "1 (or true): stream the changes instead (application/x-ndjson, chunked, "
        "one WatchEvent per line, until the client or the server ends it): without since, an "
        "ADDED line for every pod first. Not with newer_than or fresh.",
        "schema": {"type": "string", "enum": list(BOOLEANS)},
    },
    {
        "name": "since",
        "in": "query",
        "description": "With watch=1: stream exactly the changes after this revision (from "
        "X-Podcache-Revision or a list's revision); 410 when it is out of the history kept. "
        "Ignored without watch=1.",
        "schema": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
    },
]


def _pods_ok() -> dict[str, Any]:
    ok = _json("PodList", "The pods; with watch=1, the stream of their changes.", etag=True)
    ok["content"]["application/x-ndjson"] = {"schema": _ref("WatchEvent")}
    return ok


def _path(name: str, description: str, pattern: str = NAME_PATTERN) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "maxLength": MAX_ID_LENGTH, "pattern": pattern},
    }


_POD_FILTERS: list[dict[str, Any]] = [
    {
        "name": "namespace",
        "in": "query",
        "description": "Only pods in this namespace.",
        "schema": {"type": "string", "maxLength": MAX_ID_LENGTH, "pattern": NAME_PATTERN},
    },
    {
        "name": "label",
        "in": "query",
        "description": "Only pods with this label: KEY=VALUE, or KEY for any value. "
        "Repeat for several (all must match).",
        "schema": {
            "type": "array",
            "items": {"type": "string", "pattern": LABEL_SELECTOR_PATTERN},
            "maxItems": MAX_LABELS,
        },
        "style": "form",
        "explode": True,
    },
]
_NOT_FOUND = {"404": "Nothing with that identity in the snapshot."}
_WHO_NOT_FOUND = {
    "404": "Nothing with that identity in the snapshot (its departed_at says when a pod that "
    "left held it: ask again with departed=1); with departed=1 or at, nobody known held it."
}
_WHO: list[dict[str, Any]] = [
    {
        "name": "departed",
        "in": "query",
        "description": "Answer a pod that left in the last departed_for seconds too (200, "
        "with departed_at and X-Podcache-Departed: true).",
        "schema": {"type": "string", "enum": ["1", "true", "0", "false"]},
    },
    {
        "name": "at",
        "in": "query",
        "description": "The pod that held this key at that time (RFC 3339 with an offset, or "
        "unix seconds with an optional fraction): from its sandbox's creation until it left.",
        "schema": {
            "anyOf": [
                {"type": "string", "pattern": r"^[0-9]{1,11}(\.[0-9]{1,9})?$"},
                {"type": "string", "format": "date-time"},
            ]
        },
    },
]


def _who_ok(schema: str, departed: str, description: str) -> dict[str, Any]:
    """A lookup's 200: the route's usual body, or with departed=1 or at, that body with
    departed_at (and X-Podcache-Departed when the pod left)."""
    ok = _json(schema, description, etag=True)
    ok["headers"]["X-Podcache-Departed"] = {
        "description": "true when the answer is a pod that left (departed=1 or at).",
        "schema": {"type": "string", "enum": ["true"]},
    }
    ok["content"]["application/json"]["schema"] = {"oneOf": [_ref(schema), _ref(departed)]}
    return ok


def _snapshot_paths(auth: bool) -> dict[str, Any]:
    """The routes answered from a snapshot of the pods (ETag, 304, read-your-writes)."""
    return {
        "/pods": _operation(
            "The node's running pods (newest first), optionally filtered; with watch=1, their "
            "changes as a stream.",
            _pods_ok(),
            parameters=[*_POD_FILTERS, _ALL, *_FRESHNESS, *_WATCH],
            extra={
                "410": "watch=1 with a since older than the history kept or newer than the "
                "cache's revision: list again (the list's revision), then watch from it."
            },
            snapshot=True,
            auth=auth,
        ),
        "/pods/{uid}": _operation(
            "One pod by UID (or, asked, one that left or held the UID at a time).",
            _who_ok("PodResponse", "DepartedPodResponse", "The pod."),
            parameters=[_path("uid", "The pod UID."), _ALL, *_FRESHNESS, *_WHO],
            extra=_WHO_NOT_FOUND,
            snapshot=True,
            auth=auth,
        ),
        "/namespaces/{namespace}/pods/{name}": _operation(
            "One pod by namespace and name (the newest, if several share them).",
            _json("PodResponse", "The pod.", etag=True),
            parameters=[
                _path("namespace", "The namespace (no '_').", POD_NAME_PATTERN),
                _path("name", "The pod name (no '_').", POD_NAME_PATTERN),
                _ALL,
                *_FRESHNESS,
            ],
            extra=_NOT_FOUND,
            snapshot=True,
            auth=auth,
        ),
    }


def _lookup_paths(auth: bool) -> dict[str, Any]:
    """The lookups by a key a pod that left may have held: an IP, a container or sandbox ID."""
    return {
        "/ips/{ip}": _operation(
            "The pod holding an IP address now (host-network pods skipped), or, asked, one "
            "that left or held it at a time.",
            _who_ok("IPResponse", "DepartedIPResponse", "The pod and the IP."),
            parameters=[
                {
                    "name": "ip",
                    "in": "path",
                    "required": True,
                    "description": "An IPv4 or IPv6 address (any spelling; no zone, no prefix).",
                    "schema": {
                        "anyOf": [
                            {"type": "string", "format": "ipv4"},
                            {"type": "string", "format": "ipv6"},
                        ]
                    },
                },
                _ALL,
                *_FRESHNESS,
                *_WHO,
            ],
            extra={
                **_WHO_NOT_FOUND,
                "400": "Not an IP address, or a bad at or departed.",
            },
            snapshot=True,
            auth=auth,
        ),
        "/containers/{id}": _operation(
            "A container or sandbox and its pod, by ID (or, asked, one that left: by its "
            "whole ID).",
            _who_ok("ContainerResponse", "DepartedContainerResponse", "The container and its pod."),
            parameters=[
                _path(
                    "id",
                    "A full ID type://id (URL-encoded or not), a bare ID, or a unique prefix "
                    "of at least 4 characters.",
                    CONTAINER_ID_PATTERN,
                ),
                _ALL,
                *_FRESHNESS,
                *_WHO,
            ],
            extra={
                **_WHO_NOT_FOUND,
                "409": "The prefix matches several containers (the message lists them).",
            },
            snapshot=True,
            auth=auth,
        ),
    }


def _service_paths(auth: bool) -> dict[str, Any]:
    """The routes about the service itself: health, readiness, metrics, this document."""
    return {
        "/healthz": _operation(
            "The process is up (never asks the runtime; needs no token).",
            {
                "description": "Up.",
                "content": {"application/json": {"schema": _ref("Health")}},
            },
            auth=auth,
            open_route=True,
        ),
        "/readyz": _operation(
            "The runtime answered within the last cache period (refreshes if it must).",
            _json("Ready", "Ready."),
            extra={
                "503": "Not ready: the runtime is not reachable or did not answer in time; "
                "while a stale snapshot is served in its place, the answer carries "
                "X-Podcache-Stale: true.",
            },
            auth=auth,
        ),
        "/metrics": _operation(
            "Prometheus metrics.",
            {
                "description": "The text exposition format.",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            auth=auth,
        ),
        "/openapi.json": _operation(
            "This document.",
            {
                "description": "The OpenAPI document.",
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            auth=auth,
        ),
    }


def _process_paths(auth: bool) -> dict[str, Any]:
    """The route that maps a node process to its pod (reads /proc, then the snapshot)."""
    paths = {
        "/pids/{pid}": _operation(
            "The pod and container of a process on this node, by PID (read from the host's "
            "/proc: the process's cgroup names its container; PID reuse is detected).",
            _json("ProcessResponse", "The process's pod and container."),
            parameters=[
                {
                    "name": "pid",
                    "in": "path",
                    "required": True,
                    "description": "A process ID as the node (the host PID namespace) sees it, "
                    "in decimal without a sign or leading zeros.",
                    "schema": {"type": "integer", "minimum": 1, "maximum": PID_MAX},
                },
                _ALL,
                *_FRESHNESS[:3],
            ],
            extra={
                "404": "No such process, a process in no container, or one in a container or "
                "pod the runtime does not list (after one refresh if the process is newer than "
                "the snapshot): reason says which.",
            },
            auth=auth,
        ),
    }
    not_found = paths["/pids/{pid}"]["get"]["responses"]["404"]
    not_found["content"]["application/json"]["schema"] = _ref("ProcessNotFound")
    return paths


def document(*, auth: bool, version: str) -> dict[str, Any]:
    """The OpenAPI document; ``auth``: every route but /healthz needs a bearer token."""
    paths = {
        **_snapshot_paths(auth),
        **_lookup_paths(auth),
        **_process_paths(auth),
        **_service_paths(auth),
    }
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "podcache",
            "version": version,
            "description": "A node's pods as the kubelet's runtime cache sees them, read over "
            "CRI, with bounded staleness and read-your-writes (newer_than). Read-only: GET "
            "and HEAD.",
        },
        "paths": paths,
        "components": {"schemas": copy.deepcopy(SCHEMAS)},
    }
    if auth:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
