"""Keys that pods stopped holding, and who held an ID, UID or IP at a time; no I/O, no threads.

Each cache feeds one ``Departed`` from its publish hooks (docs/architecture.md §3 rule 12).

Holdings. A listed pod *holds* its UID, its containers' and sandboxes' IDs (every attempt) and
its IPs while a snapshot lists them in it. A holding runs from the pod's newest sandbox's
creation (``Pod.created_at``; a container has no time of its own in the list model, and its
pod's creation is never after its own) until the wall-clock time the cache first saw the key
gone (``held_until``). A key is released when its pod leaves the snapshot (all its keys), and
also while the pod stays: a container that exits leaves the ready view's pod (the kubelet's
``get_pods(False)`` lists running containers only), a removed one leaves the all view's, an
IP can change. Every released key is remembered with the pod as it last held it, for
``departed_for`` seconds and at most ``departed_max`` keys (the oldest releases go first).
Remembering per key, not per departed pod, is what lets a container that exited before its
pod left be found (the ready view's pod leaves with no containers).

Finding. ``find`` answers one key from the current snapshot first, then from the keys
released, newest release first; with ``at``, the holding that contains ``at`` (the newest
sandbox of several: so an IP reused by a later pod never answers for a time before that pod's
sandbox was created, and a released key never answers for a time after its release). A found
holding's ``departed_at`` is when its pod left, None while the snapshot lists its UID (a pod
that comes back with its UID, after a listing that missed it, is no longer departed). A
container key may be a unique prefix of at least ``MIN_PREFIX`` characters, over the
snapshot's IDs and the remembered ones together (``AmbiguousContainerIDError`` for several).

Costs: recording a publish is O(its changes' keys) (a MODIFIED change compares the pod's keys
before and after); ``find`` is O(1) by a whole key, O(log n + limit) more by a prefix (a
bisection of the snapshot's sorted IDs and of ``SortedIDs``), and O(holdings of that key) with
``at``; pruning is O(keys pruned). Nothing walks every pod or every remembered key. Memory:
one ``Holding`` and its index entries per remembered key (benchmarks/bench_departed.py
measures it), and the pod versions they hold.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from datetime import datetime
from typing import cast

import msgspec

from podcache.cache.changes import ChangeType, PodChange
from podcache.cache.sortedids import SortedIDs
from podcache.errors import AmbiguousContainerIDError
from podcache.model import (
    MIN_PREFIX,
    Container,
    ContainerID,
    Pod,
    PodList,
    ids_with_prefix,
    normalise_ip,
    pod_at_ip,
)

__all__ = [
    "DEPARTED_FOR",
    "DEPARTED_MAX",
    "IP_MEMO",
    "PREFIX_MATCHES",
    "Departed",
    "Found",
    "Holding",
    "Key",
    "epoch_seconds",
    "lookup_key",
]

DEPARTED_FOR = 300.0
"""Seconds a released key is remembered (the ``departed_for=`` default; 0 turns it off)."""
DEPARTED_MAX = 50_000
"""Most released keys remembered (the ``departed_max=`` default; about 10,000 pods of a
sandbox, three containers and an IP); the oldest releases go first."""
PREFIX_MATCHES = 64
"""Most remembered IDs one prefix lookup reads (an ambiguous prefix lists at most these)."""


Key = tuple[str, str]
"""One lookup's key: ``(kind, value)``, kind ``container_id``, ``uid`` or ``ip``."""


class Found(msgspec.Struct, frozen=True, gc=False):
    """What ``find`` found: the pod (as it last held the key), the container (or sandbox) the
    lookup named (None for a UID or an IP), when the pod left (epoch seconds; None: the
    snapshot lists it), and when the pod stopped holding the key (``held_until``, epoch
    seconds; None: it holds it now). The holding began at ``pod.created_at``."""

    pod: Pod
    container: Container | None
    departed_at: float | None
    held_until: float | None = None

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


