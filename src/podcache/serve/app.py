"""The HTTP application: a request's way from its parts to a ``Response``
(docs/architecture.md §5, item 3); no framework, no HTTP parsing, sockets or signals, and none
of the parts it joins. ``_begin`` runs the checks and completes the handler's ``plan.Plan``;
``respond_now`` / ``respond`` carry it out. The replay rule is written at ``respond_now``."""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, assert_never, cast
from urllib.parse import unquote_plus

import msgspec

import podcache
from podcache.cache import AsyncPodGetter, AsyncRuntimeCache
from podcache.cache.shared import offers_events
from podcache.model import PodList
from podcache.serve.allview import all_pods_getter
from podcache.serve.auth import AuthGate, BearerAuth
from podcache.serve.calltimer import CallTimer, timed
from podcache.serve.handlers import Handlers
from podcache.serve.keeper import Keeper
from podcache.serve.lookups import Lookups
from podcache.serve.metrics import REQUEST_CLOCK, Metrics
from podcache.serve.openapi import document
from podcache.serve.params import ALL
from podcache.serve.plan import FromSnapshot, Later, Now, Plan
from podcache.serve.query import (
    BOOLEANS,
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    MAX_QUERY,
    Query,
    check_path,
    collect_headers,
    parse_query,
)
from podcache.serve.reading import FRESHNESS_HEADER, Reader
from podcache.serve.response import HTTPError, Response
from podcache.serve.router import UNMATCHED, Router
from podcache.serve.routes import ROUTES
from podcache.serve.snapshot import SnapshotView
from podcache.serve.views import Views
from podcache.serve.watchstream import BOOKMARK_INTERVAL, WatchCounters, WatchStreams

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

ALL_REVISIONS_FROM = 2**52
"""Where the ``?all=1`` view numbers its revisions from, plus ms since the epoch at its start
(docs/architecture.md §8 rule 8)."""

_METHODS = frozenset({"GET", "HEAD"})
_ALLOW = [("allow", "GET, HEAD")]
_INTERNAL = "internal server error (logged by the server)"
_OPEN_ROUTES = frozenset(route.template for route in ROUTES if route.open)
_NO_HEADERS: dict[str, str] = {}


def _replayable(header_items: list[tuple[str, str]], route: str, gate: AuthGate) -> bool:
    """Whether a request with these headers to ``route`` may be answered from the memo: rules
    3 and 4 in ``App.respond_now`` (the headers allow it, and ``gate`` lets it through)."""
    size = 0
    authorization = None
    for name, value in header_items:
        lower = name.lower()
        if lower == "authorization":
            if authorization is not None:
                return False  # repeated: the full path answers 400
            authorization = value
        elif lower in ("if-none-match", FRESHNESS_HEADER):
            return False
        size += len(name) + len(value)
    if len(header_items) > MAX_HEADERS or size > MAX_HEADER_BYTES:
        return False  # the full path answers 431
    return gate.allowed(route, authorization)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Options:
    """``App``'s options as given (its all view is made with the same ones)."""

    auth: BearerAuth | None
    wait: float
    clock: Callable[[], float]
    wall: Callable[[], float]
    min_refresh_interval: float
    max_stale: float | None
    refresh_ahead: float | None
    proc_root: str
    events: bool
    bookmark_interval: float
    first_revision: int | None

    def ahead(self, cache_period: float | timedelta) -> float:
        """Seconds before expiry a read starts the next refresh: a quarter of the period
        unless given."""
        if self.refresh_ahead is not None:
            return self.refresh_ahead
        return (
            cache_period.total_seconds() if isinstance(cache_period, timedelta) else cache_period
        ) / 4

    def cache(
        self,
        calls: CallTimer,
        getter: AsyncPodGetter,
        cache_period: float | timedelta,
        *,
        all_pods: bool,
    ) -> AsyncRuntimeCache:
        """An App's cache over its call timer: stats on, events when asked and ``getter``
        offers them, departures stamped on the wall clock, revisions numbered as
        docs/architecture.md §8 rule 8 says unless ``first_revision`` is given."""
        first = int(self.wall() * 1000) if self.first_revision is None else self.first_revision
        return AsyncRuntimeCache(
            calls,
            cache_period,
            clock=self.clock,
            stats=True,
            min_refresh_interval=self.min_refresh_interval,
            max_stale=self.max_stale,
            refresh_ahead=self.ahead(cache_period),
            events=self.events and offers_events(getter),
            first_revision=first + (ALL_REVISIONS_FROM if all_pods else 0),
            wall_clock=self.wall,
        )


