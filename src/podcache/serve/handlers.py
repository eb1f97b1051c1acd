"""The routes' handlers: each turns a checked request into a ``Plan``; no routing, no auth.

A handler is called by ``App`` once the route table (``routes``) matched its route, the
token passed and the query's names were checked; it gets the query, the request's headers
and the path's parameters already parsed by their ``Param`` parsers, in the route's order.
It reads its query parameters through their ``Param`` (``params``), in a fixed order, so a
request with several bad ones is told of the same one every time.
"""

from __future__ import annotations

from typing import Any, cast

from podcache.jsonview import pod_to_json
from podcache.model import Pod
from podcache.serve.calltimer import CallTimer
from podcache.serve.failures import RETRY
from podcache.serve.lookups import Lookups, not_found
from podcache.serve.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from podcache.serve.metrics import Metrics
from podcache.serve.params import FRESHNESS, LABEL, NAMESPACE, SINCE, WATCH
from podcache.serve.plan import FromSnapshot, Later, Now, Plan
from podcache.serve.query import MAX_LABELS, LabelSelector, Query, etag_matches
from podcache.serve.reading import STALE, Reader
from podcache.serve.response import JSON, HTTPError, Response
from podcache.serve.snapshot import Answer, SnapshotView
from podcache.serve.watchstream import WatchRequest, WatchStreams
from podcache.serve.who import who_of

__all__ = ["Handlers"]

_HEALTHY = b'{"status":"ok"}'
_FRESHNESS_NAMES = frozenset(param.name for param in FRESHNESS if param.where == "query")


