"""Which container, which pod: a process's cgroup read from ``/proc``, safely under PID reuse.

``container_of_pid(pid)`` reads ``/proc/<pid>/cgroup`` and returns the container ID in it (bare,
64 lower-case hex digits), None for a process in no container, ``ProcessLookupError`` when there
is no such process. ``cgroup_owner(pid)`` returns the whole finding, ``CgroupOwner``: the
container ID and the pod UID (a path can name a pod and no container, e.g. CRI-O's conmon,
which runs in the pod's cgroup but in no container). ``PodLookup`` and ``lookup_pod`` /
``alookup_pod`` are what ``RuntimeCache.pod_of_pid`` and its asyncio twin run.

Paths understood
----------------
Every line of the file is ``hierarchy-ID:controllers:path`` (cgroup v1, one line per hierarchy)
or ``0::path`` (cgroup v2, also the last line of a v1 "hybrid" file). Each path is split into
segments and read root first:

* a pod segment: ``pod<uid>`` (cgroupfs driver, under any kubelet ``cgroup_parent``:
  ``/kubepods/burstable/pod<uid>``) or a systemd slice whose last dash-separated word is
  ``pod<uid with _ for ->`` (``kubepods-burstable-pod<uid>.slice``). ``<uid>`` is a UUID, or 32
  hex digits (the kubelet's static pods); it is returned with dashes.
* a container segment: 64 hex digits (cgroupfs driver), or a systemd scope
  ``cri-containerd-<64 hex>.scope``, ``crio-<64 hex>.scope``, ``docker-<64 hex>.scope`` or
  ``libpod-<64 hex>.scope``. A sandbox's (pause) processes are found the same way: its ID is
  what the runtime lists as the sandbox's. CRI-O's ``crio-conmon-<id>.scope`` is no container.

The rule (one answer, never a list to pick from): the pod is the shallowest pod segment; the
container is the shallowest container segment below it (with no pod segment, the shallowest
container segment at all). Everything a container may create lies below its own segment
(``.../<id>/init.scope``, a systemd inside it, a nested runtime's ``.../<id>/docker/<id2>``), so
it never changes the answer; a node that is itself a container (kind:
``/docker/<node id>/kubepods/...``) is above the pod and is skipped by ``container_of_pid``
(``CgroupOwner.outer_id`` keeps it: ``pod_of_pid`` answers a container above the pod when the
runtime lists it, so a container that makes ``.../<its id>/pod<uid>/<id>`` below itself is
still answered as itself, never as that pod). Lines are read in file order;
the first line naming a container wins, else the first naming a pod. Segments that match no
pattern (``..`` from a cgroup namespace, ``init.scope``, a path's `` (deleted)`` suffix) are
skipped, so paths seen from inside a cgroup namespace are understood too.

Hostile contents
----------------
The files belong to the kernel, but paths name cgroups that privileged processes may create,
so nothing in them is trusted: at most ``MAX_CGROUP_BYTES`` (``MAX_STAT_BYTES``) are read
(larger is a ``ProcFormatError``); IDs and UIDs must match their patterns exactly (ASCII,
lower-case hex, fixed lengths); lines that do not parse are skipped.

PID reuse
---------
A process is identified by ``ProcessIdentity``: its PID and its start time (``/proc/<pid>/stat``
field 22, clock ticks since boot, read after the last ``)`` so that a ``comm`` holding spaces
or parentheses cannot shift it). The identity is read before and after the cgroup; if they
differ the process exited and its PID was reused while it was read, and the answer is
``ProcessLookupError`` (never another process's cgroup). ``OwnerMemo`` remembers owners by
``(proc root, pid, start time)``; two processes share that key only if the PID space wraps
within one clock tick (10 ms). Only owners that name a container are remembered (a process in
no container may still be on its way into one, as ``runc init`` is).
"""

from __future__ import annotations

import errno
import inspect
import math
import os
import re
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol, cast

from podcache.errors import PodcacheError
from podcache.model import Container, Pod, PodList

