"""The CRI socket's Prometheus metrics (docs/architecture.md §10 rule 7), read from its
counters at scrape time; no registry of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from podcache.cri.wire.methods import SERVICE
from podcache.serve.crisock.calls import NO_TABLE, Answered, RelayTable, connections
from podcache.serve.crisock.relay import ENGINE
from podcache.serve.crisock.routes import method_label
from podcache.serve.crisock.statuscalls import SOURCES

if TYPE_CHECKING:
    from podcache.serve.crisock.server import CRISocket

__all__ = ["cri_metrics"]


def _by_method(name: str, help_text: str, table: dict[str, int]) -> Metric:
    family = CounterMetricFamily(name, help_text, labels=["method"])
    for path, value in sorted(table.items()):
        family.add_metric([method_label(path)], value)
    return family


def _load(socket: CRISocket) -> Iterator[Metric]:
    """Calls in flight and waiting for an upstream slot; connections the relay closed."""
    relay = socket.relay
    closed = CounterMetricFamily(
        "podcache_cri_connections_closed",
        "Connections the CRI socket closed: evicted (idle longest, for a new one at the "
        "connection bound), refused (at the bound, none idle), unused (no call in its first "
        "seconds), busiest (the most calls open, closed for another's call past the fair "
        "share of the call bound).",
        labels=["reason"],
    )
    for reason in ("evicted", "refused", "unused", "busiest"):
        closed.add_metric([reason], 0 if relay is None else getattr(relay, reason))
    yield closed
    engine = GaugeMetricFamily(
        "podcache_cri_relay_engine",
        "The engine relaying the CRI socket's connections: c (a thread of its own) or python "
        "(the socket's event loop); 1 for the one in use.",
        labels=["engine"],
    )
    engine.add_metric([ENGINE], 1)
    yield engine
    yield GaugeMetricFamily(
        "podcache_cri_calls_in_flight",
        "Calls the CRI socket is answering now (streams included), over all connections.",
        value=socket.in_flight,
    )
    yield GaugeMetricFamily(
        "podcache_cri_upstream_waiting",
        "Forwarded calls waiting for one of the upstream slots now (at most the queue bound).",
        value=socket.forwarder.waiting,
    )


def _relay_table(socket: CRISocket) -> RelayTable:
    """The C relay's table of status answers (``NO_TABLE``: no relay yet, or the Python one)."""
    relay = socket.relay
    return NO_TABLE if relay is None else relay.table()