class Holding(msgspec.Struct, frozen=True, gc=False):
    """One key a pod stopped holding: the pod as it last held it, from its sandbox's creation
    (``held_from``) to when the cache first saw the key gone (``held_until``; epoch seconds)."""

    key: Key
    pod: Pod
    held_from: float
    held_until: float


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


def _keys_of(pod: Pod) -> list[Key]:
    """Every key ``pod`` holds: its containers' and sandboxes' IDs, its IPs (none on the host
    network), and its UID last (so a departure releases the UID after the rest: pruning, in
    release order, never forgets a pod's UID before its other keys)."""
    keys: list[Key] = [("container_id", item.id.id) for item in pod.containers]
    keys += [("container_id", item.id.id) for item in pod.sandboxes]
    if not pod.host_network:
        keys += [("ip", ip) for ip in pod.ips]
    keys.append(("uid", pod.id))
    return keys


def _item(pod: Pod, key: Key) -> Container | None:
    """The container (first) or sandbox of ``pod`` a container-ID key names."""
    if key[0] != "container_id":
        return None
    for item in (*pod.containers, *pod.sandboxes):
        if item.id.id == key[1]:
            return item
    return None


def _check_bounds(departed_for: float, departed_max: int) -> None:
    if isinstance(departed_for, bool) or not isinstance(departed_for, int | float):
        raise TypeError(f"departed_for must be seconds, not {departed_for!r}")
    if not departed_for >= 0 or math.isinf(departed_for):
        raise ValueError(f"departed_for must be >= 0 seconds and finite, got {departed_for!r}")
    if isinstance(departed_max, bool) or not isinstance(departed_max, int):
        raise TypeError(f"departed_max must be an int, not {departed_max!r}")
    if departed_max < 0:
        raise ValueError(f"departed_max must be >= 0, got {departed_max!r}")