__all__ = [
    "MAX_CGROUP_BYTES",
    "MAX_STAT_BYTES",
    "MEMO_SIZE",
    "PID_MAX",
    "UNKNOWN_FOR",
    "UNKNOWN_MAX",
    "CgroupOwner",
    "LookupOutcome",
    "LookupResult",
    "OwnerMemo",
    "PodLookup",
    "PodProcess",
    "ProcFormatError",
    "ProcessIdentity",
    "UnknownIDs",
    "alookup_pod",
    "async_probe",
    "cgroup_owner",
    "check_pid",
    "container_of_pid",
    "lookup_pod",
    "owner_from_cgroup",
    "read_identity",
    "refresh_time",
    "sync_probe",
]

PID_MAX = 4_194_304
"""Linux's largest ``pid_max`` (2**22): PIDs are 1 to this, inclusive."""
MAX_CGROUP_BYTES = 64 * 1024
"""Most bytes read of ``/proc/<pid>/cgroup`` (one line per hierarchy, each under PATH_MAX)."""
MAX_STAT_BYTES = 4096
"""Most bytes read of ``/proc/<pid>/stat`` (about 300 in practice)."""
MAX_UPTIME_BYTES = 256
"""Most bytes read of ``/proc/uptime``."""
MEMO_SIZE = 8192
"""Most owners ``OwnerMemo`` keeps (then it starts over: bounded memory)."""
UNKNOWN_FOR = 10.0
"""Seconds an ID the runtime said it lists nothing for is remembered (``UnknownIDs``): lookups
naming it meanwhile ask the runtime nothing."""
UNKNOWN_MAX = 4096
"""Most IDs ``UnknownIDs`` remembers (then it starts over: bounded memory)."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
"""Ticks per second of ``/proc/<pid>/stat``'s start time (USER_HZ, 100 on Linux)."""

_START_FIELD = 22 - 3
"""Field 22 (starttime), counted from field 3 (state), the first after ``comm``'s ``)``."""

_HEX64 = rb"[0-9a-f]{64}"
_UUID = rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}"
_UUID_SYSTEMD = rb"[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}|[0-9a-f]{32}"
_CONTAINER_SEGMENT = re.compile(
    rb"(" + _HEX64 + rb")|(?:cri-containerd|crio|docker|libpod)-(" + _HEX64 + rb")\.scope"
)
_POD_SEGMENT = re.compile(rb"pod(" + _UUID + rb")")
_POD_SLICE = re.compile(rb"(?:[^/]*-)?pod(" + _UUID_SYSTEMD + rb")\.slice")
_DELETED = b" (deleted)"


class ProcFormatError(PodcacheError, ValueError):
    """A ``/proc`` file that is too large or not in the kernel's format; names the file."""


# -- results ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """A process as opposed to a PID: ``start_ticks`` is its start, clock ticks after boot."""

    pid: int
    start_ticks: int


@dataclass(frozen=True, slots=True)
class CgroupOwner:
    """What a process's cgroup names: a bare container ID and the pod's UID, each or neither.

    ``container_id`` None with ``pod_uid`` set: the process is in the pod's cgroup but in none
    of its containers (``container_of_pid`` then returns None; ``pod_of_pid`` answers the pod
    with ``container`` None).
    """

    container_id: str | None = None
    pod_uid: str | None = None
    outer_id: str | None = None
    """The shallowest container segment above the pod segment, if any: a node that is itself a
    container (kind), or a container that made a pod-like sub-cgroup of its own. ``pod_of_pid``
    answers it when the runtime lists it (then the process is in it, whatever lies below)."""


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
        container = None if self.container is None else str(self.container.id)
        return f"PodProcess(pid={self.pid}, pod={self.pod.id!r}, container={container!r})"


# -- reading /proc ----------------------------------------------------------------------------


def check_pid(pid: object) -> int:
    """``pid`` as an int from 1 to ``PID_MAX``: TypeError for a non-int (or a bool), else
    ValueError."""
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise TypeError(f"pid must be an int, not {type(pid).__name__}")
    if not 1 <= pid <= PID_MAX:
        raise ValueError(f"pid must be from 1 to {PID_MAX}, got {pid}")
    return pid


