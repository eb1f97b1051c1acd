"""Prometheus metrics: cache, refreshes, snapshot size, requests; no global registry, no HTTP
(docs/architecture.md §5, what lives between requests).

Everything but the request counts is read when ``/metrics`` is scraped (from ``cache.stats()``
and the latest snapshot). Each ``Metrics`` has its own registry: several servers or tests in
one process do not collide. The histograms here (``_Histogram``) are built at scrape time as
the counters are: prometheus_client's own would add a ``_created`` sample.
"""

from __future__ import annotations

import bisect
import platform
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

import podcache
from podcache.cache import CacheStats
from podcache.cache.events import EventState
from podcache.cri import DECODER, EVENT_DECODER
from podcache.model import PodList

if TYPE_CHECKING:
    from podcache.serve.watchstream import WatchCounters

__all__ = ["CONTENT_TYPE", "REQUEST_CLOCK", "Metrics"]

REQUEST_CLOCK = time.perf_counter
"""The clock request durations are measured on (``Metrics.count``'s ``started``)."""

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The exposition format's content type."""

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_REQUEST_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
)  # fmt: skip
"""A request answered from the memo takes tens of microseconds; one that waits for a refresh
up to ``DEFAULT_WAIT`` (10 s)."""


class _Histogram:
    """Bucket counts and sums by one label's value (or none), built at scrape time without a
    ``_created`` sample, as the counters are. Observed on the event loop's thread only (the
    request path and ``CallTimer``'s observers): no lock. Its series are bounded by the
    label's values: route templates, never raw paths."""

    __slots__ = ("_buckets", "_help", "_label", "_name", "rows")

    def __init__(
        self, name: str, help_text: str, buckets: tuple[float, ...], label: str | None = None
    ) -> None:
        self._name = name
        self._help = help_text
        self._label = label
        self._buckets = buckets
        self.rows: dict[str, list[float]] = {}
        """By label value: the count of each bucket (the last one +Inf's own), then the sum."""
        if label is None:  # an unlabelled histogram shows its zeros from the start
            self.row("")

    def row(self, value: str) -> list[float]:
        """The row of label ``value``, made on first use."""
        row = self.rows.get(value)
        if row is None:
            row = self.rows[value] = [0.0] * (len(self._buckets) + 2)
        return row

    def observe(self, seconds: float, value: str = "") -> None:
        """One observation (under label ``value``): the bucket of the least bound >= it."""
        row = self.rows.get(value) or self.row(value)
        row[bisect.bisect_left(self._buckets, seconds)] += 1
        row[-1] += seconds

    def collect(self) -> Metric:
        labels = [self._label] if self._label is not None else None
        family = HistogramMetricFamily(self._name, self._help, labels=labels)
        bounds = [repr(float(b)) for b in self._buckets] + ["+Inf"]  # as prometheus_client
        for value, row in sorted(self.rows.items()):
            cumulative, total = [], 0.0
            for bound, count in zip(bounds, row[:-1], strict=True):
                total += count
                cumulative.append((bound, total))
            family.add_metric([value] if labels else [], cumulative, row[-1])
        return family


