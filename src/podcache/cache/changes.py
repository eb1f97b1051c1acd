"""Revisions, the changes between snapshots, and the history watchers read: no I/O, no clock.

Both cache drivers own one ``ChangeLog`` (through their ``FreshnessCore``) and call it under
their own mutual exclusion; the log decides everything a watcher receives (docs/architecture.md
§8 rules 1-5). Each change carries a *sequence number* (its position since the log began) and
the revision it brought the state to; a watcher is a ``Cursor``, the sequence number of the
next change it has not read.

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
from itertools import compress
from operator import is_not

import msgspec

from podcache.errors import ResyncRequiredError
from podcache.model import Pod, PodList, carry_tables, pods_by_uid, with_revision

__all__ = [
    "HISTORY",
    "HISTORY_AGE",
    "HISTORY_CAP",
    "MAX_LAG",
    "ChangeLog",
    "ChangeType",
    "Cursor",
    "PodChange",
    "Tracker",
    "diff",
    "getter_order",
    "moved",
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
    ``revision``: ``DELETED`` (by UID), then ``ADDED`` and ``MODIFIED`` (oldest pod first).

    The plain definition, from both snapshots' UID tables: ``Tracker`` computes the same
    changes without building them, and is checked against this.
    """
    after = pods_by_uid(new)
    if old is None or not old:
        return [PodChange(ChangeType.ADDED, pod, revision) for pod in after.values()]
    before = pods_by_uid(old)
    if before is after:
        return []
    was_of = before.get
    changes: list[PodChange] = []
    added = 0
    for pod in compress(after.values(), map(is_not, map(was_of, after.keys()), after.values())):
        was = was_of(pod.id)
        if was is None:
            added += 1
            changes.append(PodChange(ChangeType.ADDED, pod, revision))
        elif was != pod:
            changes.append(PodChange(ChangeType.MODIFIED, pod, revision, was))
    if len(before) == len(after) - added:  # every UID of before is still there
        return changes
    gone = sorted(before.keys() - after.keys())
    return [PodChange(ChangeType.DELETED, before[uid], revision) for uid in gone] + changes


SMALL = 16
"""Slices this short are matched object by object rather than split further."""


def getter_order(pod: Pod) -> tuple[int, str]:
    """A runtime getter's order: newest first, ties by UID."""
    return (-pod.created_at, pod.id)


_NEAR = (0, -1, 1, -2, 2, -3, 3)


def _near(old: tuple[Pod, ...], pivot: Pod, guess: int, a: int, b: int) -> int | None:
    """Where ``pivot`` is in ``old[a:b]`` when it is within 3 places of ``guess`` (a few
    changes shift a snapshot by a few places): pointer comparisons, no pod read."""
    for offset in _NEAR:
        at = guess + offset
        if a <= at < b and old[at] is pivot:
            return at
    return None


def moved(old: tuple[Pod, ...], new: tuple[Pod, ...]) -> tuple[list[Pod], list[Pod]]:
    """The pods of ``new`` that are not in ``old`` (arrivals) and of ``old`` not in ``new``
    (departures): by identity, except that a run of pods equal by value may count as there.

    Divide and conquer over the two tuples: a pair of slices that compare equal holds no
    change (tuple equality tests identity before value, in C: unchanged pods cost a pointer
    comparison each); otherwise the middle pod of the new slice is looked up in the old one,
    first within a few places of where it would be without changes (``_near``), else by
    bisection in the getters' order (newest first, ties by UID), and both halves are matched
    in turn. Short slices are matched object by object. The result is exact in any order
    (a pod met on both sides cancels out); the getters' order only makes it fast: about
    ``changes x log(pods)`` lookups and slices.
    """
    arrivals: list[Pod] = []
    departures: list[Pod] = []
    pending: list[_Slices] = [(0, len(old), 0, len(new))]
    while pending:
        a, b, c, d = slices = pending.pop()
        if _unchanged(old, new, slices):
            continue
        if b - a <= SMALL or d - c <= SMALL:
            _match_small(old[a:b], new[c:d], arrivals, departures)
            continue
        pending += _split(old, new, slices, arrivals)
    return _cancel_both(arrivals, departures)


_Slices = tuple[int, int, int, int]
"""``old[a:b]`` against ``new[c:d]``, as ``(a, b, c, d)``."""


def _unchanged(old: tuple[Pod, ...], new: tuple[Pod, ...], slices: _Slices) -> bool:
    """Whether the two slices hold no change. Compared only when the ends are the same objects
    (a comparison copies both slices: most slices that differ are told by their ends)."""
    a, b, c, d = slices
    return (
        b - a == d - c
        and (a == b or (old[a] is new[c] and old[b - 1] is new[d - 1]))
        and old[a:b] == new[c:d]
    )


def _match_small(
    olds: tuple[Pod, ...], news: tuple[Pod, ...], arrivals: list[Pod], departures: list[Pod]
) -> None:
    """Short slices matched by identity (id() reads no pod): an equal copy arrives and departs,
    and the caller sees its UID unchanged by value."""
    old_ids, new_ids = set(map(id, olds)), set(map(id, news))
    arrivals += [pod for pod in news if id(pod) not in old_ids]
    departures += [pod for pod in olds if id(pod) not in new_ids]