def _read(path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path``; a longer file is a ProcFormatError. A process that
    is gone (no file, or ESRCH while reading) is a ProcessLookupError.

    Never blocks: the file is opened with ``O_NONBLOCK`` (a FIFO put in a crafted proc root
    would otherwise block ``open`` until a writer came, and the event loop with it) and must
    be a regular file (the kernel's ``/proc`` files are): a FIFO, socket, device or directory
    is a ProcFormatError, before anything is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ProcessLookupError(errno.ESRCH, "no such process", path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ProcFormatError(
                f"{path} is not a regular file (a FIFO, socket, device or directory): "
                "refusing to read it"
            )
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ProcFormatError(f"{path} is larger than {limit} bytes: refusing to parse it")
    except ProcessLookupError:
        raise ProcessLookupError(errno.ESRCH, "no such process", path) from None
    finally:
        os.close(fd)
    return b"".join(chunks)


_reader: Callable[[str, int], bytes] = _read
"""The file reader (tests swap it to change a fixture tree between two reads)."""


def _parse_start(data: bytes, path: str) -> int:
    end = data.rfind(b")")
    fields = data[end + 2 :].split(None, _START_FIELD + 1) if end >= 0 else []
    if len(fields) <= _START_FIELD:
        raise ProcFormatError(f"{path}: not a /proc/<pid>/stat line (too few fields)")
    start = fields[_START_FIELD]
    if not (start.isdigit() and len(start) <= 20):
        raise ProcFormatError(f"{path}: start time {start[:24]!r} is not a number of ticks")
    return int(start)


def read_identity(pid: int, proc_root: str = "/proc") -> ProcessIdentity:
    """The process's identity (PID and start time); ProcessLookupError when there is none."""
    path = f"{proc_root}/{pid}/stat"
    return ProcessIdentity(pid, _parse_start(_reader(path, MAX_STAT_BYTES), path))


def _owner_of_path(path: bytes) -> CgroupOwner:
    """The rule of the module docstring, for one path."""
    if path.endswith(_DELETED):
        path = path[: -len(_DELETED)]
    pod_uid: str | None = None
    outer: str | None = None
    for segment in path.split(b"/"):
        container = _CONTAINER_SEGMENT.fullmatch(segment)
        if container is not None:
            found = (container[1] or container[2]).decode("ascii")
            if pod_uid is not None:
                return CgroupOwner(found, pod_uid, outer)
            if outer is None:
                outer = found
            continue
        if pod_uid is None:
            pod = _POD_SEGMENT.fullmatch(segment) or _POD_SLICE.fullmatch(segment)
            if pod is not None:
                pod_uid = pod[1].replace(b"_", b"-").decode("ascii")
    if pod_uid is not None:
        return CgroupOwner(None, pod_uid, outer)
    return CgroupOwner(outer, None)


def owner_from_cgroup(data: bytes) -> CgroupOwner:
    """The owner named by the text of a ``/proc/<pid>/cgroup`` file (see the module docstring):
    the first line naming a container, else the first naming a pod, else nobody."""
    pod_only: CgroupOwner | None = None
    for line in data.split(b"\n"):
        parts = line.split(b":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith(b"/"):
            continue
        owner = _owner_of_path(parts[2])
        if owner.container_id is not None:
            return owner
        if pod_only is None and owner.pod_uid is not None:
            pod_only = owner
    return pod_only if pod_only is not None else CgroupOwner()


def _read_owner(pid: int, proc_root: str) -> tuple[ProcessIdentity, CgroupOwner]:
    """Identity, cgroup, identity again: the owner belongs to the process of that identity."""
    before = read_identity(pid, proc_root)
    owner = owner_from_cgroup(_reader(f"{proc_root}/{pid}/cgroup", MAX_CGROUP_BYTES))
    after = read_identity(pid, proc_root)
    if after != before:
        raise ProcessLookupError(
            errno.ESRCH,
            f"process {pid} exited while its cgroup was read (its PID now names another process)",
            f"{proc_root}/{pid}",
        )
    return before, owner


def cgroup_owner(pid: int, *, proc_root: str = "/proc") -> CgroupOwner:
    """The container ID and pod UID in the process's cgroup (see ``CgroupOwner``).

    ProcessLookupError when there is no such process (or it exited while being read).
    """
    return _read_owner(check_pid(pid), os.fspath(proc_root))[1]


def container_of_pid(pid: int, *, proc_root: str = "/proc") -> str | None:
    """The bare ID of the container (or sandbox) the process runs in, None when it runs in no
    container; ProcessLookupError when there is no such process."""
    return cgroup_owner(pid, proc_root=proc_root).container_id


def uptime(proc_root: str = "/proc") -> float:
    """Seconds since boot from ``<proc_root>/uptime`` (CLOCK_BOOTTIME, 10 ms resolution)."""
    path = f"{proc_root}/uptime"
    try:
        data = _reader(path, MAX_UPTIME_BYTES)
    except ProcessLookupError:
        raise FileNotFoundError(errno.ENOENT, "no uptime file", path) from None
    text = data.split(None, 1)[0] if data.strip() else b""
    if not re.fullmatch(rb"[0-9]{1,12}(?:\.[0-9]{1,9})?", text):
        raise ProcFormatError(f"{path}: {text[:24]!r} is not seconds since boot")
    return float(text)


def refresh_time(identity: ProcessIdentity, proc_root: str, now: float) -> float:
    """The process's start on a clock that reads ``now`` at this moment, rounded up.

    The start time is in ticks since boot (CLOCK_BOOTTIME, truncated to the tick); uptime is
    since boot too (truncated to 10 ms). The process's age is ``uptime - start``; taking the
    start one tick later and uptime as read (never later than the truth) makes the age a lower
    bound, so ``now - age`` is never earlier than the real start: a snapshot fetched from that
    time on was fetched after the process started. Never later than ``now``.

    Exact for ``time.monotonic`` (the cache's default clock) unless the machine was suspended
    after the process started (monotonic time stops then, boot time does not: the result is
    then earlier by the time suspended). Any other clock is taken to count seconds as they
    pass, and the process's age is subtracted from its ``now``.
    """
    age = uptime(proc_root) - (identity.start_ticks + 1) / CLOCK_TICKS
    return now - max(age, 0.0)


# -- memo -------------------------------------------------------------------------------------


class OwnerMemo:
    """Owners of processes already read, by ``(proc root, pid, start ticks)``; bounded.

    Safe across threads (single dict operations) and tasks. See the module docstring for why
    only owners naming a container are kept.
    """

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
    them (then it starts over). Single dict operations: safe across threads and tasks.

    Anyone who can make a cgroup can name an ID the runtime never heard of; each new ID costs
    one probe of the runtime (two small filtered list calls), and a repeated one nothing for
    ``keep_for`` seconds."""

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
            identity, owner = _read_owner(pid, proc_root)
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


def sync_probe(getter: object) -> PodProbe | None:
    """``getter`` as a probe when it offers ``get_pod`` and ``pod_uid_of`` as plain methods."""
    if all(
        callable(getattr(getter, name, None))
        and not inspect.iscoroutinefunction(getattr(getter, name))
        for name in ("get_pod", "pod_uid_of")
    ):
        return cast(PodProbe, getter)
    return None


def async_probe(getter: object) -> AsyncPodProbe | None:
    """``getter`` as a probe when it offers ``get_pod`` and ``pod_uid_of`` as coroutines."""
    if all(
        inspect.iscoroutinefunction(getattr(getter, name, None))
        for name in ("get_pod", "pod_uid_of")
    ):
        return cast(AsyncPodProbe, getter)
    return None


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
    if not lookup.in_container:
        return None
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
    """``RuntimeCache.pod_of_pid``: look; if the container is missing and the snapshot predates
    the process: with a ``probe`` (a getter with ``get_pod``), ask the runtime about that
    container only (``pod_uid_of`` unless the cgroup names the pod, then ``get_pod``; an ID it
    does not list is remembered in ``unknown`` for ``UNKNOWN_FOR`` seconds and costs nothing
    meanwhile), never relisting the node; without one, look again after the refresh in flight
    (or a new one), and only if that one began before the process, after one more. A lookup
    starts at most one refresh: the one it joins first was started by someone else, or else
    it began after the process. (Containers are listed by their runtime before any of their
    processes start, so joining first lets a burst of processes of one new container share
    one refresh.) ProcessLookupError when there is no such process."""
    lookup = PodLookup(pid, proc_root, memo)
    if not lookup.in_container:
        return LookupResult(None, lookup.outcome, False, None)
    pods = cache.get_pods(timeout=timeout)
    found = lookup.match(pods)
    if found is not None:
        return LookupResult(found, lookup.outcome, False, pods)
    cache_time = cache.cache_time
    now = clock()
    target = _needs_refresh(lookup, cache_time, now)
    if target is None:
        memo.forget(lookup.proc_root, lookup.identity)
        return LookupResult(None, lookup.outcome, False, pods)
    if probe is not None:
        memo.forget(lookup.proc_root, lookup.identity)
        unknown = _UNKNOWN if unknown is None else unknown
        key = probe_key(lookup)
        if unknown.holds(key, now):
            return LookupResult(None, "unknown", False, pods)
        uid = lookup.owner.pod_uid or probe.pod_uid_of(key)
        pod = None if uid is None else probe.get_pod(uid)
        found = _probe_answer(lookup, pod, key, now, unknown)
        return LookupResult(found, lookup.outcome, False, pods, probed=True)
    # First the refresh in flight, if any (or a new one, which then starts after ``target``).
    cache.force_update_if_older(_just_after(cache_time), timeout=timeout)
    pods = cache.get_pods(timeout=timeout)
    found = lookup.match(pods)
    if found is None and _older(cache.cache_time, target):
        cache.force_update_if_older(target, timeout=timeout)
        pods = cache.get_pods(timeout=timeout)
        found = lookup.match(pods)
    if found is None:
        memo.forget(lookup.proc_root, lookup.identity)
    return LookupResult(found, lookup.outcome, True, pods)


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
    """The asyncio twin of ``lookup_pod`` (the same steps; the ``/proc`` reads are small and
    never block on a disk, so they run on the loop)."""
    lookup = PodLookup(pid, proc_root, memo)
    if not lookup.in_container:
        return LookupResult(None, lookup.outcome, False, None)
    pods = await cache.get_pods(timeout=timeout)
    found = lookup.match(pods)
    if found is not None:
        return LookupResult(found, lookup.outcome, False, pods)
    cache_time = cache.cache_time
    now = clock()
    target = _needs_refresh(lookup, cache_time, now)
    if target is None:
        memo.forget(lookup.proc_root, lookup.identity)
        return LookupResult(None, lookup.outcome, False, pods)
    if probe is not None:
        memo.forget(lookup.proc_root, lookup.identity)
        unknown = _UNKNOWN if unknown is None else unknown
        key = probe_key(lookup)
        if unknown.holds(key, now):
            return LookupResult(None, "unknown", False, pods)
        uid = lookup.owner.pod_uid or await probe.pod_uid_of(key)
        pod = None if uid is None else await probe.get_pod(uid)
        found = _probe_answer(lookup, pod, key, now, unknown)
        return LookupResult(found, lookup.outcome, False, pods, probed=True)
    await cache.force_update_if_older(_just_after(cache_time), timeout=timeout)
    pods = await cache.get_pods(timeout=timeout)
    found = lookup.match(pods)
    if found is None and _older(cache.cache_time, target):
        await cache.force_update_if_older(target, timeout=timeout)
        pods = await cache.get_pods(timeout=timeout)
        found = lookup.match(pods)
    if found is None:
        memo.forget(lookup.proc_root, lookup.identity)
    return LookupResult(found, lookup.outcome, True, pods)