class App:
    """``podcache serve``'s API over ``getter``, cached for ``cache_period``.

    ``auth``: require ``Authorization: Bearer`` on every route but the open ones (/healthz).
    ``wait``: how long a request waits for the cache. ``clock`` is the cache's (monotonic)
    clock and ``wall`` the unix clock; ``newer_than`` times are mapped from one to the other
    per request. ``min_refresh_interval``, ``max_stale`` and ``refresh_ahead`` are the cache's
    (seconds; ``refresh_ahead`` None is a quarter of the period; stale answers:
    docs/architecture.md §5, item 4).
    ``proc_root``: where ``/pids/{pid}`` reads processes (the host's ``/proc``).

    ``?all=1`` is answered by a second App, the all view (docs/architecture.md §5), built on
    the first such request (``_all_pods``). ``all_pods`` makes an App that view (it has none
    of its own); ``metrics``: the metrics to count into (None: its own).
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
        bookmark_interval: float = BOOKMARK_INTERVAL,
        first_revision: int | None = None,
        all_pods: bool = False,
        metrics: Metrics | None = None,
    ) -> None:
        options = _Options(
            auth=auth,
            wait=wait,
            clock=clock,
            wall=wall,
            min_refresh_interval=min_refresh_interval,
            max_stale=max_stale,
            refresh_ahead=refresh_ahead,
            proc_root=proc_root,
            events=events,
            bookmark_interval=bookmark_interval,
            first_revision=first_revision,
        )
        self._setup(getter, cache_period, options, all_pods=all_pods, metrics=metrics)

    def _setup(
        self,
        getter: AsyncPodGetter,
        cache_period: float | timedelta,
        options: _Options,
        *,
        all_pods: bool,
        metrics: Metrics | None,
    ) -> None:
        """Make the App's parts; the all view (``_all_pods``) is made the same way."""
        self.metrics = (
            Metrics(self._stats, self._latest, options.wall) if metrics is None else metrics
        )
        self.calls: CallTimer = timed(getter, clock=options.clock, **self.metrics.call_observers())
        self.cache = options.cache(self.calls, getter, cache_period, all_pods=all_pods)
        self.views = Views(self.cache, options.clock, options.wall)
        # The one way a snapshot reaches serve: its view, the metrics' pods, the broadcast.
        self.cache.on_publish(self.views.published)
        self.streams = WatchStreams(
            self.cache, bookmark_interval=options.bookmark_interval, wait=options.wait
        )
        if metrics is None:
            self.metrics.watchers = self.streams.counters
        else:  # the all view's streams count as its parent's
            self.streams.counters = cast(WatchCounters, metrics.watchers)
        self.reader = Reader(
            self.cache, self.views, clock=options.clock, wall=options.wall, wait=options.wait
        )
        self.lookups = Lookups(self.reader, getter, self.metrics, options.proc_root)
        self.handlers = Handlers(
            self.reader,
            self.lookups,
            self.streams,
            self.calls,
            self.metrics,
            openapi=_openapi(options.auth is not None),
        )
        self.router = Router()
        self.gate = AuthGate(options.auth, _OPEN_ROUTES)
        self.keeper = Keeper(self.cache, options.ahead(cache_period), options.wait, options.clock)
        self._all_view: App | None = None
        """The App that answers ``?all=1``, once built (never in an all view itself)."""
        self._make_all_view: Callable[[], App] | None = None
        if not all_pods:
            self._make_all_view = functools.partial(
                self._view_of_all, all_pods_getter(getter), cache_period, options
            )

    def _view_of_all(
        self, getter: AsyncPodGetter, cache_period: float | timedelta, options: _Options
    ) -> App:
        """A new all view: ``options`` over ``getter``, counting into this App's metrics."""
        view = App.__new__(App)
        view._setup(getter, cache_period, options, all_pods=True, metrics=self.metrics)
        return view

    @property
    def memo(self) -> SnapshotView | None:
        """The response memo (``Views.memo``): the newest snapshot's view and its answers."""
        return self.views.memo

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

        THE REPLAY RULE (docs/architecture.md §5, the response memo). A request is answered
        from the memo, skipping routing, parameter parsing and lookups, exactly when all hold:

        1. it is a GET or HEAD whose target (path, and ``?query`` as sent) is a key of the
           memo's answers (``_finish`` keeps only answers that passed every check of the full
           path, and none to freshness targets, /readyz or ``/pids/{pid}``);
        2. the cache hands out that very snapshot now, without waiting (so the answer is
           what the full path would compute, to the byte but for the age);
        3. no header could change the answer or make it an error on the full path
           (``_replayable``);
        4. the token check passes (``AuthGate``, in ``_replayable``); the Host check is the
           HTTP server's, before any request reaches the app.

        Anything else takes the full path (``_begin``, then ``_finish``), which answers at
        once too when the snapshot is fresh and the request asks for nothing newer. A request
        with ``all`` true goes to the all view, whole (``_wants_all``).
        """
        if query and self._wants_all(query):
            return self._all_pods().respond_now(method, path, query, header_items)
        memo, started = self.views.memo, REQUEST_CLOCK()  # started: the duration histogram's
        pods: PodList | None = None
        looked = False  # get_pods_nowait asked (a snapshot handed out counts one hit)
        if memo is not None and method in _METHODS:
            answer = memo.answers.get(f"{path}?{query}" if query else path)
            if answer is not None:
                pods, looked = self.cache.get_pods_nowait(), True  # fresh ones only
                if pods is memo.pods and _replayable(header_items, answer.route, self.gate):
                    response = self.reader.from_answer(memo, answer, _NO_HEADERS)
                    self.metrics.count(answer.route, response.status, started)
                    return response
        plan = self._begin(method, path, query, header_items, started)
        if isinstance(plan, Now):
            return plan.response
        return self._carry_out(plan, method, path, started, pods, looked=looked)

    def _carry_out(
        self,
        plan: FromSnapshot | Later,
        method: str,
        path: str,
        started: float,
        pods: PodList | None,
        *,
        looked: bool,
    ) -> Response | Coroutine[Any, Any, Response]:
        """``plan`` answered now when it can be (``pods``: what ``get_pods_nowait`` handed
        out, when ``looked``), else the coroutine that answers it."""
        if isinstance(plan, FromSnapshot) and plan.need is None:
            if not looked:
                pods = self.cache.get_pods_nowait()
            if pods is not None:
                view = self.views.view_of(pods)  # fresh: from get_pods_nowait
                if not self.views.building_now(view):
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
                    view, stale = await self.reader.snapshot(plan.need)
                    await self.views.ready(view)
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
        route = UNMATCHED
        try:
            check_path(path)
            if len(query) > MAX_QUERY:
                raise HTTPError(414, f"query string is longer than {MAX_QUERY} characters")
            headers = collect_headers(header_items)
            if method not in _METHODS:
                route = self.router.label(path)
                raise HTTPError(
                    405,
                    f"method {method[:16]} is not allowed: the API is read-only (GET, HEAD)",
                    headers=_ALLOW,
                )
            matched, raw = self.router.find(path)
            route = matched.template
            self.gate.check(route, headers.get("authorization"))
            params = parse_query(query, matched.allowed, matched.repeatable) if query else {}
            if "all" in params:  # true went to the all view (_wants_all): 0 or false, or a 400
                ALL.parse(params["all"][0])
            args = matched.args(raw) if raw else ()
            plan = matched.route.handler(self.handlers, params, headers, args)
            target = f"{path}?{query}" if query else path
            return self._completed(plan, route, target, params, headers, started=started)
        except HTTPError as error:
            return Now(self._failed(route, error, started))
        except Exception:
            log.exception("internal error answering %s %.200s", method[:16], path)
            return Now(self._failed(route, HTTPError(500, _INTERNAL), started))

    def _completed(
        self,
        plan: Plan,
        route: str,
        target: str,
        params: Query,
        headers: dict[str, str],
        *,
        started: float,
    ) -> Plan:
        """The handler's ``plan`` with what the checks found: the route, the freshness need,
        and for ``FromSnapshot`` the memo's key (``target``, dropped when the request asks
        for freshness) and the headers; a ``Now`` is counted."""
        match plan:
            case Now():
                self.metrics.count(route, plan.response.status, started)
                return plan
            case Later():
                return Later(plan.run, route, self.reader.need(params, headers))
            case FromSnapshot():
                kept = not ("fresh" in params or "newer_than" in params)
                need = self.reader.need(params, headers)
                return FromSnapshot(plan.build, route, target if kept else None, need, headers)
            case _:
                assert_never(plan)

    def _finish(
        self, plan: FromSnapshot, view: SnapshotView, started: float, *, stale: bool = False
    ) -> Response:
        """The answer to ``plan`` from ``view``, kept in the memo when it may be replayed;
        ``stale``: the view was past its period when the request arrived (``Reader``)."""
        try:
            target = plan.target
            answer = None
            kept = target is not None and view is self.views.memo
            if kept:
                answer = view.answers.get(cast(str, target))
            if answer is None:
                answer = plan.build(view)._replace(route=plan.route)
                if kept and answer.kept:
                    view.remember(cast(str, target), answer)
            response = self.reader.from_answer(view, answer, plan.headers, stale=stale)
        except HTTPError as error:
            return self._failed(plan.route, error, started)
        except Exception:
            log.exception("internal error answering %.200s", plan.target or plan.route)
            return self._failed(plan.route, HTTPError(500, _INTERNAL), started)
        self.metrics.count(plan.route, response.status, started)
        return response

    def _failed(self, route: str, error: HTTPError, started: float) -> Response:
        response = self.reader.error(error)
        self.metrics.count(route, response.status, started)
        return response

    # -- the all view (?all=1) -----------------------------------------------------------------
    def _wants_all(self, query: str) -> bool:
        """Whether ``query`` sets ``all`` to a true value (``BOOLEANS``): then the all view
        answers the whole request. Anything else stays here, where the router's query check
        reads it (a repeated or malformed ``all`` is a 400 either way)."""
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
        """The all view, built on first use (counting into this App's metrics: one
        ``/metrics``), kept fresh once this App is."""
        view = self._all_view
        if view is None:
            assert self._make_all_view is not None
            view = self._all_view = self._make_all_view()
            if self.keeper.running:
                view.keep_fresh()
        return view

    # -- lifecycle -------------------------------------------------------------------------
    async def warm(self) -> BaseException | None:
        """Fill the cache once (at startup), then keep it within its period while nobody
        reads (``keep_fresh``); returns the fill's error instead of raising it."""
        error: BaseException | None = None
        try:
            await self.cache.get_pods(timeout=self.reader.wait)
        except Exception as exc:
            error = exc
        self.keep_fresh()
        return error

    def keep_fresh(self) -> None:
        """Start the keeper (``serve/keeper.py``), unless it runs or the period is 0 (every
        answer is fetched for its request: there is no period to keep within)."""
        self.keeper.start()

    async def aclose(self) -> None:
        """Stop the keeper, end the event subscription, wait for refreshes still running (the
        all view's too)."""
        await self.keeper.stop()
        await self.cache.close()
        if self._all_view is not None:
            await self._all_view.aclose()

    def _stats(self) -> podcache.CacheStats:
        return self.cache.stats()

    def _latest(self) -> PodList | None:
        return self.views.latest()


def _openapi(auth: bool) -> tuple[bytes, str]:
    """The OpenAPI document as served, and its ETag."""
    body = msgspec.json.encode(document(auth=auth, version=podcache.__version__))
    return body, f'"{hashlib.blake2b(body, digest_size=12).hexdigest()}"'
