"""The HTTP application: routing and handlers; no framework, no HTTP parsing, sockets or signals.

``App.respond(method, path, query, headers)`` is the whole API as one coroutine from request
parts to a ``Response``; ``App.respond_now`` gives the same answer without a coroutine when no
waiting is needed (the snapshot is fresh), else the coroutine that answers. Podcache's own
HTTP/1.1 server (``http1``) calls ``respond_now`` and awaits that coroutine in a task;
``asgi.asgi_app`` is the ASGI 3 entry point around ``respond``. Each handler returns a
``plan.Plan`` (answer now, from a snapshot, or later), which ``_begin`` completes and
``respond_now`` / ``respond`` carry out. No framework: a dict and three prefixes
route, and snapshot bodies come pre-serialised from ``snapshot``. Checks run cheapest first:
sizes (414, 431), method (405), route (404), token (401), parameters (400), and only then the
cache. What is kept between requests is one memo, ``App.memo`` (the current snapshot's view
and its answers); the rule for replaying from it is written at ``respond_now``. Server
startup, sockets and signals live in ``server``."""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from datetime import timedelta
from typing import Any, assert_never, cast
from urllib.parse import unquote, unquote_plus

import msgspec

import podcache
from podcache.cache import AsyncPodGetter, AsyncRuntimeCache, Found
from podcache.cache.pids import LookupResult, UnknownIDs, alookup_pod, async_probe
from podcache.cache.publishing import Publication
from podcache.cache.shared import offers_events
from podcache.errors import AmbiguousContainerIDError, PodcacheError
from podcache.jsonview import PID_MISS_REASONS, pod_to_json
from podcache.model import Pod, PodList
from podcache.serve.allview import all_pods_getter
from podcache.serve.auth import BearerAuth
from podcache.serve.calltimer import CallTimer, timed
from podcache.serve.failures import RETRY, failure_of
from podcache.serve.keeper import keep_fresh
from podcache.serve.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from podcache.serve.metrics import REQUEST_CLOCK, Metrics
from podcache.serve.openapi import document
from podcache.serve.plan import FromSnapshot, Later, Now, Plan
from podcache.serve.query import (
    BOOLEANS,
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
    parse_ip,
    parse_newer_than,
    parse_pid,
    parse_query,
)
from podcache.serve.response import JSON, HTTPError, Response
from podcache.serve.snapshot import Answer, SnapshotView
from podcache.serve.watchstream import BOOKMARK_INTERVAL, WatchRequest, WatchStreams
from podcache.serve.who import DEPARTED, WHO_ROUTES, Who, rfc3339, who_document, who_of

