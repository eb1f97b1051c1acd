"""Pods that just left, and who held an ID, UID or IP at a time; no I/O, no threads.

Each cache feeds one ``Departed`` from its publish hooks (docs/architecture.md §3 rule 12): a
pod that leaves the snapshot is remembered with the wall-clock time the cache first saw it
gone (``departed_at``), for ``departed_for`` seconds and at most ``departed_max`` pods (the
oldest departures go first). ``find`` answers one lookup from the current snapshot first, then
from the departed.

Holdings. A pod *holds* its UID, its containers' and sandboxes' IDs and its IPs from its
newest sandbox's creation (``Pod.created_at``) until it left (``departed_at``; still held
while it is in the snapshot). A lookup with ``at`` answers the pod whose holding contains
``at``: so an IP reused by a later pod never answers for a time before that pod's sandbox was
created, and a departed pod never answers for a time after it left. Several candidates (a
runtime that reported one key on two pods at once) answer the newest sandbox.

Costs: recording a departure is O(its keys); ``find`` without ``at`` is O(1), with ``at``
O(holders of that key) (an IP's holders are its reuses in ``departed_for``); pruning is
O(pods pruned). Memory: one ``Departure`` and its index entries per departed pod
(benchmarks/bench_departed.py measures it).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from typing import cast

import msgspec

from podcache.cache.changes import ChangeType, PodChange
from podcache.model import Container, ContainerID, Pod, PodList, normalise_ip, pod_at_ip

__all__ = [
    "DEPARTED_FOR",
    "DEPARTED_MAX",
    "IP_MEMO",
    "Departed",
    "Departure",
    "Found",
    "Key",
    "epoch_seconds",
    "lookup_key",
]

DEPARTED_FOR = 300.0
"""Seconds a departed pod is remembered (the ``departed_for=`` default; 0 turns it off)."""
DEPARTED_MAX = 10_000
"""Most departed pods remembered (the ``departed_max=`` default); the oldest go first."""


class Found(msgspec.Struct, frozen=True, gc=False):
    """What ``find`` found: the pod, the container (or sandbox: ``is_sandbox``, ``kind``) the
    lookup named (None for a UID or an IP), and when the pod left (epoch seconds; None: it is
    in the snapshot)."""

    pod: Pod
    container: Container | None
    departed_at: float | None

    @property
    def is_sandbox(self) -> bool:
        """Whether ``container`` is one of the pod's sandboxes (the ID named its sandbox, the
        pause container), not a container; False when ``container`` is None."""
        return self.container is not None and self.container in self.pod.sandboxes

    @property
    def kind(self) -> str | None:
        """What the key named: ``"sandbox"``, ``"container"``, or None (a UID or an IP)."""
        if self.container is None:
            return None
        return "sandbox" if self.is_sandbox else "container"


class Departure(msgspec.Struct, frozen=True, gc=False):
    """One pod that left the snapshot: when its holding began (its sandbox's creation) and
    when the cache first saw it gone (epoch seconds)."""

    pod: Pod
    held_from: float
    departed_at: float


Key = tuple[str, str]
"""One lookup's key: ``(kind, value)``, kind ``container_id``, ``uid`` or ``ip``."""


def lookup_key(container_id: str | None, uid: str | None, ip: str | None) -> Key:
    """The one key given (a TypeError when none or several are, or one is not a str; an IP is
    normalised, a ValueError naming it when it is not one)."""
    if (container_id is None) + (uid is None) + (ip is None) != 2:
        raise TypeError("find() takes exactly one of container_id=, uid= or ip=")
    if ip is not None:
        kind, value = "ip", ip
    elif uid is not None:
        kind, value = "uid", uid
    else:
        kind, value = "container_id", cast(str, container_id)
    if type(value) is not str:
        raise TypeError(f"{kind} must be a str, not {type(value).__name__}")
    if kind == "ip":
        value = _canonical_ip(value)
    elif kind == "container_id" and "://" in value:
        value = ContainerID.parse(value).id  # matched by its bare ID, as the tables do
    return kind, value


IP_MEMO = 4096
"""Most spellings of IP addresses kept with their canonical text (then the memo starts over):
parsing one with ``ipaddress`` costs about 3 us, most of a lookup's budget."""

_canonical: dict[str, str] = {}


def _canonical_ip(text: str) -> str:
    """``model.normalise_ip``, memoised (a bounded dict: atomic under the GIL)."""
    known = _canonical.get(text)
    if known is None:
        known = normalise_ip(text)  # raises for a non-address: never memoised
        if len(_canonical) >= IP_MEMO:
            _canonical.clear()
        _canonical[text] = known
    return known


def epoch_seconds(at: float | datetime | None) -> float | None:
    """``at`` as epoch seconds: a number as it is, an aware datetime converted; a naive
    datetime, NaN, or anything else is an error naming ``at``."""
    if at is None:
        return None
    if isinstance(at, datetime):
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError(f"at must be an aware datetime (with a time zone), not {at!r}")
        return at.timestamp()
    if type(at) is float:
        if math.isnan(at) or math.isinf(at):
            raise ValueError(f"at must be a finite time, not {at!r}")
        return at
    if isinstance(at, bool) or not isinstance(at, int | float):
        raise TypeError(f"at must be epoch seconds or an aware datetime, not {at!r}")
    seconds = float(at)
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"at must be a finite time, not {at!r}")
    return seconds


def created_seconds(pod: Pod) -> float:
    """When ``pod``'s newest sandbox was created, in epoch seconds (``created_at`` is ns)."""
    return pod.created_at / 1e9


