"""Which container, which pod: a process's cgroup read from ``/proc``, safely under PID reuse.

``container_of_pid(pid)`` reads ``/proc/<pid>/cgroup`` and returns the container ID in it (bare,
64 lower-case hex digits), None for a process in no container, ``ProcessLookupError`` when there
is no such process. ``cgroup_owner(pid)`` returns the whole finding, ``CgroupOwner``: the
container ID and the pod UID. ``read_owner`` gives it with the process's ``ProcessIdentity``,
``refresh_time`` the process's start on a caller's clock. This module only reads ``/proc``
(docs/architecture.md §2); the lookup's policy is ``podcache.cache.pids``.

The paths understood, the answer's rule, the bounds on hostile contents and the identity under
PID reuse are §9 rules 1-6. Beyond them: a pod segment may sit under any kubelet
``cgroup_parent``, and its UID is returned with dashes; a sandbox's (pause) processes are found
as a container's, by the ID the runtime lists as the sandbox's; segments that match no pattern
(``..`` from a cgroup namespace, ``init.scope``, a path's `` (deleted)`` suffix) are skipped, so
paths seen from inside a cgroup namespace are understood too.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass

from podcache.errors import PodcacheError

__all__ = [
    "CLOCK_TICKS",
    "MAX_CGROUP_BYTES",
    "MAX_STAT_BYTES",
    "MAX_UPTIME_BYTES",
    "PID_MAX",
    "CgroupOwner",
    "ProcFormatError",
    "ProcessIdentity",
    "cgroup_owner",
    "check_pid",
    "container_of_pid",
    "owner_from_cgroup",
    "read_identity",
    "read_owner",
    "refresh_time",
    "uptime",
]

PID_MAX = 4_194_304
"""Linux's largest ``pid_max`` (2**22): PIDs are 1 to this, inclusive."""
MAX_CGROUP_BYTES = 64 * 1024
"""Most bytes read of ``/proc/<pid>/cgroup`` (one line per hierarchy, each under PATH_MAX)."""
MAX_STAT_BYTES = 4096
"""Most bytes read of ``/proc/<pid>/stat`` (about 300 in practice)."""
MAX_UPTIME_BYTES = 256
"""Most bytes read of ``/proc/uptime``."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
"""Ticks per second of ``/proc/<pid>/stat``'s start time (USER_HZ, 100 on Linux)."""

_START_FIELD = 22 - 3
"""Field 22 (starttime), counted from field 3 (state), the first after ``comm``'s ``)``."""

_HEX64 = rb"[0-9a-f]{64}"
_UUID = rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}"
_UUID_SYSTEMD = rb"[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}|[0-9a-f]{32}"
_CONTAINER_SEGMENT = re.compile(
    rb"(?:crio-)?(" + _HEX64 + rb")|(?:cri-containerd|crio|docker|libpod)-(" + _HEX64 + rb")\.scope"
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


def _pod_of_segment(segment: bytes) -> str | None:
    """The pod UID a cgroup path segment names (systemd's slice with ``_`` for ``-``), or
    None."""
    pod = _POD_SEGMENT.fullmatch(segment) or _POD_SLICE.fullmatch(segment)
    return None if pod is None else pod[1].replace(b"_", b"-").decode("ascii")


def _owner_of_path(path: bytes) -> CgroupOwner:
    """docs/architecture.md §9 rules 1-2, for one path."""
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
            pod_uid = _pod_of_segment(segment)
    if pod_uid is not None:
        return CgroupOwner(None, pod_uid, outer)
    return CgroupOwner(outer, None)


def owner_from_cgroup(data: bytes) -> CgroupOwner:
    """The owner named by the text of a ``/proc/<pid>/cgroup`` file: the first line naming a
    container, else the first naming a pod, else nobody (docs/architecture.md §9 rule 1)."""
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


def read_owner(pid: int, proc_root: str) -> tuple[ProcessIdentity, CgroupOwner]:
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
    """The container ID and pod UID in the process's cgroup (see ``CgroupOwner``);
    ProcessLookupError when there is no such process (or it exited while being read)."""
    return read_owner(check_pid(pid), os.fspath(proc_root))[1]


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
    time on was fetched after the process started. Never later than ``now``. A suspend after
    the process started makes it earlier on ``time.monotonic`` by the time suspended (§9 rule
    6).
    """
    age = uptime(proc_root) - (identity.start_ticks + 1) / CLOCK_TICKS
    return now - max(age, 0.0)
