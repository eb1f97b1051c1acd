"""The HTTP application: routing and handlers; no framework, no HTTP parsing, sockets or signals.

``App.respond(method, path, query, headers)`` is the whole API as one coroutine from request
parts to a ``Response``: podcache's own HTTP/1.1 server (``http1``) calls it directly, and
``__call__`` is a thin ASGI 3 entry point around it (for running the app under an ASGI server,
as ``benchmarks/bench_serve.py --with-uvicorn`` does). No framework: a dict and three prefixes
route, and snapshot bodies come pre-serialised from ``snapshot``. Checks run cheapest first:
sizes (414, 431), method (405), route (404), token (401), parameters (400), and only then the
cache. Server startup, sockets and signals live in ``server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any, cast

import msgspec

import podcache
from podcache.cache import AsyncPodGetter, AsyncRuntimeCache
from podcache.cache.threaded import offers_events
from podcache.errors import PodcacheError
from podcache.model import Pod, PodList
from podcache.procs import LookupResult, ProcFormatError, alookup_pod
from podcache.serve.auth import BearerAuth
from podcache.serve.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from podcache.serve.metrics import Metrics
from podcache.serve.openapi import document
from podcache.serve.query import (
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    MAX_LABELS,
    MAX_QUERY,
    LabelSelector,
    Query,
    check_name,
    check_path,
    collect_headers,
    etag_matches,
    parse_bool,
    parse_newer_than,
    parse_pid,
    parse_query,
)
from podcache.serve.response import JSON, HTTPError, Response
from podcache.serve.snapshot import SnapshotView, SnapshotViews
from podcache.serve.watch import RuntimeWatch

__all__ = [
    "DEFAULT_MAX_STALE",
    "DEFAULT_MIN_REFRESH_INTERVAL",
    "DEFAULT_WAIT",
    "App",
]

log = logging.getLogger("podcache.serve")

DEFAULT_WAIT = 10.0
"""Seconds a request waits for the cache (a refresh in flight, then its own) before a 503."""

DEFAULT_MIN_REFRESH_INTERVAL = 0.1
"""Seconds between two refreshes forced by requests (``fresh``, ``newer_than``): see
``podcache.cache.core`` for the rule."""
DEFAULT_MAX_STALE = 30.0
"""Seconds past its period the last good snapshot is served (marked stale) while the runtime
fails; requests that ask for newer data get 503 meanwhile."""

_FRESHNESS = frozenset({"newer_than", "fresh"})
_POD_LIST_PARAMS = _FRESHNESS | {"namespace", "label"}
_NONE: frozenset[str] = frozenset()
_REPEATABLE = frozenset({"label"})
_METHODS = frozenset({"GET", "HEAD"})
_ALLOW = [("allow", "GET, HEAD")]
_UNAUTHORIZED = [("www-authenticate", 'Bearer realm="podcache"')]
_RETRY = [("retry-after", "1")]
_HEALTHY = b'{"status":"ok"}'
_STALE = ("x-podcache-stale", "true")

_PID_MISSES = {
    "not_in_container": "is in no container (its cgroup names none)",
    "unknown": "is in a container or pod the runtime does not list",
}

Handler = Callable[[str, dict[str, str], tuple[str, ...]], Awaitable[Response]]

_MAX_REPLAYS = 4096
"""Most remembered answers (see ``App._remember``): bounded memory under a scan of paths."""
_NO_QUERY: Query = {}
_NO_HEADERS: dict[str, str] = {}
# Request headers that can change a snapshot answer: their requests take the full path.
_NOT_PLAIN = frozenset({"authorization", "if-none-match", "x-podcache-newer-than"})


def _plain(header_items: list[tuple[str, str]]) -> bool:
    """No header that could change the answer, and within the limits ``collect_headers``
    enforces: the request may be answered like an earlier one of the same path."""
    size = 0
    for name, value in header_items:
        if name.lower() in _NOT_PLAIN:
            return False
        size += len(name) + len(value)
    return len(header_items) <= MAX_HEADERS and size <= MAX_HEADER_BYTES


class App:
    """``podcache serve``'s API over ``getter``, cached for ``cache_period``.

    ``auth``: require ``Authorization: Bearer`` on every route but /healthz. ``wait``: how
    long a request waits for the cache. ``clock`` is the cache's (monotonic) clock and
    ``wall`` the unix clock; ``newer_than`` times are mapped from one to the other per request.
    ``min_refresh_interval``, ``max_stale`` and ``refresh_ahead`` are the cache's (seconds;
    ``refresh_ahead`` None is a quarter of the period). A snapshot older than the period is
    served only by ``max_stale`` (the runtime failed): such answers carry
    ``X-Podcache-Stale: true``, and /readyz answers 503 while it lasts.
    ``proc_root``: where ``/pids/{pid}`` reads processes (the host's ``/proc``).
    """

    def __init__(
        self,
        getter: AsyncPodGetter,
        cache_period: float | timedelta,
        *,
        auth: BearerAuth | None = None,
        wait: float = DEFAULT_WAIT,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        min_refresh_interval: float = DEFAULT_MIN_REFRESH_INTERVAL,
        max_stale: float | None = DEFAULT_MAX_STALE,
        refresh_ahead: float | None = None,
        proc_root: str = "/proc",
        events: bool = False,
    ) -> None:
        self._proc_root = proc_root
        self._clock = clock
        self._wall = wall
        self._auth = auth
        self._wait = wait
        self.metrics = Metrics(self._stats, self._latest)
        self.watch = RuntimeWatch(getter, clock=clock, on_call=self.metrics.observe_refresh)
        period = (
            cache_period.total_seconds() if isinstance(cache_period, timedelta) else cache_period
        )
        self._views = SnapshotViews()
        self._stale_view: SnapshotView | None = None
        self.cache = AsyncRuntimeCache(
            _Prepared(self.watch, self._prepare, self._views),
            cache_period,
            clock=clock,
            stats=True,
            min_refresh_interval=min_refresh_interval,
            max_stale=max_stale,
            refresh_ahead=period / 4 if refresh_ahead is None else refresh_ahead,
            # when the runtime getter has container_events (watch and _Prepared pass them on)
            events=events and offers_events(getter),
        )
        # path -> (view, route, body head, status, etag?): see _remember.
        self._replays: dict[str, tuple[SnapshotView, str, bytes, int, bool]] = {}
        self._replay_view: SnapshotView | None = None
        openapi = msgspec.json.encode(document(auth=auth is not None, version=podcache.__version__))
        self._openapi = openapi
        self._openapi_etag = f'"{hashlib.blake2b(openapi, digest_size=12).hexdigest()}"'
        self._exact: dict[str, tuple[str, Handler]] = {
            "/pods": ("/pods", self._pods),
            "/healthz": ("/healthz", self._healthz),
            "/readyz": ("/readyz", self._readyz),
            "/metrics": ("/metrics", self._metrics),
            "/openapi.json": ("/openapi.json", self._openapi_doc),
        }

    # -- the API as one coroutine ------------------------------------------------------------
    async def respond(
        self, method: str, path: str, query: str, header_items: Iterable[tuple[str, str]]
    ) -> Response:
        """Answer one request. Never raises (but for cancellation): failures become JSON."""
        route = "unmatched"
        if type(header_items) is not list:
            header_items = list(header_items)  # read twice: by the replay check, then collected
        try:
            replay = self._replays.get(path) if not query and method in _METHODS else None
            if replay is not None and _plain(header_items):
                # Asked before, plainly, of this snapshot: the same answer, with a fresh age.
                route = replay[1]
                view = await self._snapshot(_NO_QUERY, _NO_HEADERS)
                if view is replay[0]:
                    response = self._snapshot_response(
                        view, replay[2], _NO_HEADERS, replay[3], etag=replay[4]
                    )
                    self.metrics.count(route, response.status)
                    return response
            check_path(path)
            if len(query) > MAX_QUERY:
                raise HTTPError(414, f"query string is longer than {MAX_QUERY} characters")
            headers = collect_headers(header_items)
            if method not in _METHODS:
                raise HTTPError(
                    405,
                    f"method {method[:16]} is not allowed: the API is read-only (GET, HEAD)",
                    headers=_ALLOW,
                )
            route, handler, args = self._route(path)
            if (
                self._auth is not None
                and route != "/healthz"
                and not self._auth.check(headers.get("authorization"))
            ):
                raise HTTPError(
                    401,
                    "a valid bearer token is required (Authorization: Bearer <token>)",
                    headers=_UNAUTHORIZED,
                )
            response = await handler(query, headers, args)
            if response.replay is not None and not query and self._auth is None:
                self._remember(path, route, response.status, response.replay)
        except HTTPError as error:
            response = self._error(error)
        except Exception:
            log.exception("internal error answering %s %.200s", method[:16], path)
            response = self._error(HTTPError(500, "internal server error (logged by the server)"))
        self.metrics.count(route, response.status)
        return response

    def _remember(
        self, path: str, route: str, status: int, replay: tuple[SnapshotView, bytes, bool]
    ) -> None:
        """Keep how ``path`` (asked without a query) was answered from its snapshot, so the
        same request is answered again without routing, parsing or lookups. Only the current
        snapshot's answers are kept, at most ``_MAX_REPLAYS`` of them."""
        view, head, etag = replay
        if view is not self._replay_view or len(self._replays) >= _MAX_REPLAYS:
            self._replays = {}
            self._replay_view = view
        self._replays[path] = (view, route, head, status, etag)

    def _route(self, path: str) -> tuple[str, Handler, tuple[str, ...]]:
        exact = self._exact.get(path)
        if exact is not None:
            return exact[0], exact[1], ()
        if path.startswith("/pods/"):
            uid = path[6:]
            if uid and "/" not in uid:
                return "/pods/{uid}", self._pod, (uid,)
        elif path.startswith("/containers/"):
            ident = path[12:]
            if ident:
                return "/containers/{id}", self._container, (ident,)
        elif path.startswith("/pids/"):
            return "/pids/{pid}", self._pid, (path[6:],)
        elif path.startswith("/namespaces/"):
            parts = path[12:].split("/")
            if len(parts) == 3 and parts[1] == "pods" and parts[0] and parts[2]:
                args = (parts[0], parts[2])
                return "/namespaces/{namespace}/pods/{name}", self._pod_by_name, args
        raise HTTPError(404, f"no such route {path[:100]!r} (the routes are in /openapi.json)")

    def _error(self, error: HTTPError) -> Response:
        headers = [("content-type", JSON), *error.headers]
        age = self._age_header()
        if age is not None:
            headers.append(("x-podcache-age", age))
        return Response(error.status, headers, error.body())

    # -- snapshots -----------------------------------------------------------------------------
    async def _snapshot(self, query: Query, headers: dict[str, str]) -> SnapshotView:
        """The snapshot this request may be answered from, after any read-your-writes wait."""
        arrival = self._clock()
        need: float | None = None
        values = query.get("newer_than")
        if values:
            need = parse_newer_than(values[0], "newer_than")
        header = headers.get("x-podcache-newer-than")
        if header is not None:
            stated = parse_newer_than(header, "X-Podcache-Newer-Than")
            need = stated if need is None else max(need, stated)
        values = query.get("fresh")
        if values and parse_bool(values[0], "fresh"):
            now_wall = self._wall()
            need = now_wall if need is None else max(need, now_wall)
        cache = self.cache
        try:
            if need is not None:
                now = self._clock()
                # Wall time onto the cache's clock, as of now; a future time counts as now.
                target = min(need - (self._wall() - now), now)
                await cache.force_update_if_older(target, timeout=self._wait)
            pods = await cache.get_pods(timeout=self._wait)
        except PodcacheError as exc:
            raise HTTPError(503, str(exc), headers=_RETRY) from exc
        except TimeoutError as exc:
            raise HTTPError(
                503,
                str(exc) or f"the container runtime did not answer within {self._wait:g} s",
                headers=_RETRY,
            ) from exc
        view = self._views.current
        if view is None or view.pods is not pods:
            view = self._views.get(pods, lambda: self._stamp(pods))
        # Older than the period when this request arrived: only max_stale serves that (the
        # runtime failed). Decided per request: every caller builds its answer right after
        # this returns, with no await in between, so the flag is still its own.
        stale = arrival - view.monotonic > cache.cache_period
        self._stale_view = view if stale else None
        return view

    def _prepare(self, pods: PodList) -> SnapshotView:
        """In a worker thread, before the cache publishes ``pods``: its JSON, ETag and lookup
        tables, so no request builds them on the event loop."""
        monotonic, wall = self._stamp(pods)
        view = SnapshotView(pods, monotonic, wall, previous=self._views.current)
        pods.by_uid("")
        pods.by_full_name("")
        with contextlib.suppress(LookupError, ValueError):
            pods.by_container_id("0000")  # the ID table and the sorted IDs for prefixes
        return view

    def _stamp(self, pods: PodList) -> tuple[float, float]:
        """The snapshot's time on the cache's clock and as unix time."""
        fetched = self.watch.fetched_at(pods)
        if fetched is None:
            fetched = self.cache.cache_time
        now = self._clock()
        if fetched is None:
            fetched = now
        return fetched, fetched + (self._wall() - now)

    def _snapshot_response(
        self,
        view: SnapshotView,
        head: bytes,
        headers: dict[str, str],
        status: int = 200,
        *,
        etag: bool = True,
    ) -> Response:
        """``head`` completed with the snapshot's age; 304 when If-None-Match names it."""
        age = f"{max(self._clock() - view.monotonic, 0.0):.3f}"
        if status != 200 or not etag:
            response_headers = [("content-type", JSON), ("x-podcache-age", age)]
        else:
            response_headers = [
                ("content-type", JSON),
                ("etag", view.etag),
                ("x-podcache-age", age),
                ("cache-control", "no-cache"),
            ]
            match = headers.get("if-none-match")
            if match is not None and etag_matches(match, view.etag):
                return Response(304, response_headers[1:] + self._stale(view))
        response_headers += self._stale(view)
        response = Response(status, response_headers, view.body(head, age))
        response.replay = (view, head, etag)
        return response

    def _stale(self, view: SnapshotView) -> list[tuple[str, str]]:
        """The stale header, when this request's snapshot was older than the period."""
        return [_STALE] if view is self._stale_view else []

    def _age_header(self) -> str | None:
        cache_time = self.cache.cache_time
        if cache_time is None:
            return None
        return f"{max(self._clock() - cache_time, 0.0):.3f}"

    def _stats(self) -> podcache.CacheStats:
        return self.cache.stats()

    def _latest(self) -> PodList | None:
        return self.watch.latest

    # -- handlers ----------------------------------------------------------------------------
    async def _pods(
        self, query_text: str, headers: dict[str, str], args: tuple[str, ...]
    ) -> Response:
        query = parse_query(query_text, _POD_LIST_PARAMS, _REPEATABLE) if query_text else {}
        namespaces = query.get("namespace")
        namespace = check_name(namespaces[0], "namespace") if namespaces else None
        labels = query.get("label", ())
        if len(labels) > MAX_LABELS:
            raise HTTPError(400, f"more than {MAX_LABELS} label selectors")
        selectors = [LabelSelector.parse(text) for text in labels]
        view = await self._snapshot(query, headers)
        if namespace is None and not selectors:
            return self._snapshot_response(view, view.items_head, headers)

        def build() -> bytes:
            return view.pods_head(
                [
                    pod
                    for pod in view.pods
                    if (namespace is None or pod.namespace == namespace)
                    and all(selector.matches(_pairs(pod)) for selector in selectors)
                ]
            )

        key = ("pods", namespace, tuple((s.key, s.value) for s in selectors))
        return self._snapshot_response(view, view.memo(key, build), headers)

    async def _pod(
        self, query_text: str, headers: dict[str, str], args: tuple[str, ...]
    ) -> Response:
        query = parse_query(query_text, _FRESHNESS, _NONE) if query_text else {}
        uid = check_name(args[0], "pod UID")
        view = await self._snapshot(query, headers)
        pod = view.pods.by_uid(uid)
        if pod is None:
            return self._not_found(view, headers, f"no pod with UID {uid!r}")
        return self._snapshot_response(
            view, view.memo(("pod", uid), lambda: view.pod_head(pod)), headers
        )

    async def _pod_by_name(
        self, query_text: str, headers: dict[str, str], args: tuple[str, ...]
    ) -> Response:
        query = parse_query(query_text, _FRESHNESS, _NONE) if query_text else {}
        namespace = check_name(args[0], "namespace", underscore=False)
        name = check_name(args[1], "pod name", underscore=False)
        view = await self._snapshot(query, headers)
        pod = view.pods.by_full_name(f"{name}_{namespace}")
        if pod is None:
            return self._not_found(view, headers, f"no pod {name!r} in namespace {namespace!r}")
        return self._snapshot_response(
            view, view.memo(("pod", pod.id, name, namespace), lambda: view.pod_head(pod)), headers
        )

    async def _container(
        self, query_text: str, headers: dict[str, str], args: tuple[str, ...]
    ) -> Response:
        query = parse_query(query_text, _FRESHNESS, _NONE) if query_text else {}
        ident = check_name(args[0], "container ID")
        view = await self._snapshot(query, headers)
        try:
            found = view.pods.by_container_id(ident)
        except ValueError as exc:  # a malformed type://id, or a prefix under 4 characters
            raise HTTPError(400, str(exc)) from None
        except LookupError as exc:  # an ambiguous prefix
            raise HTTPError(409, str(exc)) from None
        if found is None:
            return self._not_found(view, headers, f"no container or sandbox with ID {ident!r}")
        pod, container = found
        return self._snapshot_response(
            view,
            view.memo(("container", ident), lambda: view.container_head(pod, container)),
            headers,
        )

    async def _pid(
        self, query_text: str, headers: dict[str, str], args: tuple[str, ...]
    ) -> Response:
        query = parse_query(query_text, _FRESHNESS, _NONE) if query_text else {}
        pid = parse_pid(args[0])
        await self._snapshot(query, headers)  # read-your-writes first, as on every route
        result = await self._lookup_pid(pid)
        pods = result.pods
        if pods is None:  # the process's cgroup names nothing: the runtime was not asked
            raise HTTPError(404, f"process {pid} {_PID_MISSES[result.outcome]}")
        view = self._views.get(pods, lambda: self._stamp(pods))
        found = result.process
        if found is None:
            response = self._not_found(
                view, headers, f"process {pid} {_PID_MISSES[result.outcome]}"
            )
        else:
            head = view.process_head(pid, found.pod, found.container)
            response = self._snapshot_response(view, head, headers, etag=False)
        response.replay = None  # the same PID names another process later: never replayed
        return response

    async def _lookup_pid(self, pid: int) -> LookupResult:
        """``pod_of_pid`` with its outcome counted; failures as HTTP errors."""
        try:
            result = await alookup_pod(
                self.cache, self._clock, pid, proc_root=self._proc_root, timeout=self._wait
            )
        except ProcessLookupError:
            self.metrics.count_pid_lookup("no_process", False)
            raise HTTPError(404, f"no process {pid} (in {self._proc_root})") from None
        except ProcFormatError as exc:  # before PodcacheError, which it also is
            raise self._unreadable(pid, exc) from exc
        except (PodcacheError, TimeoutError) as exc:
            self.metrics.count_pid_lookup("error", False)
            raise HTTPError(
                503, str(exc) or "the container runtime did not answer", headers=_RETRY
            ) from exc
        except OSError as exc:
            raise self._unreadable(pid, exc) from exc
        self.metrics.count_pid_lookup(result.outcome, result.refreshed)
        return result

    def _unreadable(self, pid: int, exc: Exception) -> HTTPError:
        """A process whose /proc files cannot be read or parsed: counted, and a 503."""
        self.metrics.count_pid_lookup("error", False)
        return HTTPError(503, f"cannot read process {pid}: {exc}", headers=_RETRY)

    def _not_found(self, view: SnapshotView, headers: dict[str, str], message: str) -> Response:
        return self._snapshot_response(view, view.not_found_head(404, message), headers, 404)

    async def _healthz(
        self, query_text: str, headers: dict[str, str], args: tuple[str, ...]
    ) -> Response:
        if query_text:
            parse_query(query_text, _NONE, _NONE)
        response = Response(200, [("content-type", JSON)], _HEALTHY)
        age = self._age_header()
        if age is not None:
            response.headers.append(("x-podcache-age", age))
        return response

    async def _readyz(
        self, query_text: str, headers: dict[str, str], args: tuple[str, ...]
    ) -> Response:
        if query_text:
            parse_query(query_text, _NONE, _NONE)
        view = await self._snapshot({}, headers)
        if view is self._stale_view:
            error = self.watch.last_error
            raise HTTPError(
                503,
                "not ready: serving a stale snapshot, the last runtime call failed"
                + ("" if error is None else f" ({error})"),
                headers=[*_RETRY, _STALE],
            )
        head = b'{"status":"ready","cache_time":' + view.wall_text + b',"age_seconds":'
        response = self._snapshot_response(view, head, headers, etag=False)
        response.replay = None  # never replayed: readiness is decided again on every request
        return response

    async def _metrics(
        self, query_text: str, headers: dict[str, str], args: tuple[str, ...]
    ) -> Response:
        if query_text:
            parse_query(query_text, _NONE, _NONE)
        headers_out = [("content-type", METRICS_CONTENT_TYPE)]
        age = self._age_header()
        if age is not None:
            headers_out.append(("x-podcache-age", age))
        return Response(200, headers_out, self.metrics.render())

    async def _openapi_doc(
        self, query_text: str, headers: dict[str, str], args: tuple[str, ...]
    ) -> Response:
        if query_text:
            parse_query(query_text, _NONE, _NONE)
        response_headers = [("content-type", JSON), ("etag", self._openapi_etag)]
        match = headers.get("if-none-match")
        if match is not None and etag_matches(match, self._openapi_etag):
            return Response(304, response_headers[1:])
        return Response(200, response_headers, self._openapi)

    # -- the ASGI entry point --------------------------------------------------------------
    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        """ASGI 3: HTTP requests, and lifespan events (acknowledged; nothing to set up)."""
        kind = scope["type"]
        if kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if kind != "http":
            await send({"type": "websocket.close", "code": 1003})
            return
        method: str = scope["method"]
        response = await self.respond(
            method,
            scope["path"],
            scope.get("query_string", b"").decode("latin-1"),
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", ())],
        )
        body = response.body
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
        if response.status != 304:
            raw.append((b"content-length", b"%d" % len(body)))
        await send({"type": "http.response.start", "status": response.status, "headers": raw})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})

    # -- lifecycle -------------------------------------------------------------------------
    async def warm(self) -> BaseException | None:
        """Fill the cache once (at startup); returns the error instead of raising it."""
        try:
            await self.cache.get_pods(timeout=self._wait)
        except Exception as exc:
            return exc
        return None

    async def aclose(self) -> None:
        """End the event subscription, wait for refreshes still running."""
        await self.cache.close()


class _Prepared:
    """The getter the cache calls: ``watch``'s pods, with ``prepare(pods)`` run in a worker
    thread before they are returned (the view it builds is offered to the app's views)."""

    def __init__(
        self,
        watch: RuntimeWatch,
        prepare: Callable[[PodList], SnapshotView],
        views: SnapshotViews,
    ) -> None:
        self._watch = watch
        self._prepare = prepare
        self._views = views

    async def get_pods(self, all: bool) -> PodList:
        pods = await self._watch.get_pods(all)
        self._views.offer(await asyncio.to_thread(self._prepare, pods))
        return pods

    def container_events(self) -> Any:
        """The runtime's event stream, through the watch."""
        return self._watch.container_events()


def _pairs(pod: Pod) -> tuple[tuple[str, str], ...]:
    """A pod's labels in their stored form: ``(key, value)`` pairs sorted by key."""
    return cast(tuple[tuple[str, str], ...], pod.labels)