__all__ = [
    "ALL_REVISIONS_FROM",
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

BUILD_OFF_LOOP = 64
"""A publish that changed more pods than this has its view built in a worker thread (encoding
a pod takes ~16 us: more would hold the loop over a millisecond); fewer, on first use."""

_NOT_OPTIONS = frozenset({"self", "getter", "all_pods", "__class__"})
"""``App.__init__``'s locals that are not options handed on to the all view."""

RECENT_VIEWS = 16
"""Views of past publications kept, so a request that got its pods before newer ones were
published still answers from its own snapshot (and says whether that was stale)."""

ALL_REVISIONS_FROM = 2**52
"""Where the ``?all=1`` view numbers its revisions from (plus ms since the epoch at its start,
as the default view): the two ranges never meet, so a ``since`` from one view is always out of
the other's history (410), never a revision it means otherwise; both stay below 2**53, exact
in JavaScript."""

_FRESHNESS = frozenset({"newer_than", "fresh"})
_WATCH_PARAMS = frozenset({"watch", "since"})
_LOOKUP_PARAMS = _FRESHNESS | {"all"}
_POD_LIST_PARAMS = _LOOKUP_PARAMS | _WATCH_PARAMS | {"namespace", "label"}
_NONE: frozenset[str] = frozenset()
_REPEATABLE = frozenset({"label"})
_METHODS = frozenset({"GET", "HEAD"})
_ALLOW = [("allow", "GET, HEAD")]
_UNAUTHORIZED = [("www-authenticate", 'Bearer realm="podcache"')]
_HEALTHY = b'{"status":"ok"}'
_STALE = ("x-podcache-stale", "true")

_INTERNAL = "internal server error (logged by the server)"
_WHO_PARAMS = _LOOKUP_PARAMS | {"at", "departed"}
"""The lookups that may answer a pod that left (``departed=1``) or held a key at a time."""
_PARAMS = {
    "/pods": _POD_LIST_PARAMS,
    "/pods/{uid}": _WHO_PARAMS,
    "/ips/{ip}": _WHO_PARAMS,
    "/namespaces/{namespace}/pods/{name}": _LOOKUP_PARAMS,
    "/containers/{id}": _WHO_PARAMS,
    "/pids/{pid}": _LOOKUP_PARAMS,
}
"""The query parameters each route accepts (none where not listed)."""
_PID_MISSES = {
    "not_in_container": "is in no container (its cgroup names none)",
    "unknown": "is in a container or pod the runtime does not list",
}

_NO_HEADERS: dict[str, str] = {}
_FRESHNESS_HEADER = "x-podcache-newer-than"


Handler = Callable[[Query, dict[str, str], tuple[str, ...]], Plan]
"""A route's handler: the parsed query, the request's headers and the path's arguments to how
the request will be answered (``serve.plan``)."""


def _replayable(header_items: list[tuple[str, str]]) -> tuple[bool, str | None]:
    """``(True, authorization header or None)`` when the headers allow a replay (rule 3 in
    ``App.respond_now``), else ``(False, ...)``."""
    size = 0
    authorization = None
    for name, value in header_items:
        lower = name.lower()
        if lower == "authorization":
            if authorization is not None:
                return False, None  # repeated: the full path answers 400
            authorization = value
        elif lower in ("if-none-match", _FRESHNESS_HEADER):
            return False, None
        size += len(name) + len(value)
    if len(header_items) > MAX_HEADERS or size > MAX_HEADER_BYTES:
        return False, None  # the full path answers 431
    return True, authorization


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

    ``?all=1`` (NotReady pods included, as ``podcache pods -a``) is answered by a second App,
    the *all view*, built on the first such request (``_all_view``): the same options over
    ``get_pods(True)``, with its own cache, memo and watch streams, and revisions numbered from
    ``ALL_REVISIONS_FROM``; it counts into this App's metrics. ``all_pods`` makes an App that
    view (it has none of its own).
    """

    _keeper: asyncio.Task[None] | None = None
    """The task that keeps the snapshot within its period while nobody reads
    (``serve/keeper.py``), from ``warm`` on (the all view's from when it is built)."""

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
        bookmark_interval: float = BOOKMARK_INTERVAL,
        first_revision: int | None = None,
        all_pods: bool = False,
    ) -> None:
        # The options as given, for the all view (the same, over get_pods(True)).
        options = {name: value for name, value in locals().items() if name not in _NOT_OPTIONS}
        self._proc_root = proc_root
        # A lookup of a container missing from the snapshot asks the runtime about it alone
        # (never a relist of the node) when the getter can list one pod.
        self._probe = async_probe(getter)
        self._unknown = UnknownIDs()
        self._clock = clock
        self._wall = wall
        self._auth = auth
        self._wait = wait
        self.metrics = Metrics(self._stats, self._latest, wall)
        self.calls: CallTimer = timed(getter, clock=clock, **self.metrics.call_observers())
        self.memo: SnapshotView | None = None
        """The response memo: the newest snapshot's view and the answers given from it (the
        only thing kept between requests; replaced at each publish)."""
        self._builds: dict[SnapshotView, asyncio.Future[None]] = {}  # in a worker, until done
        """The view being built in a worker thread, and that build."""
        self._recent: collections.deque[SnapshotView] = collections.deque(maxlen=RECENT_VIEWS)
        """The views of the last publications, newest last (``_view``)."""
        self.cache = self._make_cache(
            cache_period,
            min_refresh_interval=min_refresh_interval,
            max_stale=max_stale,
            refresh_ahead=refresh_ahead,
            events=events and offers_events(getter),
            first_revision=(int(wall() * 1000) if first_revision is None else first_revision)
            + (ALL_REVISIONS_FROM if all_pods else 0),
        )
        # The one way a snapshot reaches serve: its view, the metrics' pods, the broadcast.
        self.cache.on_publish(self._published)
        self.streams = WatchStreams(self.cache, bookmark_interval=bookmark_interval, wait=wait)
        self.metrics.watchers = self.streams.counters
        self._openapi, self._openapi_etag = _openapi(auth is not None)
        self._all_view: App | None = None
        """The App that answers ``?all=1``, once built (never in an all view itself)."""
        self._make_all_view: Callable[[], App] | None = None
        if not all_pods:
            self._make_all_view = lambda: App(all_pods_getter(getter), **options, all_pods=True)
        self._exact: dict[str, tuple[str, Handler]] = {
            path: (path, handler) for path, handler in self._exact_routes().items()
        }

    def _exact_routes(self) -> dict[str, Handler]:
        """The routes without a parameter in their path."""
        return {
            "/pods": self._pods,
            "/healthz": self._healthz,
            "/readyz": self._readyz,
            "/metrics": self._metrics,
            "/openapi.json": self._openapi_doc,
        }

    def _make_cache(
        self,
        cache_period: float | timedelta,
        *,
        min_refresh_interval: float,
        max_stale: float | None,
        refresh_ahead: float | None,
        events: bool,
        first_revision: int,
    ) -> AsyncRuntimeCache:
        """The App's cache over its call timer: stats on, refresh-ahead a quarter of the period
        unless given, revisions from ``first_revision`` (serve starts them from the clock, in
        ms: a since from before a restart is then always older than this process's first
        revision, 410, never one it reuses), departures stamped on the App's wall clock."""
        period = (
            cache_period.total_seconds() if isinstance(cache_period, timedelta) else cache_period
        )
        self._refresh_ahead = period / 4 if refresh_ahead is None else refresh_ahead
        return AsyncRuntimeCache(
            self.calls,
            cache_period,
            clock=self._clock,
            stats=True,
            min_refresh_interval=min_refresh_interval,
            max_stale=max_stale,
            refresh_ahead=self._refresh_ahead,
            events=events,  # when the runtime getter has container_events (the timer passes them)
            first_revision=first_revision,
            wall_clock=self._wall,
        )

    # -- the API: at once when no waiting is needed, else as a coroutine ----------------------
    def respond_now(
        self, method: str, path: str, query: str, header_items: list[tuple[str, str]]
    ) -> Response | Coroutine[Any, Any, Response]:
        """The answer when it needs no waiting, else the coroutine that answers (to await in
        a task: the request is checked and parsed once, here).

        Exactly two kinds, never None (``http1.RespondNow``): a ``Response`` when the plan is
        ``Now`` (an error, /healthz, /metrics...), a replay from the memo, or a
        ``FromSnapshot`` with no freshness need while the cache hands out a fresh snapshot
        without waiting; else a coroutine (from ``_answer_later``) that waits for the snapshot
        or runs the ``Later`` plan, and never raises (but for cancellation).

        THE REPLAY RULE. A request is answered from the memo, skipping routing, parameter
        parsing and lookups, exactly when all of these hold:

        1. it is a GET or HEAD whose target (path, and ``?query`` as sent) is a key of the
           memo's answers: a request with that target was answered from this same snapshot
           after passing every check of the full path (``_finish`` keeps only those, and never
           one whose target asks for freshness, ``fresh`` or ``newer_than``, nor /readyz,
           whose answer depends on the request's staleness, nor ``/pids/{pid}``);
        2. the cache hands out that very snapshot now, without waiting (so the answer is
           what the full path would compute, to the byte but for the age);
        3. it carries no header that could change the answer or make it an error on the full
           path: no If-None-Match, no X-Podcache-Newer-Than, no repeated Authorization, and
           within the header limits (``_replayable``);
        4. the token check passes: it runs on every request, replayed or not (``_allowed``).
           The Host check is the HTTP server's, done before any request reaches the app.

        Anything else takes the full path (``_begin``, then ``_finish``), which answers at
        once too when the snapshot is fresh and the request asks for nothing newer. A request
        with ``all`` true goes to the all view, whole (``_wants_all``).
        """
        if query and self._wants_all(query):
            return self._all_pods().respond_now(method, path, query, header_items)
        memo, started = self.memo, REQUEST_CLOCK()  # started: the request-duration histogram's
        pods: PodList | None = None
        looked = False
        if memo is not None and method in _METHODS:
            answer = memo.answers.get(f"{path}?{query}" if query else path)
            if answer is not None:
                pods = self.cache.get_pods_nowait()
                looked = True
                replayable, authorization = _replayable(header_items)
                if pods is memo.pods and replayable and self._allowed(answer.route, authorization):
                    # get_pods_nowait hands out fresh snapshots only: never a stale answer
                    response = self._from_answer(memo, answer, _NO_HEADERS)
                    self.metrics.count(answer.route, response.status, started)
                    return response
        plan = self._begin(method, path, query, header_items, started)
        match plan:
            case Now():
                return plan.response
            case FromSnapshot(need=None):
                if not looked:
                    pods = self.cache.get_pods_nowait()
                if pods is not None:
                    view = self._view(pods)  # fresh: from get_pods_nowait
                    if not self._building_now(view):
                        return self._finish(plan, view, started)
        return self._answer_later(plan, method, path, started)

    async def respond(
        self, method: str, path: str, query: str, header_items: Iterable[tuple[str, str]]
    ) -> Response:
        """Answer one request. Never raises (but for cancellation): failures become JSON."""
        started = REQUEST_CLOCK()
        if query and self._wants_all(query):
            return await self._all_pods().respond(method, path, query, header_items)
        items = header_items if type(header_items) is list else list(header_items)
        plan = self._begin(method, path, query, items, started)
        if isinstance(plan, Now):
            return plan.response
        return await self._answer_later(plan, method, path, started)

    async def _answer_later(
        self, plan: FromSnapshot | Later, method: str, path: str, started: float
    ) -> Response:
        """The answer that waits: a ``Later`` plan's (``/pids/{pid}``, ``/readyz``, a watch), or
        a ``FromSnapshot``'s once a snapshot it may be answered from is there (after a
        refresh, or a read-your-writes wait). Never raises (but for cancellation)."""
        try:
            match plan:
                case Later():
                    response = await plan.run(plan.need)
                    self.metrics.count(plan.route, response.status, started)
                    return response
                case FromSnapshot():
                    view, stale = await self._snapshot(plan.need)
                    await self._ready(view)
                case _:
                    assert_never(plan)
        except HTTPError as error:
            return self._failed(plan.route, error, started)
        except Exception:
            log.exception("internal error answering %s %.200s", method[:16], path)
            return self._failed(plan.route, HTTPError(500, _INTERNAL), started)
        return self._finish(plan, view, started, stale=stale)

    def _begin(
        self,
        method: str,
        path: str,
        query: str,
        header_items: list[tuple[str, str]],
        started: float,
    ) -> Plan:
        """The checks, cheapest first, and the parameters: the handler's plan completed with
        the route, the freshness need and (``FromSnapshot``) the memo target and headers; an
        error is a ``Now``."""
        route = "unmatched"
        try:
            check_path(path)
            if len(query) > MAX_QUERY:
                raise HTTPError(414, f"query string is longer than {MAX_QUERY} characters")
            headers = collect_headers(header_items)
            if method not in _METHODS:
                route = self._route_label(path)
                raise HTTPError(
                    405,
                    f"method {method[:16]} is not allowed: the API is read-only (GET, HEAD)",
                    headers=_ALLOW,
                )
            route, handler, args = self._route(path)
            if not self._allowed(route, headers.get("authorization")):
                raise HTTPError(
                    401,
                    "a valid bearer token is required (Authorization: Bearer <token>)",
                    headers=_UNAUTHORIZED,
                )
            params = parse_query(query, _PARAMS.get(route, _NONE), _REPEATABLE) if query else {}
            if "all" in params:  # true went to the all view (_wants_all): 0 or false, or a 400
                parse_bool(params["all"][0], "all")
            plan = handler(params, headers, args)
            match plan:
                case Now():
                    self.metrics.count(route, plan.response.status, started)
                    return plan
                case Later():
                    return Later(plan.run, route, self._need(params, headers))
                case FromSnapshot():
                    kept = not ("fresh" in params or "newer_than" in params)
                    target = (f"{path}?{query}" if query else path) if kept else None
                    need = self._need(params, headers)
                    return FromSnapshot(plan.build, route, target, need, headers)
                case _:
                    assert_never(plan)
        except HTTPError as error:
            return Now(self._failed(route, error, started))
        except Exception:
            log.exception("internal error answering %s %.200s", method[:16], path)
            return Now(self._failed(route, HTTPError(500, _INTERNAL), started))

    def _finish(
        self, plan: FromSnapshot, view: SnapshotView, started: float, *, stale: bool = False
    ) -> Response:
        """The answer to ``plan`` from ``view``, kept in the memo when it may be replayed;
        ``stale``: the view was past its period when the request arrived (see ``_snapshot``)."""
        try:
            target = plan.target
            answer = None
            kept = target is not None and view is self.memo
            if kept:
                answer = view.answers.get(cast(str, target))
            if answer is None:
                answer = plan.build(view)._replace(route=plan.route)
                if kept and answer.kept:
                    view.remember(cast(str, target), answer)
            response = self._from_answer(view, answer, plan.headers, stale=stale)
        except HTTPError as error:
            return self._failed(plan.route, error, started)
        except Exception:
            log.exception("internal error answering %.200s", plan.target or plan.route)
            return self._failed(plan.route, HTTPError(500, _INTERNAL), started)
        self.metrics.count(plan.route, response.status, started)
        return response

    def _allowed(self, route: str, authorization: str | None) -> bool:
        """The token check: passes without a token configured, and for /healthz."""
        auth = self._auth
        return auth is None or route == "/healthz" or auth.check(authorization)

    def _failed(self, route: str, error: HTTPError, started: float) -> Response:
        response = self._error(error)
        self.metrics.count(route, response.status, started)
        return response

    # -- the all view (?all=1) -----------------------------------------------------------------
    def _wants_all(self, query: str) -> bool:
        """Whether ``query`` sets ``all`` to a true value (``BOOLEANS``): then the all view
        answers the whole request. Anything else stays here, where ``parse_query`` and
        ``parse_bool`` check it (a repeated or malformed ``all`` is a 400 either way)."""
        if self._make_all_view is None or "all" not in query or len(query) > MAX_QUERY:
            return False
        for piece in query.split("&"):
            name, _, value = piece.partition("=")
            if unquote_plus(name) == "all":
                return BOOLEANS.get(unquote_plus(value)) is True
        return False

    def all_view(self) -> App:
        """The all view (``?all=1``), built now if it was not yet: the CRI socket's cache."""
        return self._all_pods()

    def _all_pods(self) -> App:
        """The all view, built on first use; it counts requests, refreshes and watch streams
        into this App's metrics (one ``/metrics``)."""
        view = self._all_view
        if view is None:
            assert self._make_all_view is not None
            view = self._all_view = self._make_all_view()
            view.metrics = self.metrics
            view.calls.on_call = self.metrics.observe_refresh
            view.calls.on_pod_call = self.metrics.observe_pod_relist
            view.streams.counters = self.streams.counters
            if self._keeper is not None:
                view.keep_fresh()
        return view

    def _route_label(self, path: str) -> str:
        """The route ``path`` is counted under (its template, or ``unmatched``)."""
        try:
            return self._route(path)[0]
        except HTTPError:
            return "unmatched"

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
        elif path.startswith("/ips/"):
            return "/ips/{ip}", self._ip, (path[5:],)
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
    def _need(self, query: Query, headers: dict[str, str]) -> float | None:
        """The unix time the snapshot must have been read at or after, if the request says."""
        need: float | None = None
        values = query.get("newer_than")
        if values:
            need = parse_newer_than(values[0], "newer_than")
        header = headers.get(_FRESHNESS_HEADER)
        if header is not None:
            stated = parse_newer_than(header, "X-Podcache-Newer-Than")
            need = stated if need is None else max(need, stated)
        values = query.get("fresh")
        if values and parse_bool(values[0], "fresh"):
            now_wall = self._wall()
            need = now_wall if need is None else max(need, now_wall)
        return need

    async def _snapshot(self, need: float | None) -> tuple[SnapshotView, bool]:
        """The snapshot a request may be answered from, after any read-your-writes wait, and
        whether it is stale for this request (``_stale_for``).

        Staleness belongs to the request, never to the app: other requests are answered while
        this one awaits, from other snapshots."""
        arrival = self._clock()
        cache = self.cache
        try:
            if need is not None:
                now = self._clock()
                # Wall time onto the cache's clock, as of now; a future time counts as now.
                target = min(need - (self._wall() - now), now)
                await cache.force_update_if_older(target, timeout=self._wait)
            pods = await cache.get_pods(timeout=self._wait)
        except (PodcacheError, TimeoutError) as exc:  # what the cache raises (§3 rules 3, 8)
            raise failure_of(type(exc)).http_error(exc, wait=self._wait) from exc
        view = self._view(pods)
        return view, self._stale_for(view, arrival)

    def _stale_for(self, view: SnapshotView, arrival: float) -> bool:
        """Whether ``view`` was older than the period when a request arrived at ``arrival``
        (the cache clock): only ``max_stale`` serves that, standing in for a failed runtime."""
        return arrival - view.monotonic > self.cache.cache_period

    def _published(self, publication: Publication) -> None:
        """The cache's publish hook (on the loop, before anyone is handed the snapshot): the
        view of the new snapshot becomes the memo. Making it reads no pod. Its build runs in a
        worker thread when its pods may be many new objects (``_many_new_pods``), or when the
        previous view's build still runs there (the new view's pods are then mostly not
        encoded yet: it waits for that build and reuses its pods' JSON); requests that need
        it meanwhile wait for that build (``_ready``). So no build of a node's pods runs on
        the loop, however quickly small publishes follow a big one."""
        now = self._clock()
        timestamp = publication.timestamp
        previous = self.memo
        view = SnapshotView(
            publication.pods, timestamp, timestamp + (self._wall() - now), previous=previous
        )
        if previous is not None:
            previous.retire()  # its body and answers go; its pods' JSON lives on in ``view``
        self.memo = view
        self._recent.append(view)
        pending = None if previous is None else self._builds.get(previous)
        if pending is not None or _many_new_pods(publication):
            building = asyncio.ensure_future(_build_after(pending, previous, view))
            self._builds[view] = building
            building.add_done_callback(lambda _: self._builds.pop(view, None))

    async def _ready(self, view: SnapshotView) -> None:
        """Wait for ``view``'s build in a worker thread, when one runs."""
        building = self._builds.get(view)
        if building is not None:
            await asyncio.shield(building)

    def _building_now(self, view: SnapshotView) -> bool:
        """Whether ``view`` is being built in a worker thread (answers from it then wait)."""
        return view in self._builds

    def _view(self, pods: PodList) -> SnapshotView:
        """The view of ``pods``, or of a newer snapshot: the memo when it holds them, else the
        view of one of the last publications that does (a request that got its pods before
        newer ones were published answers from its own: its staleness is its own), else the
        memo (newer pods); a view of ``pods`` alone before any publish."""
        memo = self.memo
        if memo is not None:
            if memo.pods is pods:
                return memo
            for view in self._recent:
                if view.pods is pods:
                    return view
            return memo
        now = self._clock()
        fetched = self.cache.cache_time
        fetched = now if fetched is None else fetched
        return SnapshotView(pods, fetched, fetched + (self._wall() - now))

    def _from_answer(
        self, view: SnapshotView, answer: Answer, headers: dict[str, str], *, stale: bool = False
    ) -> Response:
        """``answer`` completed with the snapshot's age, and ``X-Podcache-Stale`` when it is
        ``stale`` for the request; 304 when If-None-Match names it."""
        age = f"{max(self._clock() - view.monotonic, 0.0):.3f}"
        # Read at answer time: the cache numbers a snapshot as it publishes it, after its view
        # was prepared.
        revision = str(view.pods.revision)
        if answer.status != 200 or not answer.etag:
            response_headers = [
                ("content-type", JSON),
                ("x-podcache-age", age),
                ("x-podcache-revision", revision),
            ]
        else:
            response_headers = [
                ("content-type", JSON),
                ("etag", view.etag),
                ("x-podcache-age", age),
                ("x-podcache-revision", revision),
                ("cache-control", "no-cache"),
            ]
            match = headers.get("if-none-match")
            if match is not None and etag_matches(match, view.etag):
                return Response(
                    304, [*response_headers[1:], _STALE] if stale else response_headers[1:]
                )
        if stale:
            response_headers.append(_STALE)
        # A list says its revision (a watch goes on from it: since=).
        suffix = f'{age},"revision":{revision}}}' if answer.route == "/pods" else f"{age}}}"
        return Response(answer.status, response_headers, answer.head, suffix=suffix.encode())

    def _age_header(self) -> str | None:
        cache_time = self.cache.cache_time
        if cache_time is None:
            return None
        return f"{max(self._clock() - cache_time, 0.0):.3f}"

    def _stats(self) -> podcache.CacheStats:
        return self.cache.stats()

    def _latest(self) -> PodList | None:
        memo = self.memo
        return None if memo is None else memo.pods

    # -- handlers: an answer now, or how to build one from a snapshot -----------------------
    def _pods(self, query: Query, headers: dict[str, str], args: tuple[str, ...]) -> Plan:
        namespaces = query.get("namespace")
        namespace = check_name(namespaces[0], "namespace") if namespaces else None
        labels = query.get("label", ())
        if len(labels) > MAX_LABELS:
            raise HTTPError(400, f"more than {MAX_LABELS} label selectors")
        selectors = [LabelSelector.parse(text) for text in labels]
        watching = query.get("watch")
        if watching and parse_bool(watching[0], "watch"):
            request = _watch_request(query, namespace, tuple(selectors))
            return Later(lambda need: self.streams.open(request))
        _since(query)  # checked, and without watch=1 ignored
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

    def _pod(self, query: Query, headers: dict[str, str], args: tuple[str, ...]) -> Plan:
        uid = check_name(args[0], "pod UID")
        who = who_of(query)
        if who is not None:
            return Later(lambda need: self._answer_who(need, headers, who, ("uid", uid)))

        def build(view: SnapshotView) -> Answer:
            pod = view.pods.by_uid(uid)
            if pod is None:
                return self._missing(view, f"no pod with UID {uid!r}", ("uid", uid))
            return _found(view.pod_head(pod))

        return FromSnapshot(build)

    def _ip(self, query: Query, headers: dict[str, str], args: tuple[str, ...]) -> Plan:
        ip = parse_ip(unquote(args[0]))
        who = who_of(query)
        if who is not None:
            return Later(lambda need: self._answer_who(need, headers, who, ("ip", ip)))

        def build(view: SnapshotView) -> Answer:
            found = self._find(view.pods, ("ip", ip))
            if found is None or found.held_until is not None:  # released: not held now
                return self._missing(view, f"no pod holds IP {ip}", ("ip", ip))
            return _found(view.document_head({"ip": ip, "pod": pod_to_json(found.pod)}))

        return FromSnapshot(build)

    def _find(self, pods: PodList, key: tuple[str, str], at: float | None = None) -> Found | None:
        """``cache.find_in`` by one key, ``(kind, value)``: ``ip``, ``uid`` or ``container_id``."""
        kind, value = key
        if kind == "ip":
            return self.cache.find_in(pods, ip=value, at=at)
        if kind == "uid":
            return self.cache.find_in(pods, uid=value, at=at)
        return self.cache.find_in(pods, container_id=value, at=at)

    def _missing(self, view: SnapshotView, message: str, key: tuple[str, str]) -> Answer:
        """A 404 from ``view``; when a pod held the key until lately, the body says when it
        stopped (``held_until``) and, when the pod left, when (``departed_at``): the client
        may ask again with ``departed=1``. The memo does not keep it (the released keys age
        out without a new snapshot)."""
        try:
            found = self._find(view.pods, key)
        except (ValueError, LookupError):  # a prefix several released IDs share: plain 404
            found = None
        if found is None or found.held_until is None:
            return _not_found(view, message)
        extra = {"held_until": rfc3339(found.held_until)}
        said = "a pod that left held it"
        if found.departed_at is None:
            said = "a pod that is still listed held it"
        else:
            extra["departed_at"] = rfc3339(found.departed_at)
        head = view.not_found_head(404, f"{message}; {said}", **extra)
        return Answer("", 404, head, etag=False, kept=False)

    async def _answer_who(
        self, need: float | None, headers: dict[str, str], who: Who, key: tuple[str, str]
    ) -> Response:
        """A lookup that may answer a pod that left (``departed=1``) or the pod that held the
        key at ``at`` (never kept in the memo: the answer depends on the time and the departed,
        not on the snapshot alone). 200 with ``departed_at`` and ``X-Podcache-Departed: true``
        for a pod that left; 404 when nobody held it."""
        arrival = self._clock()
        view, _ = await self._snapshot(need)
        try:
            found = self._find(view.pods, key, who.at)
        except ValueError as exc:  # a malformed type://id, or a prefix under 4 characters
            raise HTTPError(400, str(exc)) from None
        except AmbiguousContainerIDError as exc:  # a prefix of several IDs, listed or released
            raise HTTPError(409, str(exc), extra={"matches": list(exc.matches)}) from None
        route = WHO_ROUTES[key[0]]
        if found is None:
            what = "" if who.at is None else f" at {rfc3339(who.at)}"
            message = f"nothing known held {key[1]!r}{what}"
            answer = Answer(route, 404, view.not_found_head(404, message), etag=False)
            return self._from_answer(view, answer, headers)
        document = who_document(found, key)
        answer = Answer(route, 200, view.document_head(document), etag=False)
        response = self._from_answer(view, answer, headers, stale=self._stale_for(view, arrival))
        if found.held_until is not None:
            response.headers.append(DEPARTED)
        return response

    def _pod_by_name(self, query: Query, headers: dict[str, str], args: tuple[str, ...]) -> Plan:
        namespace = check_name(args[0], "namespace", underscore=False)
        name = check_name(args[1], "pod name", underscore=False)

        def build(view: SnapshotView) -> Answer:
            pod = view.pods.by_full_name(f"{name}_{namespace}")
            if pod is None:
                return _not_found(view, f"no pod {name!r} in namespace {namespace!r}")
            return _found(view.pod_head(pod))

        return FromSnapshot(build)

    def _container(self, query: Query, headers: dict[str, str], args: tuple[str, ...]) -> Plan:
        ident = check_name(args[0], "container ID")
        who = who_of(query)
        if who is not None:
            key = ("container_id", ident)
            return Later(lambda need: self._answer_who(need, headers, who, key))

        def build(view: SnapshotView) -> Answer:
            try:
                found = view.pods.by_container_id(ident)
            except ValueError as exc:  # a malformed type://id, or a prefix under 4 characters
                raise HTTPError(400, str(exc)) from None
            except LookupError as exc:  # an ambiguous prefix
                raise HTTPError(409, str(exc)) from None
            if found is None:
                message = f"no container or sandbox with ID {ident!r}"
                return self._missing(view, message, ("container_id", ident))
            return _found(view.container_head(*found))

        return FromSnapshot(build)

    def _pid(self, query: Query, headers: dict[str, str], args: tuple[str, ...]) -> Plan:
        pid = parse_pid(args[0])
        return Later(lambda need: self._answer_pid(pid, need, headers))

    async def _answer_pid(self, pid: int, need: float | None, headers: dict[str, str]) -> Response:
        """The pod and container of process ``pid``; never kept in the memo (the same PID
        names another process later)."""
        arrival = self._clock()
        await self._snapshot(need)  # read-your-writes first, as on every route
        result = await self._lookup_pid(pid)
        pods = result.pods
        reason = {"reason": PID_MISS_REASONS.get(result.outcome, "")}
        if pods is None:  # the process's cgroup names nothing: the runtime was not asked
            raise HTTPError(404, f"process {pid} {_PID_MISSES[result.outcome]}", extra=reason)
        view = self._view(pods)
        found = result.process
        if found is None:
            message = f"process {pid} {_PID_MISSES[result.outcome]}"
            answer = Answer("", 404, view.not_found_head(404, message, **reason), etag=False)
        else:
            head = view.process_head(pid, found.pod, found.container)
            answer = Answer("/pids/{pid}", 200, head, etag=False)
        return self._from_answer(view, answer, headers, stale=self._stale_for(view, arrival))

    async def _lookup_pid(self, pid: int) -> LookupResult:
        """``pod_of_pid`` with its outcome counted; failures as HTTP errors."""
        try:
            result = await alookup_pod(
                self.cache,
                self._clock,
                pid,
                proc_root=self._proc_root,
                timeout=self._wait,
                probe=self._probe,
                unknown=self._unknown,
            )
        except (PodcacheError, OSError) as exc:  # the cache's, and /proc's (TimeoutError too)
            failure = failure_of(type(exc))
            self.metrics.count_pid_lookup(failure.miss or "error", False)
            raise failure.http_error(
                exc, subject=f"process {pid}", proc_root=self._proc_root
            ) from exc
        self.metrics.count_pid_lookup(result.outcome, result.refreshed, result.probed)
        return result

    def _healthz(self, query: Query, headers: dict[str, str], args: tuple[str, ...]) -> Plan:
        response = Response(200, [("content-type", JSON)], _HEALTHY)
        age = self._age_header()
        if age is not None:
            response.headers.append(("x-podcache-age", age))
        return Now(response)

    def _readyz(self, query: Query, headers: dict[str, str], args: tuple[str, ...]) -> Plan:
        return Later(lambda need: self._answer_ready(need, headers))

    async def _answer_ready(self, need: float | None, headers: dict[str, str]) -> Response:
        """Ready with a snapshot within its period; never kept in the memo (the answer depends
        on the request's staleness, not on the snapshot alone)."""
        view, stale = await self._snapshot(need)
        if stale:
            error = self.calls.last_error
            raise HTTPError(
                503,
                "not ready: serving a stale snapshot, the last runtime call failed"
                + ("" if error is None else f" ({error})"),
                headers=[RETRY, _STALE],
            )
        return self._from_answer(
            view, Answer("/readyz", 200, view.ready_head(), etag=False), headers
        )

    def _metrics(self, query: Query, headers: dict[str, str], args: tuple[str, ...]) -> Plan:
        headers_out = [("content-type", METRICS_CONTENT_TYPE)]
        age = self._age_header()
        if age is not None:
            headers_out.append(("x-podcache-age", age))
        return Now(Response(200, headers_out, self.metrics.render()))

    def _openapi_doc(self, query: Query, headers: dict[str, str], args: tuple[str, ...]) -> Plan:
        response_headers = [("content-type", JSON), ("etag", self._openapi_etag)]
        match = headers.get("if-none-match")
        if match is not None and etag_matches(match, self._openapi_etag):
            return Now(Response(304, response_headers[1:]))
        return Now(Response(200, response_headers, self._openapi))

    # -- lifecycle -------------------------------------------------------------------------
    async def warm(self) -> BaseException | None:
        """Fill the cache once (at startup), then keep it within its period while nobody
        reads (``keep_fresh``); returns the fill's error instead of raising it."""
        error: BaseException | None = None
        try:
            await self.cache.get_pods(timeout=self._wait)
        except Exception as exc:
            error = exc
        self.keep_fresh()
        return error

    def keep_fresh(self) -> None:
        """Start the keeper (``serve/keeper.py``), unless it runs or the period is 0 (every
        answer is fetched for its request: there is no period to keep within)."""
        period = self.cache.cache_period
        if self._keeper is not None or period == 0:
            return
        fresh_for = max(period - self._refresh_ahead, 0.0)
        self._keeper = asyncio.get_running_loop().create_task(
            keep_fresh(self.cache, fresh_for, self._wait, self._clock), name="podcache-keeper"
        )

    async def aclose(self) -> None:
        """Stop the keeper, end the event subscription, wait for refreshes still running (the
        all view's too)."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        await self.cache.close()
        if self._all_view is not None:
            await self._all_view.aclose()


def _watch_request(
    query: Query, namespace: str | None, selectors: tuple[LabelSelector, ...]
) -> WatchRequest:
    """A watch's parameters checked: ``since`` a revision (an integer >= 0), no freshness."""
    if _FRESHNESS & query.keys():
        raise HTTPError(400, "a watch takes since, namespace and label, not fresh or newer_than")
    return WatchRequest("/pods", _since(query), namespace, selectors)


def _since(query: Query) -> int | None:
    """The ``since`` parameter: a revision, an integer from 0 to 2**63 - 1; else a 400."""
    values = query.get("since")
    if not values:
        return None
    text = values[0]
    if not (text.isascii() and text.isdigit()) or int(text) >= 2**63:
        raise HTTPError(400, f"since must be a revision (an integer >= 0), got {text[:32]!r}")
    return int(text)


def _openapi(auth: bool) -> tuple[bytes, str]:
    """The OpenAPI document as served, and its ETag."""
    body = msgspec.json.encode(document(auth=auth, version=podcache.__version__))
    return body, f'"{hashlib.blake2b(body, digest_size=12).hexdigest()}"'


def _found(head: bytes) -> Answer:
    return Answer("", 200, head, etag=True)


def _not_found(view: SnapshotView, message: str) -> Answer:
    return Answer("", 404, view.not_found_head(404, message), etag=False)


def _many_new_pods(publication: Publication) -> bool:
    """Whether a publication's pods may hold more than ``BUILD_OFF_LOOP`` objects no view
    encoded: a publish that changed that many, or a full listing of more pods than that (a
    listing may hand over new objects with the same content, which no change reports: the
    cold start's second listing, the pods' addresses filled in, made 4,608 new objects at
    5,000 pods, 50 ms of encoding on the loop). A relist of one pod carries every other pod's
    object over."""
    if len(publication.changes) > BUILD_OFF_LOOP:
        return True
    return publication.relisted is None and len(publication.pods) > BUILD_OFF_LOOP


def _build(view: SnapshotView) -> None:
    view.build(body=True)


async def _build_after(
    pending: asyncio.Future[None] | None, previous: SnapshotView | None, view: SnapshotView
) -> None:
    """Build ``view`` in a worker thread, after ``pending`` (the previous view's build) ended:
    then it takes the pods' JSON that build made."""
    if pending is not None and previous is not None:
        await asyncio.wait([pending])  # its failure is its own requests' to see
        view.inherit(previous)
    await asyncio.to_thread(_build, view)


def _pairs(pod: Pod) -> tuple[tuple[str, str], ...]:
    """A pod's labels in their stored form: ``(key, value)`` pairs sorted by key."""
    return cast(tuple[tuple[str, str], ...], pod.labels)