def _plus(table: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    """``table`` with ``more`` added (a key new to it only when its count is not 0)."""
    added = {key: table.get(key, 0) + count for key, count in more.items() if count}
    return table | added


def _by_relay(relay: dict[str, Answered]) -> Metric:
    """The status calls the C relay answered itself, by method."""
    family = CounterMetricFamily(
        "podcache_cri_relay_status_answers",
        "ContainerStatus and PodSandboxStatus calls the C relay answered from its copies of "
        "the kept answers, without gRPC (each counted as source=cache too).",
        labels=["method"],
    )
    for method in ("ContainerStatus", "PodSandboxStatus"):
        family.add_metric([method], relay[method].calls if method in relay else 0)
    return family


def _statuses(socket: CRISocket, table: RelayTable) -> Iterator[Metric]:
    """The status calls: answers by source (the relay's from the cache), what is kept."""
    calls, relay = socket.statuses, table.answered
    answers = CounterMetricFamily(
        "podcache_cri_status_answers",
        "ContainerStatus and PodSandboxStatus answers, by method and source: cache (a kept "
        "status: an event's, or the runtime's since which no event named the item), departed "
        "(--cri-keep-departed: an item deleted within the duration), upstream (the runtime's "
        "answer, one call per key shared by every caller waiting for it).",
        labels=["method", "source"],
    )
    given = dict(calls.answers)
    for method in ("ContainerStatus", "PodSandboxStatus"):
        for source in SOURCES:
            answered = relay[method].calls if source == "cache" and method in relay else 0
            answers.add_metric([method, source], given.get((method, source), 0) + answered)
    yield answers
    yield _by_relay(relay)
    kept = GaugeMetricFamily(
        "podcache_cri_status_kept",
        "Status answers the CRI socket keeps now: live (kept answers), departed, not_found "
        "(the runtime's NOT_FOUND for a whole ID), or relay (the C relay's copies of live "
        "ones).",
        labels=["store"],
    )
    kept_bytes = GaugeMetricFamily(
        "podcache_cri_status_kept_bytes",
        "Bytes of the status answers the CRI socket keeps now, by store.",
        labels=["store"],
    )
    departed = calls.store.departed
    for store, (count, size) in (
        ("live", calls.store.size),
        ("departed", (0, 0) if departed is None else departed.size),
        ("not_found", calls.store.missing_size),
        ("relay", (table.kept, table.size)),
    ):
        kept.add_metric([store], count)
        kept_bytes.add_metric([store], size)
    yield kept
    yield kept_bytes
    yield from _task_events(socket)


TASK_STATES = ("following", "retrying", "unimplemented", "off")
"""The ``state`` label of ``podcache_cri_task_events_state``."""


def _task_events(socket: CRISocket) -> Iterator[Metric]:
    """containerd's own events the status store follows (``taskevents``)."""
    tasks = socket.task_events
    now = "off" if tasks is None or tasks.state not in TASK_STATES else tasks.state
    state = GaugeMetricFamily(
        "podcache_cri_task_events_state",
        "Whether serve follows containerd's own events of what changes a container's status "
        "with no CRI event (while following, a container's kept status may outlive the period "
        "while a listing shows it unchanged): 1 for the state it is in.",
        labels=["state"],
    )
    for each in TASK_STATES:
        state.add_metric([each], 1.0 if each == now else 0.0)
    yield state
    yield CounterMetricFamily(
        "podcache_cri_task_events",
        "containerd's own events that named a container (a resize, an OOM kill inside it): "
        "each ended its kept status answers.",
        value=0 if tasks is None else tasks.events,
    )


def cri_metrics(socket: CRISocket) -> Iterator[Metric]:
    """Every metric of the socket, from its counters."""
    table = _relay_table(socket)
    relay = table.answered
    requests = CounterMetricFamily(
        "podcache_cri_requests",
        "Calls answered by the CRI socket, by method and gRPC status code.",
        labels=["method", "code"],
    )
    counts = dict(socket.calls.requests)
    for method, answered in relay.items():
        if answered.calls:
            counts[method, "OK"] = counts.get((method, "OK"), 0) + answered.calls
    for (method, code), value in sorted(counts.items()):
        requests.add_metric([method, code], value)
    yield requests
    yield socket.calls.durations(relay)
    yield GaugeMetricFamily(
        "podcache_cri_connections",
        "Connections open on the CRI socket's unix sockets.",
        value=connections(socket.paths),
    )
    forwarder = socket.forwarder
    yield _by_method(
        "podcache_cri_upstream_calls",
        "Calls the CRI socket made to the runtime on its clients' behalf.",
        dict(forwarder.upstream),
    )
    yield _by_method(
        "podcache_cri_upstream_calls_saved",
        "Calls the CRI socket answered without a runtime call of their own, by method: lists "
        "and statuses answered from the cache, forwarded calls shared in flight, a kept "
        "Version.",
        _plus(dict(forwarder.saved), {SERVICE + m: each.calls for m, each in relay.items()}),
    )
    yield from _load(socket)
    yield from _statuses(socket, table)
    yield CounterMetricFamily(
        "podcache_cri_list_forwards",
        "List calls forwarded because the bytes of an item were not held.",
        value=socket.list_forwards,
    )
    yield from _events(socket)


def _events(socket: CRISocket) -> Iterator[Metric]:
    """The event hub's streams: served, held, cut off, opened to the runtime."""
    hub = socket.hub
    yield GaugeMetricFamily(
        "podcache_cri_event_subscribers",
        "GetContainerEvents streams open on the CRI socket.",
        value=hub.subscribers,
    )
    yield CounterMetricFamily(
        "podcache_cri_event_subscriptions",
        "Event streams podcache opened to the runtime (one shared by every cache and client).",
        value=hub.subscriptions,
    )
    yield GaugeMetricFamily(
        "podcache_cri_event_held",
        "GetContainerEvents streams held through an outage of podcache's stream from the "
        "runtime, until a listing shows whether they lost anything.",
        value=hub.held,
    )
    cut = CounterMetricFamily(
        "podcache_cri_event_subscribers_cut_off",
        "GetContainerEvents streams ended by podcache: slow (past --cri-event-buffer, "
        "RESOURCE_EXHAUSTED) or upstream (podcache's stream from the runtime ended, UNAVAILABLE).",
        labels=["reason"],
    )
    for reason, value in sorted(hub.cut_off.items()):
        cut.add_metric([reason], value)
    yield cut
