"""What both cache drivers share and nothing else: the getter protocols, the checks of
constructor arguments and timeouts, and the event counters added to the stats
(docs/architecture.md §2: the drivers never import each other).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Literal, Protocol

from podcache.cache.core import CacheStats
from podcache.cache.events import Subscription
from podcache.model import ContainerEvent, ContainerEventType, PodList

__all__ = [
    "EventStream",
    "Events",
    "PodGetter",
    "check_getter",
    "check_timeout",
    "endpoint_name",
    "event_pod",
    "event_time",
    "events_wanted",
    "gone_unseen",
    "offers_events",
    "offers_pod",
    "with_events",
]


class PodGetter(Protocol):
    """Anything that lists pods: a CRI runtime, a fake. ``all`` includes exited containers."""

    def get_pods(self, all: bool) -> PodList: ...


class EventStream(Protocol):
    """What ``container_events()`` returns: ``podcache.cri.ContainerEventStream``, a fake."""

    def open(self) -> None: ...
    def __iter__(self) -> Iterator[ContainerEvent]: ...
    def close(self) -> None: ...


Events = bool | Literal["auto", "on", "off"]
"""A cache's ``events=``: the CLI's and serve's ``--events`` words, or a bool (True: auto)."""


def events_wanted(events: object, getter: object) -> bool:
    """Whether a cache subscribes to ``getter``'s container events for ``events=``: ``auto``
    (or True) when the getter offers them, ``on`` likewise but a getter without
    ``container_events()`` is a TypeError at construction (a runtime that answers
    UNIMPLEMENTED is polled, and ``stats().events_state`` says ``unsupported``), ``off`` (or
    False) never. Anything else is a ValueError naming it."""
    if events is True or events == "auto":
        return offers_events(getter)
    if events is False or events == "off":
        return False
    if events == "on":
        if not offers_events(getter):
            raise TypeError(
                f"events='on' needs a getter with container_events(); {getter!r} has none"
            )
        return True
    raise ValueError(f"events must be 'auto', 'on', 'off' or a bool, not {events!r}")


def endpoint_name(getter: object) -> str:
    """What a subscription's messages call the getter: its ``endpoint``, else its type."""
    return str(getattr(getter, "endpoint", type(getter).__name__))


def offers_events(getter: object) -> bool:
    """Whether the getter has a ``container_events()`` the cache can subscribe to."""
    return callable(getattr(getter, "container_events", None))


def offers_pod(getter: object) -> bool:
    """Whether the getter can relist one pod (``get_pod(uid, all)``): then events relist the
    pod they name, not the node (docs/architecture.md §7)."""
    return callable(getattr(getter, "get_pod", None))


def gone_unseen(event: object) -> bool:
    """Whether ``event`` reports the removal of something of no known pod (a DELETED event with
    no pod UID, whose IDs ``event_pod`` found in no pod of the snapshot): nothing is relisted
    (docs/architecture.md §7)."""
    return (
        isinstance(event, ContainerEvent)
        and event.type is ContainerEventType.DELETED
        and not event.pod_uid
    )


def event_time(event: object, wall_now: float) -> float | None:
    """When ``event`` happened, wall clock seconds: its ``created_at`` (ns since the epoch);
    None when it has none (0). An event from the future counts as ``wall_now`` (§7 rule 4: a
    time only ever makes a relist unnecessary, never the snapshot wrong)."""
    if not isinstance(event, ContainerEvent) or event.created_at <= 0:
        return None
    return min(event.created_at / 1e9, wall_now)


def event_pod(event: object, pods: PodList | None) -> str | None:
    """The UID of the pod ``event`` is about: the one the runtime sent with it, else the pod
    ``pods`` lists for its container or sandbox ID; None when neither says (the node is
    relisted). The lookup builds the snapshot's ID table once per snapshot at most."""
    if not isinstance(event, ContainerEvent):
        return None
    if event.pod_uid:
        return event.pod_uid
    if pods is None:
        return None
    for ident in (event.container_id, event.pod_sandbox_id):
        found = pods.by_exact_id(ident) if ident else None
        if found is not None:
            return found[0].id
    return None


def with_events(stats: CacheStats, subscription: Subscription | None, now: float) -> CacheStats:
    """``stats`` with the subscription's state and counters at clock reading ``now``
    (unchanged without one)."""
    if subscription is None:
        return stats
    counters = subscription.counters()
    last = counters.last_event_at
    return dataclasses.replace(
        stats,
        events_state=counters.state.value,
        events_received=counters.received,
        event_refreshes=counters.refreshes,
        resubscriptions=counters.resubscriptions,
        last_event_age=None if last is None else max(now - last, 0.0),
        event_stream_failures=counters.failures,
    )


def check_getter(getter: object, attribute: str = "get_pods") -> None:
    """Reject at construction a getter that cannot list pods (clear TypeError)."""
    if not callable(getattr(getter, attribute, None)):
        raise TypeError(
            f"getter {getter!r} has no callable {attribute}(all) method: pass a runtime such as "
            "podcache.cri.CRIRuntime or podcache.FakeRuntime"
        )


def check_timeout(timeout: float | None) -> None:
    """A caller's timeout must be None or a non-negative number of seconds."""
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"timeout must be None or >= 0 seconds, got {timeout!r}")
