"""The OpenAPI 3.1 document of ``podcache serve``: its paths read from the route table, its
body schemas as data; no routing, no validation.

Built once per server (it differs only in whether a bearer token is required). Each path is
one row of ``routes.ROUTES`` rendered (``_operation``): its parameters are the ``Param``s the
API parses with, its 200 the row's ``Ok``, its errors the common ones (``_ERRORS``) with the
row's own. The pod schemas describe ``podcache.jsonview``'s shape; a test compares them with
that module's output, so the two cannot drift apart silently.
"""

from __future__ import annotations

import copy
from typing import Any

from podcache.jsonview import PID_MISS_REASONS
from podcache.model import ContainerState
from podcache.procs import PID_MAX
from podcache.serve.routes import ROUTES, Ok, Route

__all__ = ["SCHEMAS", "document"]

_STRING = {"type": "string"}
_COUNT = {"type": "integer", "minimum": 0}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": "#/components/schemas/" + name}


def _closed(properties: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    """An object with exactly ``properties``, all required."""
    head = (
        {"type": "object"}
        if description is None
        else {"type": "object", "description": description}
    )
    return {
        **head,
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _time(description: str) -> dict[str, Any]:
    return {"type": "string", "format": "date-time", "description": description}


def _or_null(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"oneOf": [schema, {"type": "null"}], "description": description}


def _envelope(**members: Any) -> dict[str, Any]:
    """An answer from a snapshot: ``members``, then the snapshot's time and age."""
    return _closed(
        {
            **members,
            "cache_time": {
                "type": "number",
                "description": "Unix time (seconds, wall clock) the "
                "snapshot was read from the runtime: it reflects every change made before then.",
            },
            "age_seconds": {
                "type": "number",
                "minimum": 0,
                "description": "Seconds between cache_time and this response.",
            },
        }
    )


_DEPARTED_AT = _time("When the cache first saw the pod gone (RFC 3339, UTC).")
_HELD_UNTIL = _time(
    "When the cache first saw the pod no longer holding the key (RFC 3339, "
    "UTC): it left, or the container exited or was removed from it."
)
_GONE = {
    "departed_at": _or_null(
        _DEPARTED_AT, "When the pod left (RFC 3339, UTC); null for a pod still there."
    ),
    "held_until": _or_null(
        _HELD_UNTIL,
        "When the pod stopped holding the key (RFC 3339, UTC); "
        "null while it holds it. The holding began at the pod's created_at.",
    ),
}


def _error_schema(**required: dict[str, Any]) -> dict[str, Any]:
    """The JSON error body, with ``required`` members more (a /pids 404's ``reason``)."""
    properties = {
        "error": {"type": "string", "description": "What went wrong."},
        "status": {"type": "integer", "description": "The HTTP status code."},
        **required,
        "departed_at": {
            **_DEPARTED_AT,
            "description": "A lookup's 404 for a key a pod that "
            "left held: when it left (ask again with departed=1).",
        },
        "held_until": {
            **_HELD_UNTIL,
            "description": "A lookup's 404 for a key a pod held lately "
            "(it left, or the container exited): when it stopped (ask again with departed=1).",
        },
        "matches": {
            "type": "array",
            "items": _STRING,
            "description": "A 409 for an ambiguous "
            "prefix with departed=1 or at: the IDs it matches (at most 64 remembered ones).",
        },
        "cache_time": {
            "type": "number",
            "description": "When the answer came from a snapshot "
            "(404 from a lookup): that snapshot's time.",
        },
        "age_seconds": {"type": "number", "minimum": 0},
    }
    schema = _closed(properties)
    schema["required"] = ["error", "status", *required]
    return schema


_REVISION = {
    **_COUNT,
    "description": "The snapshot's revision: +1 each time a refresh finds the pods changed.",
}
_CONTAINER = {
    "id": {
        "type": "string",
        "description": "The runtime-qualified ID, type://id (containerd://3f2a...).",
    },
    "name": {"type": "string", "description": "Empty for sandboxes."},
    "image": _STRING,
    "image_id": _STRING,
    "image_ref": _STRING,
    "image_runtime_handler": _STRING,
    "hash": _COUNT,
    "state": {"type": "string", "enum": [state.value for state in ContainerState]},
    "attempt": {
        **_COUNT,
        "description": "The CRI metadata's attempt: a container's restarts in "
        "its sandbox, a sandbox's predecessors (crictl's ATTEMPT).",
    },
}
_POD = {
    "id": {"type": "string", "description": "The pod UID."},
    "name": _STRING,
    "namespace": _STRING,
    "created_at": {
        "type": "integer",
        "description": "Creation time of the pod's newest sandbox, ns since the epoch.",
    },
    "labels": {
        "type": "object",
        "additionalProperties": _STRING,
        "description": "The pod's own labels (without the kubelet's io.kubernetes.pod.*).",
    },
    "ips": {
        "type": "array",
        "items": {"type": "string", "anyOf": [{"format": "ipv4"}, {"format": "ipv6"}]},
        "uniqueItems": True,
        "description": "The IP addresses of the pod's newest ready "
        "sandbox (its PodSandboxStatus), the primary first, in canonical text (IPv6 "
        "compressed, lower case). Empty while the runtime has not said, and for a "
        "host-network pod.",
    },
    "host_network": {
        "type": "boolean",
        "description": "The pod's sandbox shares the node's network namespace.",
    },
    "containers": {"type": "array", "items": _ref("Container")},
    "sandboxes": {"type": "array", "items": _ref("Container")},
}


def _event(kind: list[str], **members: Any) -> dict[str, Any]:
    return _closed({"type": {"type": "string", "enum": kind}, **members})


SCHEMAS: dict[str, Any] = {
    "Container": _closed(_CONTAINER, "A container or a pod sandbox, as the kubelet lists them."),
    "Pod": _closed(_POD, "A pod: containers and sandboxes newest first."),
    "PodList": _envelope(
        items={"type": "array", "items": _ref("Pod"), "description": "Newest first."},
        revision=_REVISION,
    ),
    "WatchEvent": {
        "description": "One line of a watch stream (application/x-ndjson: one JSON object per "
        "line): a change (its pod as in /pods), a BOOKMARK (every change up to revision has "
        "been sent; at least every 15 s, after the first ADDED lines of a watch without since, "
        "and first of all with since), or a last ERROR line (code 410: list again, then watch "
        "from the list's revision).",
        "oneOf": [
            _event(["ADDED", "MODIFIED", "DELETED"], revision=_REVISION, object=_ref("Pod")),
            _event(["BOOKMARK"], revision=_REVISION),
            _event(["ERROR"], code={"type": "integer", "enum": [410]}, message=_STRING),
        ],
    },
    "PodResponse": _envelope(pod=_ref("Pod")),
    "ContainerResponse": _envelope(container=_ref("Container"), pod=_ref("Pod")),
    "IPResponse": _envelope(ip=_STRING, pod=_ref("Pod")),
    "DepartedPodResponse": _envelope(pod=_ref("Pod"), **_GONE),
    "DepartedContainerResponse": _envelope(container=_ref("Container"), pod=_ref("Pod"), **_GONE),
    "DepartedIPResponse": _envelope(ip=_STRING, pod=_ref("Pod"), **_GONE),
    "ProcessResponse": _envelope(
        pid={"type": "integer", "minimum": 1, "maximum": PID_MAX},
        pod=_ref("Pod"),
        container=_or_null(
            _ref("Container"),
            "The container or sandbox the process runs in; "
            "null when its cgroup names the pod but no container (e.g. CRI-O's conmon).",
        ),
    ),
    "Ready": _envelope(status={"type": "string", "enum": ["ready"]}),
    "Health": _closed({"status": {"type": "string", "enum": ["ok"]}}),
    "Error": _error_schema(),
    "ProcessNotFound": _error_schema(
        reason={
            "type": "string",
            "enum": sorted(set(PID_MISS_REASONS.values())),
            "description": "Why the process has no pod: no_process (no such process), "
            "not_in_container (its cgroup names no container or pod), container_unknown (it names "
            "one the runtime does not list, after one refresh if the process is newer than the "
            "snapshot).",
        }
    ),
}
"""The document's ``components.schemas``: the bodies the API answers (data; ``document`` copies
it, so no document shares it)."""

_HEADERS = {
    "X-Podcache-Age": {
        "description": "Age of the snapshot in seconds (absent before the first refresh).",
        "schema": _STRING,
    },
    "X-Podcache-Stale": {
        "description": "true when the snapshot is older than the cache period: "
        "the runtime is failing and the last good snapshot is served, at most "
        "--max-stale past its period (absent otherwise; X-Podcache-Age says how "
        "old it is).",
        "schema": {"type": "string", "enum": ["true"]},
    },
    "X-Podcache-Revision": {
        "description": "The snapshot's revision (a watch's: the revision it starts from).",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    },
    "ETag": {"description": "Weak ETag of the snapshot's content.", "schema": _STRING},
    "X-Podcache-Departed": {
        "description": "true when the answer no longer holds the key "
        "(departed=1 or at): the pod left, or the container exited or was "
        "removed.",
        "schema": {"type": "string", "enum": ["true"]},
    },
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
_NOT_MODIFIED = {
    "description": "The If-None-Match ETag still names the snapshot's content.",
    "headers": {name: _HEADERS[name] for name in ("X-Podcache-Age", "X-Podcache-Stale", "ETag")},
}


def _headers(*names: str) -> dict[str, Any]:
    return {name: _HEADERS[name] for name in names}


def _ok(ok: Ok) -> dict[str, Any]:
    """The 200 response object of ``ok``."""
    body = _ref(ok.body) if isinstance(ok.body, str) else dict(ok.body)
    if ok.departed is not None:
        body = {"oneOf": [body, _ref(ok.departed)]}
    response: dict[str, Any] = {"description": ok.description}
    if ok.snapshot:
        names = ["X-Podcache-Age", "X-Podcache-Stale", "X-Podcache-Revision"]
        names += ["ETag"] if ok.etag else []
        names += ["X-Podcache-Departed"] if ok.departed is not None else []
        response["headers"] = _headers(*names)
    response["content"] = {ok.media: {"schema": body}}
    if ok.stream is not None:
        response["content"]["application/x-ndjson"] = {"schema": _ref(ok.stream)}
    return response


def _operation(route: Route, auth: bool) -> dict[str, Any]:
    """The route's GET operation."""
    responses: dict[str, Any] = {"200": _ok(route.ok)}
    if route.revalidated:
        responses["304"] = _NOT_MODIFIED
    errors = {**_ERRORS, **route.errors}
    if auth and not route.open:
        errors["401"] = "No or wrong bearer token."
    for status in sorted(errors):
        schema = _ref(route.error_bodies.get(status, "Error"))
        responses[status] = {
            "description": errors[status],
            "content": {"application/json": {"schema": schema}},
        }
    operation: dict[str, Any] = {"summary": route.summary, "responses": responses}
    if route.params:
        operation["parameters"] = [param.openapi() for param in route.params]
    if auth and route.open:
        operation["security"] = []
    return {"get": operation}


def document(*, auth: bool, version: str) -> dict[str, Any]:
    """The OpenAPI document; ``auth``: every route but the open ones needs a bearer token."""
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "podcache",
            "version": version,
            "description": "A node's pods as the kubelet's runtime cache sees them, read over "
            "CRI, with bounded staleness and read-your-writes (newer_than). Read-only: GET "
            "and HEAD.",
        },
        "paths": {route.template: _operation(route, auth) for route in ROUTES},
        "components": {"schemas": copy.deepcopy(SCHEMAS)},
    }
    if auth:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