class Metrics:
    """The server's metrics. ``stats`` reads the cache's counters; ``latest`` its last pods."""

    def __init__(
        self,
        stats: Callable[[], CacheStats],
        latest: Callable[[], PodList | None],
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.requests: dict[tuple[str, int], int] = {}
        """Requests answered, by (route, status code); the application increments it."""
        self.sources: list[Callable[[], Iterable[Metric]]] = []
        """More metric families, read at each scrape (the CRI socket's)."""
        self.watchers: WatchCounters | None = None
        """The watch streams' counters, when the application has streams."""
        self.pid_lookups: dict[str, int] = {}
        """``/pids/{pid}`` lookups by outcome (``podcache.cache.pids.PodLookup.OUTCOMES``, and
        ``error`` when the runtime failed)."""
        self.pid_lookup_probes = 0
        """Lookups that asked the runtime about their one container (``get_pod``), never
        relisting the node: their container was not in the snapshot, which predated them."""
        self.pid_lookup_refreshes = 0
        """Lookups that needed a snapshot newer than their process (each waited for a refresh;
        lookups at the same moment share one)."""
        self._refresh_duration = _Histogram(
            "podcache_refresh_duration_seconds",
            "Duration of runtime calls made to refresh the cache (successful or not).",
            _BUCKETS,
        )
        self._pod_relist_duration = _Histogram(
            "podcache_pod_relist_duration_seconds",
            "Duration of runtime calls made to relist one pod after its event (successful or not).",
            _BUCKETS,
        )
        self._request_duration = _Histogram(
            "podcache_http_request_duration_seconds",
            "Time from a request's arrival at the application to its answer (a watch: to its "
            "head), by route template (unmatched: no route).",
            _REQUEST_BUCKETS,
            "route",
        )
        self._request_rows = self._request_duration.rows
        self.histograms = (
            self._refresh_duration,
            self._pod_relist_duration,
            self._request_duration,
        )
        self.registry.register(_Collector(self, stats, latest, wall))

    def observe_refresh(self, seconds: float, ok: bool) -> None:
        """Record one listing of the node (``CallTimer.on_call``)."""
        self._refresh_duration.observe(seconds)

    def call_observers(self) -> dict[str, Callable[[float, bool], None]]:
        """``CallTimer``'s observers: listings into the refresh histogram, relists of one pod
        into theirs."""
        return {"on_call": self.observe_refresh, "on_pod_call": self.observe_pod_relist}

    def observe_pod_relist(self, seconds: float, ok: bool) -> None:
        """Record one relist of one pod (``CallTimer.on_pod_call``)."""
        self._pod_relist_duration.observe(seconds)

    def count(self, route: str, status: int, started: float) -> None:
        """Record one answered request: its route template, status, and its duration since
        ``started`` (a reading of ``REQUEST_CLOCK``)."""
        key = (route, status)
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1
        seconds = REQUEST_CLOCK() - started  # _Histogram.observe, inlined: every request's path
        row = self._request_rows.get(route) or self._request_duration.row(route)
        row[bisect.bisect_left(_REQUEST_BUCKETS, seconds)] += 1
        row[-1] += seconds

    def count_pid_lookup(self, outcome: str, refreshed: bool, probed: bool = False) -> None:
        self.pid_lookups[outcome] = self.pid_lookups.get(outcome, 0) + 1
        if refreshed:
            self.pid_lookup_refreshes += 1
        if probed:
            self.pid_lookup_probes += 1

    def render(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)


class _Collector(Collector):
    """Builds the scrape-time metrics from the cache, the latest pods and the request counts."""

    def __init__(
        self,
        metrics: Metrics,
        stats: Callable[[], CacheStats],
        latest: Callable[[], PodList | None],
        wall: Callable[[], float],
    ) -> None:
        self._metrics = metrics
        self._stats = stats
        self._latest = latest
        self._wall = wall

    def collect(self) -> Iterator[Metric]:
        """Every scrape-time metric, in the exposition's order."""
        stats = self._stats()
        yield _build_info()
        yield from _cache_metrics(stats)
        yield from _snapshot_metrics(stats, self._latest())
        yield from _timestamps(stats, self._wall())
        yield _requests(self._metrics.requests)
        if self._metrics.watchers is not None:
            yield from _watch_metrics(self._metrics.watchers)
        yield from _pid_metrics(self._metrics)
        for histogram in self._metrics.histograms:
            yield histogram.collect()
        for source in self._metrics.sources:
            yield from source()


_CACHE_COUNTERS = (
    ("podcache_cache_hits", "hits", "Cache lookups answered from the snapshot."),
    ("podcache_cache_misses", "misses", "Cache lookups that needed a refresh."),
    ("podcache_cache_refreshes", "refreshes", "Successful cache refreshes."),
    ("podcache_cache_refresh_errors", "errors", "Cache refreshes that failed."),
    ("podcache_events_received", "events_received", "Container events received from the runtime."),
    (
        "podcache_event_refreshes",
        "event_refreshes",
        "Cache refreshes started or queued by events and (re)subscriptions.",
    ),
    (
        "podcache_full_relists",
        "refreshes",
        "Successful listings of the whole node (the period, readers, (re)subscriptions, "
        "events that name no pod).",
    ),
    (
        "podcache_pod_relists",
        "pod_relists",
        "Successful relists of one pod after its event (its data entered the snapshot).",
    ),
    (
        "podcache_pod_relists_dropped",
        "pod_relists_dropped",
        "Relists of one pod dropped: they began before the snapshot's data for the pod.",
    ),
    (
        "podcache_pod_relist_errors",
        "pod_relist_errors",
        "Relists of one pod that failed (each asked for a full relist).",
    ),
    (
        "podcache_pod_events_covered",
        "pod_events_covered",
        "Events for a pod that needed no relist: a call that began after the change already "
        "held it.",
    ),
    (
        "podcache_event_resubscriptions",
        "resubscriptions",
        "Event subscriptions made again after the first (one per runtime restart).",
    ),
    (
        "podcache_event_stream_failures",
        "event_stream_failures",
        "Failed attempts of the event subscription, each one: GetContainerEvents streams "
        "that could not be opened, failed or ended, and the runtime unreachable or without "
        "events.",
    ),
)
"""The counters read from ``CacheStats``: (metric name, ``CacheStats`` attribute, help)."""

_WATCH_COUNTERS = (
    ("podcache_watch_changes_sent", "changes_sent", "Change lines streamed."),
    (
        "podcache_watch_resyncs",
        "resyncs",
        "Watches told to list again (410): a since out of the history, or too far behind.",
    ),
)
"""The counters read from ``WatchCounters``: (metric name, attribute, help)."""


def _build_info() -> Metric:
    build = GaugeMetricFamily(
        "podcache_build_info",
        "podcache's build: its version, the CRI list decoder in use (c: the C list reader; "
        "protobuf: the fallback of an install built without a C compiler), the container "
        "event decoder (c: the C event reader; python: the fallback) and Python's version; "
        "always 1.",
        labels=["version", "decoder", "event_decoder", "python"],
    )
    labels = [podcache.__version__, DECODER, EVENT_DECODER, platform.python_version()]
    build.add_metric(labels, 1.0)
    return build


def _cache_metrics(stats: CacheStats) -> Iterator[Metric]:
    """The cache's counters and its event subscription's state."""
    for name, attribute, help_text in _CACHE_COUNTERS:
        yield CounterMetricFamily(name, help_text, value=getattr(stats, attribute))
    state = GaugeMetricFamily(
        "podcache_events_state",
        "The event subscription's state: 1 for the current one "
        "(off, subscribing, subscribed, reconnecting, unsupported).",
        labels=["state"],
    )
    for name in (s.value for s in EventState):
        state.add_metric([name], 1.0 if stats.events_state == name else 0.0)
    yield state


def _snapshot_metrics(stats: CacheStats, pods: PodList | None) -> Iterator[Metric]:
    """The snapshot's age and size."""
    yield _gauge_unless_none(
        "podcache_snapshot_age_seconds",
        "How old the snapshot's content is at most: seconds since the full listing it comes "
        "from began (relists of one pod since only make pods newer); kept under the cache "
        "period while the runtime answers, idle or not (absent until the first listing).",
        stats.age,
    )
    yield GaugeMetricFamily(
        "podcache_pods", "Pods in the latest snapshot.", value=0 if pods is None else len(pods)
    )
    yield GaugeMetricFamily(
        "podcache_containers",
        "Containers (not sandboxes) in the latest snapshot.",
        value=0 if pods is None else sum(len(pod.containers) for pod in pods),
    )


def _timestamps(stats: CacheStats, wall: float) -> Iterator[Metric]:
    """When the last full listing began and the last event arrived, as unix timestamps
    (Prometheus's convention for a time: alert on ``time() - metric``); each is absent until
    it first happens."""
    yield _gauge_unless_none(
        "podcache_last_full_listing_timestamp_seconds",
        "Unix time at which the last successful listing of the whole node began (the "
        "snapshot's time).",
        None if stats.age is None else wall - stats.age,
    )
    yield _gauge_unless_none(
        "podcache_last_event_timestamp_seconds",
        "Unix time at which the last container event was received from the runtime (a quiet "
        "node sends none: not a liveness signal on its own).",
        None if stats.last_event_age is None else wall - stats.last_event_age,
    )


def _gauge_unless_none(name: str, help_text: str, value: float | None) -> Metric:
    """A gauge of ``value``, without a sample while it is None (the family is still listed)."""
    gauge = GaugeMetricFamily(name, help_text)
    if value is not None:
        gauge.add_metric([], value)
    return gauge


def _requests(counts: dict[tuple[str, int], int]) -> Metric:
    requests = CounterMetricFamily(
        "podcache_http_requests",
        "HTTP requests answered, by route and status code.",
        labels=["route", "code"],
    )
    for (route, status), count in sorted(counts.items()):
        requests.add_metric([route, str(status)], count)
    return requests


def _watch_metrics(watchers: WatchCounters) -> Iterator[Metric]:
    """The watch streams: open now, what they sent, how many were told to resync or cut off."""
    yield GaugeMetricFamily("podcache_watchers", "Watch streams open now.", value=watchers.open)
    for name, attribute, help_text in _WATCH_COUNTERS:
        yield CounterMetricFamily(name, help_text, value=getattr(watchers, attribute))
    cut_off = CounterMetricFamily(
        "podcache_watchers_cut_off",
        "Watch streams the server ended early, by reason: lagged (over max_lag "
        "changes behind), unread (over max_unsent bytes unread), budget (reset for "
        "--max-buffered), stalled (unsent bytes stuck for --idle-timeout).",
        labels=["reason"],
    )
    for reason, count in watchers.cut_off_by.items():
        cut_off.add_metric([reason], count)
    yield cut_off


def _pid_metrics(metrics: Metrics) -> Iterator[Metric]:
    """``/pids/{pid}`` lookups by outcome, and those that refreshed or probed."""
    lookups = CounterMetricFamily(
        "podcache_pid_lookups",
        "PID lookups (/pids/{pid}) by outcome: found, pod_only, not_in_container, unknown, "
        "no_process, error.",
        labels=["outcome"],
    )
    for outcome, count in sorted(metrics.pid_lookups.items()):
        lookups.add_metric([outcome], count)
    yield lookups
    yield CounterMetricFamily(
        "podcache_pid_lookup_refreshes",
        "PID lookups that waited for a refresh because their process was newer than the "
        "snapshot (lookups at the same moment share one refresh).",
        value=metrics.pid_lookup_refreshes,
    )
    yield CounterMetricFamily(
        "podcache_pid_lookup_probes",
        "PID lookups that asked the runtime about their one container or pod (filtered list "
        "calls), because it was not in a snapshot older than the process; repeated "
        "unknown IDs are remembered and ask nothing.",
        value=metrics.pid_lookup_probes,
    )
