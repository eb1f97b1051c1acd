"""Revisions, the changes between snapshots, and the history watchers read: no I/O, no clock.

Both cache drivers own one ``ChangeLog`` (through their ``FreshnessCore``) and call it under
their own mutual exclusion; they only wait and wake. The log decides everything a watcher
receives.

Theory of operation
-------------------
A snapshot's *state* is the map UID -> pod (``PodList.by_uid``: the newest of several pods with
one UID; the pod with the empty UID is one pod). ``diff`` gives the changes from one state to
the next: ``DELETED`` (the pod as it last was), then ``ADDED`` and ``MODIFIED`` (the pod as it
now is), each group oldest pod first (the order of the UID table). A converter that reuses
unchanged pods (``cri.convert``'s memo) hands the same objects from one snapshot to the next,
so most pods cost an identity check and no comparison.

Every published snapshot gets a revision: the previous one plus one when the diff is not
empty, else the same. The log keeps the changes in order, each with a *sequence number* (its
position since the log began) and the revision it brought the state to; a revision's changes
are appended together. A watcher is a ``Cursor``: the sequence number of the next change it
has not read. A read returns every change from the cursor to the end of the log (whole
revisions), so a watcher always stands at a revision boundary.

Invariants
----------
1. Revisions never decrease; consecutive published revisions differ by 0 or 1.
2. Every change with a revision greater than ``oldest`` is in the log: ``watch(since=r)``
   works exactly for ``oldest <= r <= revision``.
3. The log keeps at least the last ``history`` changes and those younger than
   ``history_age`` (but never more than ``max(history, HISTORY_CAP)`` for these two rules),
   and the changes an open watcher at most ``max_lag`` behind has not read. So it never holds
   more than ``max(history, HISTORY_CAP, max_lag)`` changes, however slow a watcher.
4. A watcher whose unread changes number more than ``max_lag`` gets ``ResyncRequiredError``
   at its next read, and is closed; otherwise a read never fails.
5. Applying a watcher's changes in order to the state at its starting revision gives the
   state at the revision of each read's last change.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Iterable

import msgspec

from podcache.errors import ResyncRequiredError
from podcache.model import Pod, PodList, pods_by_uid, with_revision

__all__ = [
    "HISTORY",
    "HISTORY_AGE",
    "HISTORY_CAP",
    "MAX_LAG",
    "ChangeLog",
    "ChangeType",
    "Cursor",
    "PodChange",
    "diff",
    "replay",
    "visible",
]

HISTORY = 1000
"""Changes kept for ``watch(since=...)`` at least (the ``history=`` default)."""
HISTORY_AGE = 300.0
"""Seconds for which changes are kept at least, up to ``HISTORY_CAP`` of them."""
HISTORY_CAP = 10_000
"""Most changes kept for their age (or by ``history``, when that is larger)."""
MAX_LAG = 10_000
"""Unread changes a watcher may have before it must resync (the ``max_lag=`` default)."""


class ChangeType(enum.StrEnum):
    """What happened to a pod between two snapshots."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


class PodChange(msgspec.Struct, frozen=True, gc=False):
    """One pod's change: ``pod`` as it now is (as it last was for ``DELETED``), and the
    ``revision`` the change brought the snapshot to. ``previous`` (a podcache addition) is the
    pod as it was before a ``MODIFIED`` change (None for the others): it lets a consumer say
    what changed, and a filtered stream decide whether the pod entered or left its view."""

    type: ChangeType
    pod: Pod
    revision: int
    previous: Pod | None = None


def _count(value: int, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {value!r}")
    if value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value!r}")
    return value