class Departed:
    """The keys the pods of one cache stopped holding, indexed by key (module docstring)."""

    def __init__(
        self, departed_for: float = DEPARTED_FOR, departed_max: int = DEPARTED_MAX
    ) -> None:
        _check_bounds(departed_for, departed_max)
        self.departed_for = float(departed_for)
        self.departed_max = departed_max
        self._released: deque[Holding] = deque()  # every holding, oldest release first
        self._holdings: dict[Key, list[Holding]] = {}  # by key, oldest release first
        self._ids = SortedIDs()  # the container and sandbox IDs among the keys (prefixes)
        self.recorded = 0
        self.forgotten = 0

    @property
    def enabled(self) -> bool:
        return self.departed_for > 0 and self.departed_max > 0

    def __len__(self) -> int:
        """Keys remembered (each release of a key counts: a key held twice, twice)."""
        return len(self._released)

    # -- recording ------------------------------------------------------------------------------
    def record(self, changes: Iterable[PodChange], now: float) -> None:
        """A publish's changes at wall time ``now``: a pod deleted releases every key it held;
        a pod modified releases the keys it held before and holds no more."""
        if not self.enabled:
            return
        for change in changes:
            if change.type is ChangeType.DELETED:
                for key in _keys_of(change.pod):
                    self._release(key, change.pod, now)
            elif change.type is ChangeType.MODIFIED and change.previous is not None:
                before = change.previous
                kept = set(_keys_of(change.pod))
                for key in _keys_of(before):
                    if key not in kept:
                        self._release(key, before, now)
        self.prune(now)

    def prune(self, now: float) -> None:
        """Forget releases older than ``departed_for``, and the oldest past ``departed_max``."""
        released = self._released
        limit = self.departed_max
        horizon = now - self.departed_for
        while released and (len(released) > limit or released[0].held_until < horizon):
            self._forget(released.popleft())

    def _release(self, key: Key, pod: Pod, now: float) -> None:
        holding = Holding(key, pod, created_seconds(pod), now)
        self._released.append(holding)
        holdings = self._holdings.get(key)
        if holdings is None:
            self._holdings[key] = [holding]
            if key[0] == "container_id":
                self._ids.add(key[1])
        else:
            holdings.append(holding)
        self.recorded += 1

    def _forget(self, holding: Holding) -> None:
        """Drop ``holding``, the oldest release of all and so the oldest of its key."""
        key = holding.key
        holdings = self._holdings[key]
        assert holdings[0] is holding, "releases of one key out of order"
        del holdings[0]
        if not holdings:
            del self._holdings[key]
            if key[0] == "container_id":
                self._ids.discard(key[1])
        self.forgotten += 1

    # -- finding --------------------------------------------------------------------------------
    def find(self, pods: PodList | None, key: Key, at: float | None, now: float) -> Found | None:
        """The pod holding ``key``: in ``pods`` (the current snapshot) first, then the keys
        released (none older than ``departed_for`` at wall time ``now``); with ``at``, the
        holding that contains ``at`` (module docstring). A container key may be a unique
        prefix: AmbiguousContainerIDError when it names several IDs, ValueError when it is
        shorter than ``MIN_PREFIX`` and names none whole."""
        self.prune(now)
        if key[0] == "container_id":
            whole = self._whole_id(pods, key[1])
            if whole is None:
                return None
            key = ("container_id", whole)
        current = _in_snapshot(pods, key) if pods is not None else None
        if at is None:
            if current is not None:
                return Found(current, _item(current, key), None)
            holdings = self._holdings.get(key)
            return None if not holdings else self._found(pods, holdings[-1])
        best: Holding | None = None
        since = created_seconds(current) if current is not None else math.inf
        if since > at:
            since = -math.inf  # the snapshot's holder did not hold it yet
        for held in self._holdings.get(key, ()):
            start = held.held_from
            if start <= at < held.held_until and start > since:
                best, since = held, start
        if best is not None:
            return self._found(pods, best)
        if current is not None and since != -math.inf:
            return Found(current, _item(current, key), None)
        return None

    def _found(self, pods: PodList | None, held: Holding) -> Found:
        """``held`` as an answer: its pod departed unless ``pods`` lists the pod's UID, when
        its UID's last release (at or after the key's) says."""
        pod = held.pod
        departed_at: float | None = None
        if pods is None or pods.by_uid(pod.id) is None:
            departed_at = held.held_until
            if held.key[0] != "uid":
                releases = self._holdings.get(("uid", pod.id))
                if releases and releases[-1].held_until >= held.held_until:
                    departed_at = releases[-1].held_until
        return Found(pod, _item(pod, held.key), departed_at, held.held_until)

    def _whole_id(self, pods: PodList | None, ident: str) -> str | None:
        """The whole container or sandbox ID ``ident`` names: itself when the snapshot or the
        remembered keys hold it, else the one ID of both that starts with it (module
        docstring); None when none does."""
        if ("container_id", ident) in self._holdings:
            return ident
        if pods is not None and pods.by_exact_id(ident) is not None:
            return ident
        if len(ident) < MIN_PREFIX:
            raise ValueError(
                f"container ID prefix {ident!r} is too short: give at least {MIN_PREFIX} characters"
            )
        matches = self._ids.prefixed(ident, PREFIX_MATCHES)
        if pods is not None:
            listed = ids_with_prefix(pods, ident)
            if listed:
                matches = sorted({*matches, *listed[:PREFIX_MATCHES]})
        if len(matches) > 1:
            raise AmbiguousContainerIDError(ident, matches)
        return matches[0] if matches else None


def _in_snapshot(pods: PodList, key: Key) -> Pod | None:
    kind, value = key
    if kind == "uid":
        return pods.by_uid(value)
    if kind == "ip":
        return pod_at_ip(pods, value)
    found = pods.by_exact_id(value)
    return None if found is None else found[0]