def _split(
    old: tuple[Pod, ...], new: tuple[Pod, ...], slices: _Slices, arrivals: list[Pod]
) -> list[_Slices]:
    """The middle pod of the new slice looked up in the old one (near its place, else by
    bisection in the getters' order); the two halves on each side, to match in turn."""
    a, b, c, d = slices
    middle = (c + d) // 2
    pivot = new[middle]
    at = _near(old, pivot, a + (middle - c), a, b)
    if at is None:
        at = bisect.bisect_left(old, getter_order(pivot), a, b, key=getter_order)
    if at < b and old[at] is pivot:
        return [(a, at, c, middle), (at + 1, b, middle + 1, d)]
    arrivals.append(pivot)
    return [(a, at, c, middle), (at, b, middle + 1, d)]


def _cancel_both(arrivals: list[Pod], departures: list[Pod]) -> tuple[list[Pod], list[Pod]]:
    """Out of order, a pod may be met on both sides: it stayed."""
    if arrivals and departures:
        both = {id(pod) for pod in arrivals} & {id(pod) for pod in departures}
        if both:
            arrivals = [pod for pod in arrivals if id(pod) not in both]
            departures = [pod for pod in departures if id(pod) not in both]
    return arrivals, departures


class Tracker:
    """The current state (UID -> pod) and the changes each new snapshot brings, at a cost that
    grows with the changes, not with the node (docs/architecture.md §8 rule 2).

    An arrival (``moved``) whose UID departs is ``MODIFIED`` (or nothing, when equal by value),
    an arrival alone ``ADDED``, a departure alone ``DELETED``. When a snapshot lists a UID
    twice, or an arrival's UID is still held by a pod that stays, the changes come from
    ``diff`` instead, and the fast path resumes at the next snapshot that holds each UID once.
    """

    __slots__ = ("_pods", "_unique", "state")

    def __init__(self) -> None:
        self.state: dict[str, Pod] = {}
        """UID -> pod of the last snapshot (an equal object may stand for the very one)."""
        self._pods: PodList | None = None
        self._unique = True  # the last snapshot holds each UID once

    def update(self, new: PodList, revision: int) -> list[PodChange]:
        """The changes from the last snapshot to ``new`` (numbered ``revision``); ``new``
        becomes the last."""
        old = self._pods
        changes = self._by_identity(old, new, revision) if self._unique else None
        if changes is None:
            changes = diff(old, new, revision)
            table = pods_by_uid(new)
            self.state = dict(table)
            self._unique = len(table) == len(new)
        self._pods = new
        return changes

    def replace(
        self, new: PodList, was: Pod | None, pod: Pod | None, revision: int
    ) -> list[PodChange]:
        """The changes from the last snapshot to ``new``, which is it with ``was`` (the pod its
        state holds for the UID, or None) replaced by ``pod`` (or None: gone); O(1). Falls
        back to ``update`` when the last snapshot may hold a UID twice."""
        if not self._unique or self._pods is None:
            return self.update(new, revision)
        self._pods = new
        if pod is None:
            if was is None:
                return []
            del self.state[was.id]
            return [PodChange(ChangeType.DELETED, was, revision)]
        self.state[pod.id] = pod
        if was is None:
            return [PodChange(ChangeType.ADDED, pod, revision)]
        if was == pod:
            return []
        return [PodChange(ChangeType.MODIFIED, pod, revision, was)]

    def _by_identity(
        self, old: PodList | None, new: PodList, revision: int
    ) -> list[PodChange] | None:
        """The changes, and the state updated, by identity; None (nothing updated) when the
        new snapshot may hold a UID twice."""
        arrivals, departures = moved(() if old is None else old.pods, new.pods)
        if old is not None:
            carry_tables(old, new, departures, arrivals)  # its first lookup reads no pod
        state = self.state
        leaving = {pod.id: pod for pod in departures}
        if len(leaving) != len(departures):
            return None
        coming = _arriving(arrivals, state, leaving)
        if coming is None:
            return None
        deleted = [
            PodChange(ChangeType.DELETED, pod, revision)
            for uid, pod in leaving.items()
            if uid not in coming
        ]
        changes = _added_or_modified(coming, leaving, revision)
        for change in deleted:
            del state[change.pod.id]
        state.update(coming)
        return deleted + changes


def _arriving(
    arrivals: list[Pod], state: dict[str, Pod], leaving: dict[str, Pod]
) -> dict[str, Pod] | None:
    """The pods arriving, by UID; None when a UID would be held twice (twice among them, or
    by a pod of ``state`` not leaving)."""
    coming: dict[str, Pod] = {}
    for pod in arrivals:
        uid = pod.id
        if uid in coming or (uid in state and uid not in leaving):
            return None  # a second pod with this UID
        coming[uid] = pod
    return coming