def diff(old: PodList | None, new: PodList, revision: int) -> list[PodChange]:
    """The changes from ``old``'s state to ``new``'s (None: the empty state), numbered
    ``revision``: ``DELETED``, then ``ADDED`` and ``MODIFIED`` (each oldest pod first).

    Pods are compared by identity first (a memoised converter reuses unchanged pods), by
    value only when they are different objects.
    """
    after = pods_by_uid(new)
    if old is None or not old:
        return [PodChange(ChangeType.ADDED, pod, revision) for pod in after.values()]
    before = pods_by_uid(old)
    changes: list[PodChange] = []
    kept = 0
    for uid, pod in after.items():
        was = before.get(uid)
        if was is None:
            changes.append(PodChange(ChangeType.ADDED, pod, revision))
            continue
        kept += 1
        if was is not pod and was != pod:
            changes.append(PodChange(ChangeType.MODIFIED, pod, revision, was))
    if kept == len(before):
        return changes
    deleted = [
        PodChange(ChangeType.DELETED, pod, revision)
        for uid, pod in before.items()
        if uid not in after
    ]
    return deleted + changes


def initial(pods: PodList) -> list[PodChange]:
    """``ADDED`` for every pod of ``pods``'s state, at its revision: a watch's first batch."""
    revision = pods.revision
    return [PodChange(ChangeType.ADDED, pod, revision) for pod in pods_by_uid(pods).values()]


class Cursor:
    """One watcher's place in the log.

    ``next_seq``: the sequence number of the first change it has not read; ``revision``: the
    revision its state reaches after what it has read; ``pending``: a first batch not yet
    read (the snapshot's pods, for a watch opened without ``since``); ``open``: False once it
    was closed or told to resync.
    """

    __slots__ = ("next_seq", "open", "pending", "revision")

    def __init__(self, next_seq: int, revision: int, pending: list[PodChange]) -> None:
        self.next_seq = next_seq
        self.revision = revision
        self.pending = pending
        self.open = True


