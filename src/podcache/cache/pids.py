"""Which pod runs a process, through a cache: the PID lookup's policy (docs/architecture.md §9).

``PodLookup`` reads the process once (through ``OwnerMemo``) and matches it against snapshots;
the policy is ``_steps``, carried out by ``lookup_pod`` and ``alookup_pod``. ``OwnerMemo``'s key
``(proc root, pid, start ticks)`` is shared by two processes only if the PID space wraps within
one clock tick; it keeps only owners naming a container (a process in no container may still
be on its way into one, as ``runc init`` is). Both memos are bounded and start over when full.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, cast

from podcache.model import Container, Pod, PodList
from podcache.procs import (
    CgroupOwner,
    ProcessIdentity,
    check_pid,
    read_identity,
    read_owner,
    refresh_time,
)

__all__ = [
    "MEMO_SIZE",
    "UNKNOWN_FOR",
    "UNKNOWN_MAX",
    "AsyncPodProbe",
    "LookupOutcome",
    "LookupResult",
    "OwnerMemo",
    "PodLookup",
    "PodProbe",
    "PodProcess",
    "UnknownIDs",
    "alookup_pod",
    "async_probe",
    "lookup_pod",
    "probe_key",
    "sync_probe",
]

MEMO_SIZE = 8192
"""Most owners ``OwnerMemo`` keeps (then it starts over: bounded memory)."""
UNKNOWN_FOR = 10.0
"""Seconds an ID the runtime said it lists nothing for is remembered (``UnknownIDs``): lookups
naming it meanwhile ask the runtime nothing."""
UNKNOWN_MAX = 4096
"""Most IDs ``UnknownIDs`` remembers (then it starts over: bounded memory)."""


@dataclass(frozen=True, slots=True, repr=False)
class PodProcess:
    """A process's pod and container, as ``pod_of_pid`` found them (immutable).

    ``container`` is the container or sandbox (pause) the process runs in, None when its
    cgroup names the pod but no container. ``pid`` is the process's PID as asked.
    """

    pod: Pod
    container: Container | None
    pid: int

    def __repr__(self) -> str:
        container = None if self.container is None else self.container.id.qualified
        return f"PodProcess(pid={self.pid}, pod={self.pod.id!r}, container={container!r})"


# -- memo -------------------------------------------------------------------------------------


class OwnerMemo:
    """Owners of processes already read, by ``(proc root, pid, start ticks)``; bounded. Safe
    across threads (single dict operations) and tasks."""

    __slots__ = ("_owners", "limit")

    def __init__(self, limit: int = MEMO_SIZE) -> None:
        self.limit = limit
        self._owners: dict[tuple[str, int, int], CgroupOwner] = {}

    def __len__(self) -> int:
        return len(self._owners)

    def get(self, proc_root: str, identity: ProcessIdentity) -> CgroupOwner | None:
        return self._owners.get((proc_root, identity.pid, identity.start_ticks))

    def put(self, proc_root: str, identity: ProcessIdentity, owner: CgroupOwner) -> None:
        if owner.container_id is None:
            return
        if len(self._owners) >= self.limit:
            self._owners = {}
        self._owners[(proc_root, identity.pid, identity.start_ticks)] = owner

    def forget(self, proc_root: str, identity: ProcessIdentity) -> None:
        self._owners.pop((proc_root, identity.pid, identity.start_ticks), None)


class UnknownIDs:
    """IDs the runtime listed nothing for when asked (a container ID, or a pod UID), each with
    the clock reading it was asked at: remembered ``keep_for`` seconds, at most ``limit`` of
    them (then it starts over; §9 rule 7). Single dict operations: safe across threads and
    tasks."""

    __slots__ = ("_asked", "keep_for", "limit")

    def __init__(self, limit: int = UNKNOWN_MAX, keep_for: float = UNKNOWN_FOR) -> None:
        self.limit = limit
        self.keep_for = keep_for
        self._asked: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._asked)

    def holds(self, ident: str, now: float) -> bool:
        """Whether ``ident`` was found unknown less than ``keep_for`` seconds before ``now``."""
        asked = self._asked.get(ident)
        return asked is not None and now - asked < self.keep_for

    def add(self, ident: str, now: float) -> None:
        if len(self._asked) >= self.limit:
            self._asked = {}
        self._asked[ident] = now


# -- the lookup through a cache ---------------------------------------------------------------

LookupOutcome = Literal["found", "pod_only", "not_in_container", "unknown", "no_process"]
"""How a lookup ended (see ``PodLookup.OUTCOMES``)."""


class PodLookup:
    """One ``pod_of_pid``: the process read once, then matched against snapshots.

    I/O only in ``__init__`` (the process's identity, and its cgroup unless memoised) and in
    ``refresh_time`` (uptime); the drivers do the waiting. ``outcome`` says how it ended.
    """

    OUTCOMES = ("found", "pod_only", "not_in_container", "unknown", "no_process")
    """found: container or sandbox known; pod_only: the pod known, no container in the path;
    not_in_container: the path names neither; unknown: names one the runtime does not list;
    no_process: no such process (ProcessLookupError)."""

    __slots__ = ("identity", "outcome", "owner", "proc_root")

    def __init__(self, pid: int, proc_root: str, memo: OwnerMemo) -> None:
        check_pid(pid)
        proc_root = os.fspath(proc_root)
        self.proc_root = proc_root
        self.outcome: LookupOutcome = "no_process"
        identity = read_identity(pid, proc_root)
        owner = memo.get(proc_root, identity)
        if owner is None:
            identity, owner = read_owner(pid, proc_root)
            memo.put(proc_root, identity, owner)
        self.identity = identity
        self.owner = owner
        self.outcome = "unknown" if owner.container_id or owner.pod_uid else "not_in_container"

    @property
    def in_container(self) -> bool:
        """The cgroup names a container or a pod: worth a look in the runtime's pods."""
        return self.outcome != "not_in_container"

    def match(self, pods: PodList) -> PodProcess | None:
        """The process's pod in ``pods``, or None; sets ``outcome``.

        A container found in a pod whose UID differs from the one in the path is no answer:
        the path and the runtime disagree, and a wrong pod is worse than none.
        """
        owner = self.owner
        pid = self.identity.pid
        if owner.outer_id is not None:
            outer = pods.by_container_id(owner.outer_id)
            if outer is not None:
                self.outcome = "found"
                return PodProcess(outer[0], outer[1], pid)
        if owner.container_id is not None:
            found = pods.by_container_id(owner.container_id)
            if found is None or (owner.pod_uid is not None and found[0].id != owner.pod_uid):
                self.outcome = "unknown"
                return None
            self.outcome = "found"
            return PodProcess(found[0], found[1], pid)
        if owner.pod_uid is not None:
            pod = pods.by_uid(owner.pod_uid)
            if pod is not None:
                self.outcome = "pod_only"
                return PodProcess(pod, None, pid)
            self.outcome = "unknown"
        return None

    def refresh_time(self, now: float) -> float:
        """``refresh_time`` for this process, given the cache clock's ``now``."""
        return min(refresh_time(self.identity, self.proc_root, now), now)


class _SyncCache(Protocol):
    @property
    def cache_time(self) -> float | None: ...
    def get_pods(self, *, timeout: float | None = None) -> PodList: ...
    def force_update_if_older(
        self, min_expected_cache_time: float, *, timeout: float | None = None
    ) -> None: ...


class _AsyncCache(Protocol):
    @property
    def cache_time(self) -> float | None: ...
    def get_pods(self, *, timeout: float | None = None) -> Awaitable[PodList]: ...
    def force_update_if_older(
        self, min_expected_cache_time: float, *, timeout: float | None = None
    ) -> Awaitable[None]: ...


_MEMO = OwnerMemo()
"""The process-wide memo of owners (facts about processes, shared by every cache)."""
_UNKNOWN = UnknownIDs()
"""IDs found unknown by lookups given no ``unknown`` of their own (caches bring theirs)."""


@dataclass(slots=True)
class LookupResult:
    """What a lookup found, how it ended, whether it refreshed (or, with a probe, asked the
    runtime about its one container: ``probed``), and the snapshot it read."""

    process: PodProcess | None
    outcome: LookupOutcome
    refreshed: bool
    pods: PodList | None
    probed: bool = False


class PodProbe(Protocol):
    """A getter that can list one pod and find an item's pod (``podcache.cri.CRIRuntime``)."""

    def get_pod(self, uid: str, all: bool = False) -> Pod | None: ...
    def pod_uid_of(self, ident: str) -> str | None: ...


class AsyncPodProbe(Protocol):
    """The asyncio twin of ``PodProbe`` (``podcache.cri.AsyncCRIRuntime``)."""

    async def get_pod(self, uid: str, all: bool = False) -> Pod | None: ...
    async def pod_uid_of(self, ident: str) -> str | None: ...


class _AllProbe:
    """A probe that lists a pod as ``get_pods(True)`` does (a cache with ``all=True``); over
    an asyncio probe its calls return the awaitables the probe's do."""

    def __init__(self, probe: Any) -> None:
        self._probe = probe

    def get_pod(self, uid: str, all: bool = True) -> Any:
        return self._probe.get_pod(uid, True)

    def pod_uid_of(self, ident: str) -> Any:
        return self._probe.pod_uid_of(ident)


def _probe(getter: object, all_view: bool, coroutines: bool) -> Any:
    """``getter`` as a probe when it offers ``get_pod`` and ``pod_uid_of``, coroutines or plain
    methods as asked; with ``all_view``, one whose ``get_pod`` lists the pod as
    ``get_pods(True)`` does."""
    if all(
        callable(method := getattr(getter, name, None))
        and inspect.iscoroutinefunction(method) == coroutines
        for name in ("get_pod", "pod_uid_of")
    ):
        return _AllProbe(getter) if all_view else getter
    return None


def sync_probe(getter: object, all_view: bool = False) -> PodProbe | None:
    """``_probe`` over plain methods."""
    return cast(PodProbe | None, _probe(getter, all_view, coroutines=False))


def async_probe(getter: object, all_view: bool = False) -> AsyncPodProbe | None:
    """``_probe`` over coroutines."""
    return cast(AsyncPodProbe | None, _probe(getter, all_view, coroutines=True))


def probe_key(lookup: PodLookup) -> str:
    """What a probe asks about: the container the cgroup names, else its pod."""
    owner = lookup.owner
    key = owner.container_id or owner.pod_uid
    assert key is not None  # in_container
    return key


def _probe_answer(
    lookup: PodLookup, pod: Pod | None, key: str, now: float, unknown: UnknownIDs
) -> PodProcess | None:
    """The probe's pod matched against the process; an ID it does not hold is remembered."""
    found = None if pod is None else lookup.match(PodList([pod]))
    if found is None:
        lookup.outcome = "unknown"
        unknown.add(key, now)
    return found


def _needs_refresh(lookup: PodLookup, cache_time: float | None, now: float) -> float | None:
    """The time to refresh to, when the snapshot predates the process; else None."""
    target = lookup.refresh_time(now)
    if cache_time is not None and cache_time >= target:
        return None
    return target


def _just_after(cache_time: float | None) -> float:
    """A need any refresh begun after the snapshot meets: it joins the refresh in flight, or
    starts one (which, begun now, also meets the process's start)."""
    return -math.inf if cache_time is None else math.nextafter(cache_time, math.inf)


def _older(cache_time: float | None, target: float) -> bool:
    return cache_time is None or cache_time < target


class _GetPods(NamedTuple):
    """Step: the cache's pods (``get_pods``)."""


class _Refresh(NamedTuple):
    """Step: a refresh begun after ``target`` (``force_update_if_older``)."""

    target: float


class _PodUidOf(NamedTuple):
    """Step: the probe's pod UID for a container ID."""

    key: str


class _GetPod(NamedTuple):
    """Step: the probe's pod by UID, the runtime asked about it alone."""

    uid: str


_Step = _GetPods | _Refresh | _PodUidOf | _GetPod
_Steps = Generator[_Step, Any, LookupResult]


def _steps(
    lookup: PodLookup,
    *,
    cache_time: Callable[[], float | None],
    clock: Callable[[], float],
    memo: OwnerMemo,
    probing: bool,
    unknown: UnknownIDs,
) -> _Steps:
    """The lookup's policy, no I/O: it yields each step it needs done and is sent the step's
    result; it returns the ``LookupResult``."""
    if not lookup.in_container:
        return LookupResult(None, lookup.outcome, False, None)
    pods: PodList = yield _GetPods()
    found = lookup.match(pods)
    if found is not None:
        return LookupResult(found, lookup.outcome, False, pods)
    fetched, now = cache_time(), clock()
    target = _needs_refresh(lookup, fetched, now)
    if target is None:
        memo.forget(lookup.proc_root, lookup.identity)
        return LookupResult(None, lookup.outcome, False, pods)
    if probing:
        memo.forget(lookup.proc_root, lookup.identity)
        key = probe_key(lookup)
        if unknown.holds(key, now):
            return LookupResult(None, "unknown", False, pods)
        uid = lookup.owner.pod_uid or (yield _PodUidOf(key))
        pod = None if uid is None else (yield _GetPod(uid))
        found = _probe_answer(lookup, pod, key, now, unknown)
        return LookupResult(found, lookup.outcome, False, pods, probed=True)
    # First the refresh in flight, if any (or a new one, which then starts after ``target``).
    yield _Refresh(_just_after(fetched))
    found = lookup.match(pods := (yield _GetPods()))
    if found is None and _older(cache_time(), target):
        yield _Refresh(target)
        found = lookup.match(pods := (yield _GetPods()))
    if found is None:
        memo.forget(lookup.proc_root, lookup.identity)
    return LookupResult(found, lookup.outcome, True, pods)


def _steps_of(  # noqa: PLR0917 -- the drivers' own arguments, handed over
    lookup: PodLookup,
    cache: _SyncCache | _AsyncCache,
    clock: Callable[[], float],
    memo: OwnerMemo,
    probe: PodProbe | AsyncPodProbe | None,
    unknown: UnknownIDs | None,
) -> _Steps:
    return _steps(
        lookup,
        cache_time=lambda: cache.cache_time,
        clock=clock,
        memo=memo,
        probing=probe is not None,
        unknown=_UNKNOWN if unknown is None else unknown,
    )


def _action(
    step: _Step,
    cache: Any,
    probe: Any,
    timeout: float | None,
) -> Callable[[], Any]:
    """What carries ``step`` out, called by the sync driver (a value) or awaited by the async
    one (the same methods return awaitables there); a refresh's result is not used."""
    match step:
        case _GetPods():
            return functools.partial(cache.get_pods, timeout=timeout)
        case _Refresh(target):
            return functools.partial(cache.force_update_if_older, target, timeout=timeout)
        case _PodUidOf(key):
            return functools.partial(probe.pod_uid_of, key)
        case _GetPod(uid):
            return functools.partial(probe.get_pod, uid)


def lookup_pod(
    cache: _SyncCache,
    clock: Callable[[], float],
    pid: int,
    *,
    proc_root: str = "/proc",
    timeout: float | None = None,
    memo: OwnerMemo = _MEMO,
    probe: PodProbe | None = None,
    unknown: UnknownIDs | None = None,
) -> LookupResult:
    """``RuntimeCache.pod_of_pid`` (docs/architecture.md §9 rules 6-7): with a ``probe`` (a
    getter with ``get_pod``), a missing container is asked about alone (an ID it does not list
    remembered in ``unknown``); without one, at most one refresh is started. ProcessLookupError
    when there is no such process."""
    steps = _steps_of(PodLookup(pid, proc_root, memo), cache, clock, memo, probe, unknown)
    result: Any = None
    while True:
        try:
            step = steps.send(result)
        except StopIteration as done:
            return cast(LookupResult, done.value)
        result = _action(step, cache, probe, timeout)()


async def alookup_pod(
    cache: _AsyncCache,
    clock: Callable[[], float],
    pid: int,
    *,
    proc_root: str = "/proc",
    timeout: float | None = None,
    memo: OwnerMemo = _MEMO,
    probe: AsyncPodProbe | None = None,
    unknown: UnknownIDs | None = None,
) -> LookupResult:
    """The asyncio twin of ``lookup_pod``: the same steps (``_steps``), awaited (the ``/proc``
    reads are small and never block on a disk, so they run on the loop)."""
    steps = _steps_of(PodLookup(pid, proc_root, memo), cache, clock, memo, probe, unknown)
    result: Any = None
    while True:
        try:
            step = steps.send(result)
        except StopIteration as done:
            return cast(LookupResult, done.value)
        result = await _action(step, cache, probe, timeout)()