def _keys_of(pod: Pod) -> Iterable[tuple[str, str]]:
    yield "uid", pod.id
    for item in (*pod.containers, *pod.sandboxes):
        yield "container_id", item.id.id
    if not pod.host_network:
        for ip in pod.ips:
            yield "ip", ip


def _item(pod: Pod, key: Key) -> Container | None:
    """The container (first) or sandbox of ``pod`` a container-ID key names."""
    if key[0] != "container_id":
        return None
    for item in (*pod.containers, *pod.sandboxes):
        if item.id.id == key[1]:
            return item
    return None


class Departed:
    """The departed pods of one cache, indexed by every key they held (module docstring)."""

    def __init__(
        self, departed_for: float = DEPARTED_FOR, departed_max: int = DEPARTED_MAX
    ) -> None:
        if isinstance(departed_for, bool) or not isinstance(departed_for, int | float):
            raise TypeError(f"departed_for must be seconds, not {departed_for!r}")
        if not departed_for >= 0 or math.isinf(departed_for):
            raise ValueError(f"departed_for must be >= 0 seconds and finite, got {departed_for!r}")
        if isinstance(departed_max, bool) or not isinstance(departed_max, int):
            raise TypeError(f"departed_max must be an int, not {departed_max!r}")
        if departed_max < 0:
            raise ValueError(f"departed_max must be >= 0, got {departed_max!r}")
        self.departed_for = float(departed_for)
        self.departed_max = departed_max
        self._by_uid: OrderedDict[str, Departure] = OrderedDict()  # oldest departure first
        self._holders: dict[Key, list[Departure]] = {}
        self._oldest_at = math.inf  # the oldest departure's time (prune looks no further)
        self.recorded = 0
        self.forgotten = 0

    @property
    def enabled(self) -> bool:
        return self.departed_for > 0 and self.departed_max > 0

    def __len__(self) -> int:
        return len(self._by_uid)

    # -- recording ------------------------------------------------------------------------------
    def record(self, changes: Iterable[PodChange], now: float) -> None:
        """A publish's changes at wall time ``now``: a pod deleted departs; one that appears
        again with its UID (a listing that missed it) is no longer departed."""
        if not self.enabled:
            return
        for change in changes:
            if change.type is ChangeType.DELETED:
                self._depart(change.pod, now)
            elif change.type is ChangeType.ADDED and change.pod.id in self._by_uid:
                self._forget(self._by_uid[change.pod.id])
        self.prune(now)

    def prune(self, now: float) -> None:
        """Forget departures older than ``departed_for``, and the oldest past ``departed_max``."""
        by_uid = self._by_uid
        if len(by_uid) <= self.departed_max and now - self._oldest_at <= self.departed_for:
            return
        while by_uid:
            oldest = next(iter(by_uid.values()))
            if len(by_uid) <= self.departed_max and now - oldest.departed_at <= self.departed_for:
                break
            self._forget(oldest)
        self._oldest_at = next(iter(by_uid.values())).departed_at if by_uid else math.inf

    def _depart(self, pod: Pod, now: float) -> None:
        earlier = self._by_uid.get(pod.id)
        if earlier is not None:
            self._forget(earlier)
        departure = Departure(pod, created_seconds(pod), now)
        if not self._by_uid:
            self._oldest_at = now
        self._by_uid[pod.id] = departure
        for key in _keys_of(pod):
            self._holders.setdefault(key, []).append(departure)
        self.recorded += 1

    def _forget(self, departure: Departure) -> None:
        pod = departure.pod
        if self._by_uid.get(pod.id) is departure:
            del self._by_uid[pod.id]
        for key in _keys_of(pod):
            holders = self._holders.get(key)
            if holders is None:
                continue
            holders[:] = [each for each in holders if each is not departure]
            if not holders:
                del self._holders[key]
        self.forgotten += 1

    # -- finding --------------------------------------------------------------------------------
    def find(self, pods: PodList | None, key: Key, at: float | None, now: float) -> Found | None:
        """The pod holding ``key``: in ``pods`` (the current snapshot) first, then departed
        (none older than ``departed_for`` at wall time ``now``); with ``at``, the one whose
        holding contains ``at`` (module docstring)."""
        self.prune(now)
        current = _in_snapshot(pods, key) if pods is not None else None
        if at is None:
            if current is not None:
                return Found(current, _item(current, key), None)
            holders = self._holders.get(key)
            if not holders:
                return None
            latest = holders[-1]
            return Found(latest.pod, _item(latest.pod, key), latest.departed_at)
        best: tuple[float, Found] | None = None
        if current is not None and created_seconds(current) <= at:
            best = (created_seconds(current), Found(current, _item(current, key), None))
        for held in self._holders.get(key, ()):
            start = held.held_from
            if start <= at < held.departed_at and (best is None or start > best[0]):
                best = (start, Found(held.pod, _item(held.pod, key), held.departed_at))
        return None if best is None else best[1]

    def departed_at(self, key: Key) -> float | None:
        """When the last pod that held ``key`` left, if it is remembered (a 404 says so)."""
        holders = self._holders.get(key)
        return holders[-1].departed_at if holders else None


def _in_snapshot(pods: PodList, key: Key) -> Pod | None:
    kind, value = key
    if kind == "uid":
        return pods.by_uid(value)
    if kind == "ip":
        return pod_at_ip(pods, value)
    found = pods.by_exact_id(value)
    return None if found is None else found[0]