class ChangeLog:
    """The revision, the last published snapshot, the change history and the open watchers.

    ``history``/``history_age``/``max_lag`` as in the module docstring. Counters for metrics:
    ``changes`` (published), ``sent`` (handed to watchers), ``resyncs`` (every
    ``ResyncRequiredError``), ``lagged`` (of which: watchers too far behind).
    """

    def __init__(
        self,
        *,
        history: int = HISTORY,
        history_age: float = HISTORY_AGE,
        max_lag: int = MAX_LAG,
    ) -> None:
        self.history = _count(history, "history", 0)
        self.max_lag = _count(max_lag, "max_lag", 1)
        if isinstance(history_age, bool) or not isinstance(history_age, int | float):
            raise TypeError(f"history_age must be seconds, not {history_age!r}")
        if not history_age >= 0:
            raise ValueError(f"history_age must be >= 0 seconds, got {history_age!r}")
        self.history_age = float(history_age)
        self.cap = max(self.history, HISTORY_CAP)
        self.revision = 0
        self.pods: PodList | None = None
        self.oldest = 0
        """Every change with a larger revision is in the log."""
        self.cursors: set[Cursor] = set()
        self._log: list[PodChange] = []
        self._at: list[float] = []  # when each change in the log was published
        self._base = 0  # sequence number of _log[0]
        self.changes = 0
        self.sent = 0
        self.resyncs = 0
        self.lagged = 0

    @property
    def head(self) -> int:
        """The sequence number the next change will get."""
        return self._base + len(self._log)

    def __len__(self) -> int:
        """Changes held."""
        return len(self._log)

    # -- publishing ----------------------------------------------------------------------------
    def publish(self, pods: PodList, now: float) -> PodList:
        """Record ``pods`` as the new snapshot (fetched or published at ``now``); returns it
        numbered with its revision (the same object unless it carried another revision)."""
        changes = diff(self.pods, pods, self.revision + 1)
        if changes:
            self.revision += 1
            self._log.extend(changes)
            self._at.extend([now] * len(changes))
            self.changes += len(changes)
            self._trim(now)
        self.pods = numbered = with_revision(pods, self.revision)
        return numbered

    def prune(self) -> int:
        """Forget the cursors closed without ``close`` (abandoned watches); how many are open."""
        closed = [cursor for cursor in self.cursors if not cursor.open]
        for cursor in closed:
            self.close(cursor)
        return len(self.cursors)

    def _trim(self, now: float) -> None:
        """Drop what invariant 3 no longer asks to keep."""
        self.prune()
        head = self.head
        young = self._base + bisect.bisect_left(self._at, now - self.history_age)
        keep_from = max(min(head - self.history, young), head - self.cap)
        for cursor in self.cursors:
            if head - cursor.next_seq <= self.max_lag:
                keep_from = min(keep_from, cursor.next_seq)
        drop = keep_from - self._base
        if drop <= 0:
            return
        self.oldest = max(self.oldest, self._log[drop - 1].revision)
        del self._log[:drop]
        del self._at[:drop]
        self._base = keep_from

    # -- watching ------------------------------------------------------------------------------
    def open(self, since: int | None) -> Cursor:
        """A new watcher: from the current snapshot (``since`` None; there must be one), or
        from the changes after revision ``since``. ResyncRequiredError when ``since`` is older
        than ``oldest`` or newer than ``revision``."""
        if since is None:
            assert self.pods is not None, "watch without since needs a published snapshot"
            cursor = Cursor(self.head, self.revision, initial(self.pods))
        else:
            if isinstance(since, bool) or not isinstance(since, int):
                raise TypeError(f"since must be an int revision or None, not {since!r}")
            if since < self.oldest or since > self.revision:
                self.resyncs += 1
                reason = (
                    "it is older than the history kept"
                    if since < self.oldest
                    else "this cache never reached it (restarted, or another cache's)"
                )
                raise ResyncRequiredError(since, self.oldest, self.revision, reason)
            start = bisect.bisect_right(self._log, since, key=_revision_of)
            cursor = Cursor(self._base + start, since, [])
        self.cursors.add(cursor)
        return cursor

    def read(self, cursor: Cursor) -> list[PodChange]:
        """Every change ``cursor`` has not read (whole revisions; [] when none), or its first
        batch. ResyncRequiredError (and the cursor is closed) when more than ``max_lag``
        are unread. A closed cursor reads []."""
        if not cursor.open:
            return []
        if cursor.pending:
            batch, cursor.pending = cursor.pending, []
            self.sent += len(batch)
            return batch
        head = self.head
        unread = head - cursor.next_seq
        if unread == 0:
            return []
        if unread > self.max_lag or cursor.next_seq < self._base:
            self.close(cursor)
            self.resyncs += 1
            self.lagged += 1
            raise ResyncRequiredError(
                cursor.revision,
                self.oldest,
                self.revision,
                f"the watcher fell {unread} changes behind (max_lag {self.max_lag})",
            )
        batch = self._log[cursor.next_seq - self._base :]
        cursor.next_seq = head
        cursor.revision = self.revision
        self.sent += len(batch)
        return batch

    def unread(self, cursor: Cursor) -> int:
        """Changes published that ``cursor`` has not read (its first batch not counted)."""
        return self.head - cursor.next_seq if cursor.open else 0

    def close(self, cursor: Cursor) -> None:
        """Forget ``cursor`` (idempotent)."""
        cursor.open = False
        cursor.pending = []
        self.cursors.discard(cursor)


def _revision_of(change: PodChange) -> int:
    return change.revision


def visible(change: PodChange, shown: Callable[[Pod], bool]) -> PodChange | None:
    """``change`` as a watcher that sees only the pods ``shown`` accepts must receive it: a
    pod that starts to be shown is ``ADDED``, one that stops is ``DELETED`` (as it now is),
    None when the watcher sees neither side. Stateless: a stream filtered this way rebuilds
    exactly the filtered states."""
    if change.type is not ChangeType.MODIFIED:
        return change if shown(change.pod) else None
    assert change.previous is not None
    before, after = shown(change.previous), shown(change.pod)
    if before and after:
        return change
    if after:
        return PodChange(ChangeType.ADDED, change.pod, change.revision)
    if before:
        return PodChange(ChangeType.DELETED, change.pod, change.revision)
    return None


def replay(state: dict[str, Pod], changes: Iterable[PodChange]) -> dict[str, Pod]:
    """``state`` (UID -> pod) with ``changes`` applied in order; the reference for tests and
    for clients that rebuild the state from a stream."""
    for change in changes:
        if change.type is ChangeType.DELETED:
            del state[change.pod.id]
        else:
            state[change.pod.id] = change.pod
    return state