def _added_or_modified(
    coming: dict[str, Pod], leaving: dict[str, Pod], revision: int
) -> list[PodChange]:
    """Each arriving pod as a change: ADDED when no pod of its UID left, MODIFIED when the
    one that left differs (an equal one is no change)."""
    changes: list[PodChange] = []
    for uid, pod in coming.items():
        was = leaving.get(uid)
        if was is None:
            changes.append(PodChange(ChangeType.ADDED, pod, revision))
        elif was != pod:
            changes.append(PodChange(ChangeType.MODIFIED, pod, revision, was))
    return changes


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

    ``first_revision``: the revision of the empty cache (docs/architecture.md §8 rule 8);
    ``history``, ``history_age`` and ``max_lag`` as in invariant 3.
    """

    def __init__(
        self,
        *,
        history: int = HISTORY,
        history_age: float = HISTORY_AGE,
        max_lag: int = MAX_LAG,
        first_revision: int = 0,
    ) -> None:
        self.history = _count(history, "history", 0)
        self.max_lag = _count(max_lag, "max_lag", 1)
        if isinstance(history_age, bool) or not isinstance(history_age, int | float):
            raise TypeError(f"history_age must be seconds, not {history_age!r}")
        if not history_age >= 0:
            raise ValueError(f"history_age must be >= 0 seconds, got {history_age!r}")
        self.history_age = float(history_age)
        self.cap = max(self.history, HISTORY_CAP)
        self.revision = _count(first_revision, "first_revision", 0)
        self.pods: PodList | None = None
        self.oldest = self.revision
        """Every change with a larger revision is in the log."""
        self.cursors: set[Cursor] = set()
        self._tracker = Tracker()
        self._first: tuple[int, list[PodChange]] | None = None
        self._log: list[PodChange] = []
        self._at: list[float] = []  # when each change in the log was published
        self._base = 0  # sequence number of _log[0]

    @property
    def head(self) -> int:
        """The sequence number the next change will get."""
        return self._base + len(self._log)

    def __len__(self) -> int:
        """Changes held."""
        return len(self._log)

    # -- publishing ----------------------------------------------------------------------------
    def state_of(self, uid: str) -> Pod | None:
        """The pod the current state holds for ``uid`` (O(1)): the snapshot's, or one equal
        to it by value (``Tracker``)."""
        return self._tracker.state.get(uid)

    def publish(self, pods: PodList, now: float) -> tuple[PodList, list[PodChange]]:
        """Record ``pods`` as the new snapshot (fetched or published at ``now``); returns it
        numbered with its revision (the same object unless it carried another revision), and
        the changes it brought."""
        return self._append(pods, self._tracker.update(pods, self.revision + 1), now)

    def publish_pod(
        self, pods: PodList, was: Pod | None, pod: Pod | None, now: float
    ) -> tuple[PodList, list[PodChange]]:
        """Record ``pods``, the last snapshot with ``was`` replaced by ``pod`` (either None),
        as ``publish`` does, at a cost that does not grow with the node (``Tracker.replace``)."""
        return self._append(pods, self._tracker.replace(pods, was, pod, self.revision + 1), now)

    def _append(
        self, pods: PodList, changes: list[PodChange], now: float
    ) -> tuple[PodList, list[PodChange]]:
        if changes:
            self.revision += 1
            self._log.extend(changes)
            self._at.extend([now] * len(changes))
            self._trim(now)
        self.pods = numbered = with_revision(pods, self.revision)
        return numbered, changes

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
            cursor = Cursor(self.head, self.revision, self._first_batch())
        else:
            if isinstance(since, bool) or not isinstance(since, int):
                raise TypeError(f"since must be an int revision or None, not {since!r}")
            if since < self.oldest or since > self.revision:
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

    def _first_batch(self) -> list[PodChange]:
        """``ADDED`` for every pod of the current state: built once per revision and shared by
        every watch opened at it (the same objects: a consumer encoding changes memoises
        them once)."""
        cached = self._first
        if cached is None or cached[0] != self.revision:
            state = self._tracker.state.values()
            cached = self._first = (
                self.revision,
                [PodChange(ChangeType.ADDED, pod, self.revision) for pod in state],
            )
        return list(cached[1])

    def read(self, cursor: Cursor) -> list[PodChange]:
        """Every change ``cursor`` has not read (whole revisions; [] when none), or its first
        batch. ResyncRequiredError (and the cursor is closed) when more than ``max_lag``
        are unread. A closed cursor reads []."""
        if not cursor.open:
            return []
        if cursor.pending:
            batch, cursor.pending = cursor.pending, []
            return batch
        head = self.head
        unread = head - cursor.next_seq
        if unread == 0:
            return []
        if unread > self.max_lag or cursor.next_seq < self._base:
            self.close(cursor)
            raise ResyncRequiredError(
                cursor.revision,
                self.oldest,
                self.revision,
                f"the watcher fell {unread} changes behind (max_lag {self.max_lag})",
            )
        batch = self._log[cursor.next_seq - self._base :]
        cursor.next_seq = head
        cursor.revision = self.revision
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
