"""Keys that pods stopped holding, and who held an ID, UID or IP at a time; no I/O, no threads.

Each cache feeds one ``Departed`` from its publish hooks and its events: the holdings, releases
and ``find`` of docs/architecture.md §3 rule 12, the reports of §7 "Events are facts". Beyond
them: a key listed again after a listing (not an event) ended its report holds it anew (the
ready view lists a container only once it runs), released by rule 12 as any listed key.

Costs: recording a publish is O(its changes' keys); ``find`` is O(1) by a whole key, O(log n +
limit) more by a prefix (a bisection of the snapshot's sorted IDs and of ``SortedIDs``), and
O(holdings of that key) with ``at``; pruning is O(keys pruned). Nothing walks every pod or
every remembered key.
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
    ContainerEvent,
    ContainerEventType,
    ContainerID,
    Pod,
    PodList,
    ids_with_prefix,
    normalise_ip,
    pod_at_ip,
)

__all__ = [
    "DEPARTED_BYTES",
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
DEPARTED_BYTES = 64 * 1024 * 1024
"""Most bytes the remembered keys' pods may cost, as ``pod_cost`` counts them (the
``departed_bytes=`` default); the oldest go first."""
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
    cost: int = 0
    """What remembering it costs (``pod_cost`` of its pod), counted against ``departed_bytes``."""


class Reported(msgspec.Struct, gc=False):
    """A key events report held and no snapshot has listed since: the pod as the events last
    described it (the key's container among its containers or sandboxes), from its sandbox's
    creation (``held_from``; the first report's time when the runtime gave none) to now;
    ``reported``: the time of the last event that reported it held (wall seconds)."""

    key: Key
    pod: Pod
    held_from: float
    reported: float
    cost: int


POD_OVERHEAD = 600
"""Bytes counted for a pod's objects beside its text (a ``Pod`` and its tuples)."""
ITEM_OVERHEAD = 350
"""Bytes counted for each container, sandbox, label and IP of a pod beside its text."""


def pod_cost(pod: Pod) -> int:
    """What remembering ``pod`` costs in bytes, by its text and a fixed overhead per object
    (``POD_OVERHEAD``, ``ITEM_OVERHEAD``): above what tracemalloc measures for pods as the
    listings and events make them (tests/unit/cache/test_departed_bounds.py). O(the pod)."""
    cost = POD_OVERHEAD + len(pod.id) + len(pod.name) + len(pod.namespace)
    for item in (*pod.containers, *pod.sandboxes):
        cost += ITEM_OVERHEAD + len(item.id.id) + len(item.name) + len(item.image)
        cost += len(item.image_id) + len(item.image_ref) + len(item.image_runtime_handler)
    for key, value in cast(tuple[tuple[str, str], ...], pod.labels):
        cost += ITEM_OVERHEAD + len(key) + len(value)
    return cost + ITEM_OVERHEAD * len(pod.ips) + sum(map(len, pod.ips))


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
"""Most spellings of IP addresses kept with their canonical text (then the memo starts over)."""

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
    if type(at) is not float and (isinstance(at, bool) or not isinstance(at, int | float)):
        raise TypeError(f"at must be epoch seconds or an aware datetime, not {at!r}")
    seconds = float(at)
    if not math.isfinite(seconds):
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


def _with_item(pod: Pod, key: Key) -> Pod:
    """``pod`` holding container key ``key``: itself when one of its containers or sandboxes
    has that ID, else with a container of that ID alone added (an event about a container
    that carried no status of it). O(the pod's containers)."""
    if key[0] != "container_id" or _item(pod, key) is not None:
        return pod
    runtime = pod.sandboxes[0].id.type if pod.sandboxes else ""
    added = Container(id=ContainerID(runtime, key[1]))
    return msgspec.structs.replace(pod, containers=(*pod.containers, added))


def _merged(before: Pod, told: Pod) -> Pod:
    """What two events say of one pod together: the later (``told``), with the containers
    only the earlier told of (a container's DELETED carries no status of it), its IPs when
    the later has none (a stopped sandbox's status has no network), and its creation when
    the later has none (containerd 2.x's sandbox DELETED). O(the pods' containers)."""
    known = {item.id.id for item in told.containers}
    missing = tuple(item for item in before.containers if item.id.id not in known)
    if not missing and (told.ips or not before.ips) and told.created_at > 0:
        return told
    return msgspec.structs.replace(
        told,
        containers=(*told.containers, *missing),
        ips=told.ips or before.ips,
        created_at=told.created_at or before.created_at,
    )


def _event_keys(event: ContainerEvent, pod: Pod) -> list[Key]:
    """The keys an event reports held: its pod's containers' and sandbox's IDs, the event's
    own container ID, its IPs (none on the host network), its UID last."""
    keys = _keys_of(pod)
    own: Key = ("container_id", event.container_id)
    if own not in keys:
        keys.insert(len(pod.containers) + len(pod.sandboxes), own)
    return keys


def _check_bounds(departed_for: float, departed_max: int, departed_bytes: int) -> None:
    _check_count(departed_bytes, "departed_bytes")
    if isinstance(departed_for, bool) or not isinstance(departed_for, int | float):
        raise TypeError(f"departed_for must be seconds, not {departed_for!r}")
    if not departed_for >= 0 or math.isinf(departed_for):
        raise ValueError(f"departed_for must be >= 0 seconds and finite, got {departed_for!r}")
    _check_count(departed_max, "departed_max")


def _check_count(value: int, name: str) -> None:
    """``value`` is an int (not a bool) of at least 0; else an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")


class Departed:
    """The keys the pods of one cache stopped holding, indexed by key (docs/architecture.md
    §3 rule 12)."""

    def __init__(
        self,
        departed_for: float = DEPARTED_FOR,
        departed_max: int = DEPARTED_MAX,
        departed_bytes: int = DEPARTED_BYTES,
    ) -> None:
        _check_bounds(departed_for, departed_max, departed_bytes)
        self.departed_for = float(departed_for)
        self.departed_max = departed_max
        self.departed_bytes = departed_bytes
        self._released: deque[Holding] = deque()  # every holding, oldest release first
        self._holdings: dict[Key, list[Holding]] = {}  # by key, oldest release first
        self._reported: dict[Key, Reported] = {}  # held by events' word, oldest first
        self._reported_by_uid: dict[str, dict[Key, None]] = {}  # the same, by pod
        self._gone: dict[Key, tuple[str, float]] = {}  # removals told of listed keys, oldest first
        self._again: dict[Key, None] = {}  # keys listed again after a release of their pod
        self._unlisted: dict[Key, None] = {}  # reports a listing ended, not an event
        self._created: dict[str, float] = {}  # pods' creation as events told it, oldest first
        self._ids = SortedIDs()  # the container and sandbox IDs among the keys (prefixes)
        self.bytes = 0  # pod_cost of every holding and report kept
        self.forgotten = 0

    @property
    def enabled(self) -> bool:
        return self.departed_for > 0 and self.departed_max > 0 and self.departed_bytes > 0

    def __len__(self) -> int:
        """Keys remembered (each release of a key counts: a key held twice, twice), and the
        keys events report held that no snapshot lists."""
        return len(self._released) + len(self._reported)

    @property
    def reported(self) -> int:
        """Keys events report held that no snapshot has listed since."""
        return len(self._reported)

    # -- recording ------------------------------------------------------------------------------
    def record(self, changes: Iterable[PodChange], now: float) -> None:
        """A publish's changes at wall time ``now``: a pod deleted releases every key it held;
        a pod modified releases the keys it held before and holds no more."""
        if not self.enabled:
            return
        for change in changes:
            if change.type is ChangeType.DELETED:
                cost = pod_cost(change.pod)
                for key in _keys_of(change.pod):
                    self._release(key, change.pod, now, cost)
            else:
                before = change.previous if change.type is ChangeType.MODIFIED else None
                self._holds(change.pod, before, now)
        self.prune(now)

    def _holds(self, pod: Pod, before: Pod | None, now: float) -> None:
        """The snapshot holds ``pod`` now (added, or modified from ``before``): its reports
        end, the keys it holds again are marked, the keys only ``before`` held are released."""
        kept = _keys_of(pod)
        if self._reported_by_uid.get(pod.id):
            self._listed(pod.id, kept)
        self._held_again(pod.id, kept, before)
        if before is None:
            return
        held = set(kept)
        gone = [key for key in _keys_of(before) if key not in held]
        cost = pod_cost(before) if gone else 0
        for key in gone:
            self._release(key, before, now, cost)

    def _held_again(self, uid: str, keys: list[Key], before: Pod | None) -> None:
        """Keys the snapshot holds now, newly, whose report a listing ended (the ready view does
        not list a container until it runs): their next release is a holding of its own, not
        the duplicate ``_release`` drops. A report a DELETED event ended stays ended: the event
        is a fact, and a listing that lists the key again began before it. O(the pod's keys);
        at most ``departed_max`` remembered each, the oldest dropped."""
        earlier = set(_keys_of(before)) if before is not None else set()
        for key in keys:
            if key in earlier or self._unlisted.pop(key, False) is not None:
                continue  # held before, or its release was an event's (a fact: it left)
            releases = self._holdings.get(key)
            if releases and releases[-1].pod.id == uid:
                self._again[key] = None
        while len(self._again) > self.departed_max:
            del self._again[next(iter(self._again))]

    def _listed(self, uid: str, keys: list[Key]) -> None:
        """The snapshot lists pod ``uid`` holding ``keys``: their reports end (the snapshot
        holds them now, and releases them by rule 12), without a release."""
        for key in keys:
            entry = self._reported.get(key)
            if entry is not None and entry.pod.id == uid:
                self._unreport(entry)
                self._unindex(key)

    # -- events are facts (docs/architecture.md §7) ----------------------------------------------
    def observe(self, event: object, pods: PodList | None, now: float) -> None:
        """One event received at wall time ``now``, as it happened (its ``created_at``, at
        most ``now``; ``now`` when it has none): ``told``."""
        if isinstance(event, ContainerEvent) and self.enabled:
            happened = min(event.created_at / 1e9, now) if event.created_at > 0 else now
            self.told(event, pods, happened)

    def told(self, event: ContainerEvent, pods: PodList | None, happened: float) -> None:
        """One event at wall time ``happened`` (its own time): its keys reported, a DELETED one's
        report ended (docs/architecture.md §7, "Events are facts", rules 1-2). O(the event's
        keys), plus the pod's reports for a sandbox's DELETED."""
        if not self.enabled:
            return
        pod = event.pod
        if pod is not None:
            self._remember_created(pod)
            told, cost = self._described(pod, event.container_id)
            for key in _event_keys(event, pod):
                self._report(key, told, cost, pods, happened)
        if event.type is ContainerEventType.DELETED:
            listed = pods.by_uid(pod.id) if pods is not None and pod is not None else None
            self._removed(("container_id", event.container_id), listed or pod, happened)
        self.prune(happened)

    def _remember_created(self, pod: Pod) -> None:
        """When an event's pod was created, once known (at most ``departed_max`` pods, the
        oldest forgotten)."""
        if pod.created_at > 0 and pod.id not in self._created:
            self._created[pod.id] = pod.created_at / 1e9
            if len(self._created) > self.departed_max:
                del self._created[next(iter(self._created))]

    def _told_gone(self, key: Key, pod: Pod, happened: float) -> None:
        """A DELETED event for ``key`` that the snapshot lists (no report of it; ``pod``: as
        the snapshot lists it): its release, when a publish makes it, is at ``happened``,
        not the publish's time (a sandbox's: every key of its pod too). At most
        ``departed_max`` are kept, the oldest dropped."""
        told = [key]
        if any(item.id.id == key[1] for item in pod.sandboxes):
            told += _keys_of(pod)
        for each in told:
            self._gone.setdefault(each, (pod.id, happened))
        while len(self._gone) > self.departed_max:
            del self._gone[next(iter(self._gone))]

    def _described(self, pod: Pod, own: str) -> tuple[Pod, int]:
        """``pod`` as an event describes it, merged with what the earlier events of its
        reports said (``_merged``), holding the event's own container; and its cost. Once
        per event: every report of one pod holds the same pod."""
        keys = self._reported_by_uid.get(pod.id)
        told = pod
        if keys:
            before = self._reported[next(iter(keys))].pod
            if before is not pod:
                told = _merged(before, pod)
        told = _with_item(told, ("container_id", own))
        return told, pod_cost(told)

    def _report(self, key: Key, pod: Pod, cost: int, pods: PodList | None, happened: float) -> None:
        """``key`` reported held by ``pod`` (costing ``cost``) at ``happened`` (rule 1)."""
        entry = self._reported.get(key)
        if entry is not None and entry.pod.id == pod.id:
            self._report_again(entry, pod, cost, happened)
            return
        if self._remembered(key, pod, pods):
            return
        if entry is not None:  # another pod held it (an IP): that holding ended by now
            self._end(entry, happened)
        start = pod.created_at / 1e9 if pod.created_at > 0 else happened
        self._reported[key] = Reported(key, pod, start, happened, cost)
        self._reported_by_uid.setdefault(pod.id, {})[key] = None
        self.bytes += cost
        if key[0] == "container_id" and key not in self._holdings:
            self._ids.add(key[1])

    def _report_again(self, entry: Reported, pod: Pod, cost: int, happened: float) -> None:
        """Another event of a key reported held by the same pod: the latest report, and the
        pod as the latest events describe it."""
        entry.reported = max(entry.reported, happened)
        if entry.pod is not pod:
            self.bytes += cost - entry.cost
            entry.pod, entry.cost = pod, cost

    def _remembered(self, key: Key, pod: Pod, pods: PodList | None) -> bool:
        """Whether ``pod``'s holding of ``key`` is remembered already: the snapshot lists it
        (rule 12 remembers it), or its release is (a late or repeated event)."""
        listed = _in_snapshot(pods, key) if pods is not None else None
        if listed is not None and listed.id == pod.id:
            return True
        releases = self._holdings.get(key)
        return bool(releases and releases[-1].pod.id == pod.id)

    def _removed(self, key: Key, pod: Pod | None, happened: float) -> None:
        """A DELETED event for container or sandbox ``key`` (``pod``: the pod it described):
        its report ends at ``happened``, or, when the snapshot lists it, its release will
        (``_told_gone``); a sandbox's ends its pod's every report (its UID and IPs, and
        containers whose own DELETED never came)."""
        entry = self._reported.get(key)
        if entry is not None:
            pod = entry.pod
        elif pod is not None:
            self._told_gone(key, pod, happened)
        if pod is None or not any(item.id.id == key[1] for item in pod.sandboxes):
            if entry is not None:
                self._end(entry, happened)
            return
        self._end_pod(pod.id, happened)

    def _end_pod(self, uid: str, happened: float) -> None:
        """Every report of pod ``uid`` ends at ``happened`` (its sandbox was deleted), the UID
        last."""
        own: Key = ("uid", uid)
        ending = [key for key in self._reported_by_uid.get(uid, ()) if key != own]
        for other in [*ending, own] if own in self._reported else ending:
            self._end(self._reported[other], happened)

    def settle(
        self, uid: str | None, listed: PodList | Pod | None, began: float, now: float
    ) -> None:
        """A call begun at wall time ``began`` answered ``listed``: a relist of pod ``uid``
        (its pod, or None: gone), or a full listing (``uid`` None). Every report of a key it
        does not list there, whose last event came before the call began, ends at ``now``:
        the call saw it gone. O(that pod's reports) for a relist, O(all reports) for a full
        listing (which reads every pod anyway)."""
        if not self._reported:
            return
        if uid is None:
            candidates = list(self._reported.values())
        else:
            candidates = [self._reported[key] for key in self._reported_by_uid.get(uid, ())]
        for entry in candidates:
            if entry.reported >= began:
                continue
            holder = _holder(listed, entry.key)
            if holder is None or holder.id != entry.pod.id:
                self._end(entry, now)
                self._unlisted[entry.key] = None  # a view's word, weaker than an event's
                while len(self._unlisted) > self.departed_max:
                    del self._unlisted[next(iter(self._unlisted))]
        self.prune(now)

    def _end(self, entry: Reported, until: float) -> None:
        """The report ``entry`` ends at ``until`` (never before it began): remembered as a
        release."""
        self._unreport(entry)
        until = max(until, entry.held_from)
        self._append(Holding(entry.key, entry.pod, entry.held_from, until, entry.cost))
        self.bytes += entry.cost

    def _unreport(self, entry: Reported) -> None:
        del self._reported[entry.key]
        self.bytes -= entry.cost
        keys = self._reported_by_uid[entry.pod.id]
        del keys[entry.key]
        if not keys:
            del self._reported_by_uid[entry.pod.id]

    def _unindex(self, key: Key) -> None:
        """Drop a container key from the prefix index when nothing remembers it any more."""
        if key[0] == "container_id" and key not in self._holdings and key not in self._reported:
            self._ids.discard(key[1])

    def prune(self, now: float) -> None:
        """Forget releases older than ``departed_for``; then, past ``departed_max`` keys or
        ``departed_bytes``, the oldest releases, and past them the oldest reports."""
        released = self._released
        horizon = now - self.departed_for
        while released and released[0].held_until < horizon:
            self._forget(released.popleft())
        while len(self) > self.departed_max or self.bytes > self.departed_bytes:
            if released:
                self._forget(released.popleft())
            else:
                oldest = next(iter(self._reported.values()))
                self._unreport(oldest)
                self._unindex(oldest.key)
                self.forgotten += 1

    def _release(self, key: Key, pod: Pod, now: float, cost: int) -> None:
        """``pod`` stopped holding ``key`` at ``now``, or earlier when an event said so."""
        start = created_seconds(pod) or self._created.get(pod.id, 0.0)  # a listing without
        # the pod's sandbox (the ready view's, while it is not ready) has no creation time
        told = self._gone.pop(key, None) if self._gone else None
        if told is not None and told[0] == pod.id and start <= told[1] <= now:
            now = told[1]
        releases = self._holdings.get(key)
        again = self._again.pop(key, False) is None  # listed again since: a holding of its own
        ended = releases and releases[-1].pod.id == pod.id and releases[-1].held_until >= start
        if ended and not again:
            return  # its events ended this holding already (a report, then a listing)
        self._append(Holding(key, pod, start, now, cost))
        self.bytes += cost

    def _append(self, holding: Holding) -> None:
        key = holding.key
        self._released.append(holding)
        holdings = self._holdings.get(key)
        if holdings is None:
            self._holdings[key] = [holding]
            if key[0] == "container_id":
                self._ids.add(key[1])
        else:
            holdings.append(holding)

    def _forget(self, holding: Holding) -> None:
        """Drop ``holding``, the oldest release of all and so the oldest of its key."""
        key = holding.key
        holdings = self._holdings[key]
        assert holdings[0] is holding, "releases of one key out of order"
        del holdings[0]
        self.bytes -= holding.cost
        if not holdings:
            del self._holdings[key]
            self._unindex(key)
        self.forgotten += 1

    # -- finding --------------------------------------------------------------------------------
    def find(self, pods: PodList | None, key: Key, at: float | None, now: float) -> Found | None:
        """The pod holding ``key`` (docs/architecture.md §3 rule 12): in ``pods`` (the current
        snapshot) first, then the keys events report held, then the keys released (none older
        than ``departed_for`` at wall time ``now``); with ``at``, the holding that contains
        ``at``. A container key may be a unique prefix: AmbiguousContainerIDError when it names
        several IDs, ValueError when it is shorter than ``MIN_PREFIX`` and names none whole."""
        self.prune(now)
        if key[0] == "container_id":
            whole = self._whole_id(pods, key[1])
            if whole is None:
                return None
            key = ("container_id", whole)
        current = _in_snapshot(pods, key) if pods is not None else None
        told = self._reported.get(key)
        if at is None:
            if current is not None:
                return Found(current, _item(current, key), None)
            if told is not None:
                return Found(told.pod, _item(told.pod, key), None)
            holdings = self._holdings.get(key)
            return None if not holdings else self._found(pods, holdings[-1])
        return self._found_at(pods, key, at, current, told)

    def _found_at(
        self,
        pods: PodList | None,
        key: Key,
        at: float,
        current: Pod | None,
        told: Reported | None,
    ) -> Found | None:
        """The holding of ``key`` that contains ``at``, the newest begun of several: the
        snapshot's, the one events report, or a release."""
        since = created_seconds(current) if current is not None else math.inf
        if since > at:
            since = -math.inf  # the snapshot's holder did not hold it yet
        best = self._newest_at(key, at, since, told)
        if isinstance(best, Reported):
            return Found(best.pod, _item(best.pod, key), None)
        if best is not None:
            return self._found(pods, best)
        if current is not None and since != -math.inf:
            return Found(current, _item(current, key), None)
        return None

    def _newest_at(
        self, key: Key, at: float, since: float, told: Reported | None
    ) -> Holding | Reported | None:
        """Of the holding events report (``told``) and the releases of ``key``, the one that
        contains ``at`` and began the latest after ``since`` (the snapshot holder's start, which
        a release begun with it wins over: docs/architecture.md §3 rule 12); None when none
        does. Of releases that began together, the oldest."""
        best: Holding | Reported | None = None
        if told is not None and since < told.held_from <= at:
            best, since = told, told.held_from
        for held in self._holdings.get(key, ()):
            if not held.held_from <= at < held.held_until:
                continue
            if since < held.held_from or (best is None and since == held.held_from):
                best, since = held, held.held_from
        return best

    def _found(self, pods: PodList | None, held: Holding) -> Found:
        """``held`` as an answer: its pod departed unless ``pods`` lists the pod's UID or
        events report it held, else when its UID's last release (at or after the key's)
        says."""
        pod = held.pod
        departed_at: float | None = None
        listed = pods is not None and pods.by_uid(pod.id) is not None
        if not listed and ("uid", pod.id) not in self._reported:
            departed_at = held.held_until
            if held.key[0] != "uid":
                releases = self._holdings.get(("uid", pod.id))
                if releases and releases[-1].held_until >= held.held_until:
                    departed_at = releases[-1].held_until
        return Found(pod, _item(pod, held.key), departed_at, held.held_until)

    def _whole_id(self, pods: PodList | None, ident: str) -> str | None:
        """The whole container or sandbox ID ``ident`` names: itself when the snapshot or the
        remembered keys hold it, else the one ID of both that starts with it; None when none
        does."""
        if ("container_id", ident) in self._holdings or ("container_id", ident) in self._reported:
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


def _holder(listed: PodList | Pod | None, key: Key) -> Pod | None:
    """The pod a call's answer shows holding ``key``: a listing's, or a relisted pod."""
    if isinstance(listed, PodList):
        return _in_snapshot(listed, key)
    return listed if listed is not None and key in _keys_of(listed) else None


def _in_snapshot(pods: PodList, key: Key) -> Pod | None:
    kind, value = key
    if kind == "uid":
        return pods.by_uid(value)
    if kind == "ip":
        return pod_at_ip(pods, value)
    found = pods.by_exact_id(value)
    return None if found is None else found[0]