class Handlers:
    """The handlers over one application's parts: its snapshots (``reader``), lookups, watch
    streams, metrics, runtime calls, and its OpenAPI document (``openapi``: the bytes and
    their ETag)."""

    def __init__(
        self,
        reader: Reader,
        lookups: Lookups,
        streams: WatchStreams,
        calls: CallTimer,
        metrics: Metrics,
        *,
        openapi: tuple[bytes, str],
    ) -> None:
        self._reader = reader
        self.lookups = lookups
        self._streams = streams
        self._calls = calls
        self._metrics = metrics
        self._openapi, self._openapi_etag = openapi

    def pods(self, query: Query, headers: dict[str, str], args: tuple[Any, ...]) -> Plan:
        # dict lookups, not Param.first: a list off the memo takes this path
        values = query.get("namespace")
        namespace = NAMESPACE.parse(values[0]) if values else None
        labels = query.get("label", ())
        if len(labels) > MAX_LABELS:
            raise HTTPError(400, f"more than {MAX_LABELS} label selectors")
        selectors = [LABEL.parse(text) for text in labels]
        values = query.get("watch")
        if values and WATCH.parse(values[0]):
            request = _watch_request(query, namespace, tuple(selectors))
            return Later(lambda need: self._streams.open(request))
        values = query.get("since")
        if values:
            SINCE.parse(values[0])  # checked, and without watch=1 ignored
        if namespace is None and not selectors:
            return FromSnapshot(lambda view: _found(view.items_head))

        def build(view: SnapshotView) -> Answer:
            return _found(
                view.pods_head(
                    [
                        pod
                        for pod in view.pods
                        if (namespace is None or pod.namespace == namespace)
                        and all(selector.matches(_pairs(pod)) for selector in selectors)
                    ]
                )
            )

        return FromSnapshot(build)

    def pod(self, query: Query, headers: dict[str, str], args: tuple[Any, ...]) -> Plan:
        uid: str = args[0]
        who = who_of(query)
        if who is not None:
            return Later(lambda need: self.lookups.answer_who(need, headers, who, ("uid", uid)))

        def build(view: SnapshotView) -> Answer:
            pod = view.pods.by_uid(uid)
            if pod is None:
                return self.lookups.missing(view, f"no pod with UID {uid!r}", ("uid", uid))
            return _found(view.pod_head(pod))

        return FromSnapshot(build)

    def ip(self, query: Query, headers: dict[str, str], args: tuple[Any, ...]) -> Plan:
        ip: str = args[0]
        who = who_of(query)
        if who is not None:
            return Later(lambda need: self.lookups.answer_who(need, headers, who, ("ip", ip)))

        def build(view: SnapshotView) -> Answer:
            found = self.lookups.find(view.pods, ("ip", ip))
            if found is None or found.held_until is not None:  # released: not held now
                return self.lookups.missing(view, f"no pod holds IP {ip}", ("ip", ip))
            return _found(view.document_head({"ip": ip, "pod": pod_to_json(found.pod)}))

        return FromSnapshot(build)

    def pod_by_name(self, query: Query, headers: dict[str, str], args: tuple[Any, ...]) -> Plan:
        namespace: str = args[0]
        name: str = args[1]

        def build(view: SnapshotView) -> Answer:
            pod = view.pods.by_full_name(f"{name}_{namespace}")
            if pod is None:
                return not_found(view, f"no pod {name!r} in namespace {namespace!r}")
            return _found(view.pod_head(pod))

        return FromSnapshot(build)

    def container(self, query: Query, headers: dict[str, str], args: tuple[Any, ...]) -> Plan:
        ident: str = args[0]
        who = who_of(query)
        if who is not None:
            key = ("container_id", ident)
            return Later(lambda need: self.lookups.answer_who(need, headers, who, key))

        def build(view: SnapshotView) -> Answer:
            try:
                found = view.pods.by_container_id(ident)
            except ValueError as exc:  # a malformed type://id, or a prefix under 4 characters
                raise HTTPError(400, str(exc)) from None
            except LookupError as exc:  # an ambiguous prefix
                raise HTTPError(409, str(exc)) from None
            if found is None:
                message = f"no container or sandbox with ID {ident!r}"
                return self.lookups.missing(view, message, ("container_id", ident))
            return _found(view.container_head(*found))

        return FromSnapshot(build)

    def pid(self, query: Query, headers: dict[str, str], args: tuple[Any, ...]) -> Plan:
        pid: int = args[0]
        return Later(lambda need: self.lookups.answer_pid(pid, need, headers))

    def healthz(self, query: Query, headers: dict[str, str], args: tuple[Any, ...]) -> Plan:
        return Now(Response(200, self._reader.with_age([("content-type", JSON)]), _HEALTHY))

    def readyz(self, query: Query, headers: dict[str, str], args: tuple[Any, ...]) -> Plan:
        return Later(lambda need: self._answer_ready(need, headers))

    async def _answer_ready(self, need: float | None, headers: dict[str, str]) -> Response:
        """Ready with a snapshot within its period; never kept in the memo (the answer depends
        on the request's staleness, not on the snapshot alone)."""
        view, stale = await self._reader.snapshot(need)
        if stale:
            error = self._calls.last_error
            raise HTTPError(
                503,
                "not ready: serving a stale snapshot, the last runtime call failed"
                + ("" if error is None else f" ({error})"),
                headers=[RETRY, STALE],
            )
        answer = Answer("/readyz", 200, view.ready_head(), etag=False)
        return self._reader.from_answer(view, answer, headers)

    def metrics(self, query: Query, headers: dict[str, str], args: tuple[Any, ...]) -> Plan:
        headers_out = self._reader.with_age([("content-type", METRICS_CONTENT_TYPE)])
        return Now(Response(200, headers_out, self._metrics.render()))

    def openapi(self, query: Query, headers: dict[str, str], args: tuple[Any, ...]) -> Plan:
        response_headers = [("content-type", JSON), ("etag", self._openapi_etag)]
        match = headers.get("if-none-match")
        if match is not None and etag_matches(match, self._openapi_etag):
            return Now(Response(304, response_headers[1:]))
        return Now(Response(200, response_headers, self._openapi))


def _watch_request(
    query: Query, namespace: str | None, selectors: tuple[LabelSelector, ...]
) -> WatchRequest:
    """A watch's parameters checked: ``since`` a revision (an integer >= 0), no freshness."""
    if _FRESHNESS_NAMES & query.keys():
        raise HTTPError(400, "a watch takes since, namespace and label, not fresh or newer_than")
    return WatchRequest("/pods", SINCE.first(query), namespace, selectors)


def _found(head: bytes) -> Answer:
    return Answer("", 200, head, etag=True)


def _pairs(pod: Pod) -> tuple[tuple[str, str], ...]:
    """A pod's labels in their stored form: ``(key, value)`` pairs sorted by key."""
    return cast(tuple[tuple[str, str], ...], pod.labels)
