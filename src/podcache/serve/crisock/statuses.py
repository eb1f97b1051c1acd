"""``ContainerStatus`` and ``PodSandboxStatus`` answers kept for the CRI socket; no I/O
(docs/architecture.md §10 rules 8 and 9, the freshness rule and what stands past the period).

``StatusStore`` is told of the event stream opening and ending (on the cache's loop), of each
event's bytes (``event``, in the stream's reading thread, before any socket client sees it)
and of each answer the runtime gave (``keep``, on the socket's loop). Invariants:

1. **Only while streaming.** An answer is given only while the stream that learnt it (its
   ``epoch``) is still open; a stream's end drops every kept answer.
2. **An event ends the answers of what it names** (its container, its sandbox, each container
   status it carries), then keeps the statuses it carries as their IDs' plain answers (not a
   deleted item's). With the departed kept, an answer so ended stays, stale (never given), as
   the last known of its item, until the item's DELETED hands it to the departed.
3. **Never older than the period** (``clock() - learnt <= period``). A container's kept
   verbose answer gives its plain one; ``kept_listed`` offers, past the period, a sandbox's
   plain answer that is its status alone and a container's answer learnt under the following
   of containerd's own events (``tasks_opened`` .. ``tasks_ended``; ``task_event`` ends a
   container's answers as a CRI event does), for the caller to check against a listing.
4. **An answer that an event may have overtaken is not kept.** ``begin()`` is taken before the
   runtime is asked; ``keep`` drops the answer when an event named one of its IDs since (for
   ``RECENT_IDS`` IDs; one begun before the oldest forgotten is dropped too) or the stream
   ended or reopened; ``overtaken`` says the same of a call in flight.
5. **Bounded.** At most ``max_answers`` answers and ``max_bytes``, the oldest first; at most
   ``max_pairs`` containers' sandboxes and ``RECENT_IDS`` IDs' last events.
6. **A sandbox's answer has the runtime's shape, and its time is the answer's.**
   ``sandbox_extras`` (None until the first sandbox answer kept on a stream) says whether the
   runtime's answers carry ``containers_statuses`` and ``timestamp`` (CRI-O); an event's sandbox
   status is kept as the plain answer only when it is False (with the departed kept, as stale
   all the same). An answer with a ``timestamp`` is kept without it and given with
   ``wall_clock``; an event naming one of the containers it lists drops it.
7. **A runtime's NOT_FOUND is kept as an answer** for a whole ID (``WHOLE_ID``) under
   invariants 1, 3 and 4, dropped by an event naming the ID, given for either verbosity; at
   most ``MAX_MISSING``, the oldest first.
8. **The mirror never gives what ``kept`` would not** (§10 rule 8, "the C relay gives
   copies"). It is given, under the lock, what ``kept(key)`` gives then: when kept (``_put``)
   and when ``kept`` gave it, if the same ``_Kept`` is still picked (``kept`` reads without
   the lock: an event meanwhile wins); past the period, what ``offer_listed`` confirms. An
   ID's copies leave with ``_forget`` and ``_named``, all with ``_drop_all`` and a change in
   following containerd's own events.

Costs: ``kept`` O(1) (a stamped answer: a copy of its bytes); ``event`` O(the IDs and
statuses it carries + the answers it drops); ``keep`` O(1), a sandbox's O(its bytes), read
once; nothing walks every pod or every kept answer; with a mirror, one call into it per
answer kept, given or dropped. Thread-safe (one lock).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from podcache.serve.crisock.departedstatus import DepartedStatuses
from podcache.serve.crisock.statuswire import (
    DELETED,
    EventFacts,
    ProtobufError,
    answer_id,
    container_state,
    event_facts,
    info_fields,
    plain_answer,
    sandbox_parts,
    sandbox_state,
    stamped,
    status_answer,
)

__all__ = [
    "CONTAINER",
    "MAX_ANSWERS",
    "MAX_BYTES",
    "MAX_MISSING",
    "MAX_PAIRS",
    "RECENT_IDS",
    "SANDBOX",
    "WHOLE_ID",
    "StatusKey",
    "StatusMirror",
    "StatusStore",
    "Ticket",
]

CONTAINER, SANDBOX = "ContainerStatus", "PodSandboxStatus"
MAX_ANSWERS = 50_000
"""Kept answers at most: a verbose and a plain one of every item of a 5,000-pod node."""
MAX_BYTES = 64 * 1024 * 1024
"""Bytes of kept answers at most."""
RECENT_IDS = 65_536
"""IDs whose last event number is remembered (invariant 4)."""
MAX_MISSING = 4_096
"""NOT_FOUND answers kept at most (invariant 7)."""
WHOLE_ID = 64
"""The length of a whole container or sandbox ID (containerd's and CRI-O's): only a whole ID's
NOT_FOUND is kept, since no event names the prefix an item created later would answer to."""
MAX_PAIRS = 65_536
"""Containers whose sandbox the events told, remembered at most (the oldest told goes first:
a runtime that sends no DELETED, CRI-O, would otherwise grow the table for ever)."""


class StatusKey(NamedTuple):
    """What an answer is kept under: the method's name, the ID as asked, ``verbose``."""

    method: str
    ident: str
    verbose: bool


class StatusMirror(Protocol):
    """Where answers are copied to be given without the store (invariant 8): until
    ``fresh_until`` (the store's clock) at most, and until dropped."""

    def put(self, key: StatusKey, answer: bytes, fresh_until: float) -> bool:
        """Give ``answer`` for exactly ``key``; False when it was not kept."""
        ...

    def drop(self, ident: str) -> None:
        """Give nothing more for ``ident`` (any method, either verbosity)."""
        ...

    def clear(self) -> None:
        """Give nothing more at all."""
        ...


class Ticket(NamedTuple):
    """When an upstream call began: the stream's epoch, the last event's number, and the
    following of containerd's own events that covered it (0: none)."""

    epoch: int
    seq: int
    tasks: int = 0


@dataclass(slots=True)
class _Kept:
    answer: bytes
    learnt: float
    epoch: int
    ids: tuple[str, ...]
    stale: bool = False
    """An event named it since: never given, kept as the last known of its item (rule 9)."""
    state: int | None = None
    """The state it gives, when ``kept_listed`` may offer it past the period."""
    stamped: bool = False
    """Given with the time of the answer as its ``timestamp`` (invariant 6)."""
    tasks: int = 0
    """The following of containerd's own events it was learnt under (0: none)."""
    refused: bool = False
    """The mirror refused it (invariant 8): not offered again."""


def _last_answers(plain: _Kept | None, verbose: _Kept | None) -> tuple[bytes, bytes | None] | None:
    """The last plain answer and the last verbose one (the plain one's status with the
    verbose one's ``info``) of one item, from what is kept of it; None when nothing is."""
    try:
        if plain is not None:
            if verbose is None:
                return plain.answer, None
            return plain.answer, plain.answer + info_fields(verbose.answer)
        if verbose is not None:
            status = plain_answer(verbose.answer)
            return status, status + info_fields(verbose.answer)
    except ProtobufError:
        return (plain.answer, None) if plain is not None else None
    return None


def _listed_state(key: StatusKey, answer: bytes) -> int | None:
    """The state a listing must show for ``answer`` to stand past the period: a container's
    (any answer), a sandbox's non-verbose answer that is its status alone; else None."""
    if key.method == CONTAINER:
        return container_state(answer)
    return None if key.verbose else sandbox_state(answer)


@dataclass(slots=True)
class _Missing:
    details: str
    learnt: float
    epoch: int


class StatusStore:
    """The kept answers (invariants above); ``period`` and ``clock`` are the all view cache's;
    ``departed``: what ``--cri-keep-departed`` keeps (None: off)."""

    def __init__(
        self,
        period: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], int] = time.time_ns,
        departed: DepartedStatuses | None = None,
        sandbox_extras: bool | None = None,
        max_answers: int = MAX_ANSWERS,
        max_bytes: int = MAX_BYTES,
        max_pairs: int = MAX_PAIRS,
    ) -> None:
        self.period = period
        self.max_pairs = max_pairs
        self._clock, self._wall_clock = clock, wall_clock
        self.departed = departed
        self._told_extras = sandbox_extras
        self.sandbox_extras = sandbox_extras
        """Whether the runtime's sandbox answers carry the evented fields (invariant 6); None:
        not known yet on this stream (a value given here is kept across streams)."""
        self.max_answers, self.max_bytes = max_answers, max_bytes
        self._lock = threading.Lock()
        self._open = False
        self._epoch = 0
        self._seq = 0
        self._answers: collections.OrderedDict[StatusKey, _Kept] = collections.OrderedDict()
        self._missing: collections.OrderedDict[StatusKey, _Missing] = collections.OrderedDict()
        self._bytes = 0
        self._by_id: dict[str, set[StatusKey]] = {}
        self._sandbox_of: dict[str, str] = {}  # container -> sandbox, from events
        self._last_named: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._forgotten = 0  # the newest event number dropped from _last_named
        self._tasks = 0  # the following of containerd's own events: its number, 0 while none
        self._tasks_count = 0
        self._tasks_from = 0.0  # answers begun from then on are covered (taskevents rule 1)
        self.unreadable = 0
        """Events whose bytes could not be read (each ended every kept answer)."""
        self._mirror: StatusMirror | None = None

    # -- the stream (invariant 1) --------------------------------------------------------------
    @property
    def streaming(self) -> bool:
        """Whether answers may be given from the store at all."""
        return self._open

    def stream_opened(self) -> None:
        with self._lock:
            self._open = True
            self._epoch += 1
            self._drop_all()
            self.sandbox_extras = self._told_extras  # the runtime may have restarted

    def stream_ended(self) -> None:
        with self._lock:
            self._open = False
            self._epoch += 1
            self._drop_all()

    # -- containerd's own events (invariant 3) ----------------------------------------------
    def tasks_opened(self, settle: float) -> None:
        """A subscription to containerd's own events was asked; it covers answers begun
        ``settle`` seconds from now."""
        with self._lock:
            self._tasks_count += 1
            self._tasks = self._tasks_count
            self._tasks_from = self._clock() + settle
            self._clear_mirror()  # what a listing renewed was under the following before

    def tasks_ended(self) -> None:
        """The subscription ended: no answer is covered past the period any more."""
        with self._lock:
            self._tasks = 0
            self._clear_mirror()

    def _clear_mirror(self) -> None:
        if self._mirror is not None:
            self._mirror.clear()

    def task_event(self, ident: str) -> None:
        """containerd says the container ``ident``'s status changed with no CRI event."""
        with self._lock:
            self._seq += 1
            self._named(ident)

    def _tasks_now(self) -> int:
        """The following that covers an answer begun now (0: none)."""
        return self._tasks if self._tasks and self._clock() >= self._tasks_from else 0

    def _drop_all(self) -> None:
        if self._mirror is not None:
            self._mirror.clear()
        self._answers.clear()
        self._missing.clear()
        self._by_id.clear()
        self._bytes = 0

    # -- answers -------------------------------------------------------------------------------
    @property
    def size(self) -> tuple[int, int]:
        """Answers kept now, and their bytes."""
        return len(self._answers), self._bytes

    # -- the mirror (invariant 8) ----------------------------------------------------------
    @property
    def mirror(self) -> StatusMirror | None:
        """Where answers are copied (invariant 8); None: nowhere."""
        return self._mirror

    @property
    def monotonic(self) -> bool:
        """Whether its clock is ``time.monotonic``: only then may it be mirrored."""
        return self._clock is time.monotonic

    def mirror_to(self, mirror: StatusMirror | None) -> None:
        """Copy answers to ``mirror`` from now on (None: to none); the one it replaces and the
        new one are cleared first."""
        with self._lock:
            for each in (self._mirror, mirror):
                if each is not None:
                    each.clear()
            self._mirror = mirror

    def _offer(self, key: StatusKey, picked: tuple[_Kept, bool], answer: bytes) -> None:
        """Under the lock, ``picked`` being what ``kept(key)`` gives now as ``answer``: copy it
        to the mirror if invariant 8 allows; one the mirror refused is not offered again."""
        mirror, (held, derived) = self._mirror, picked
        if mirror is None or held.stamped or held.ids[0] != key.ident:
            return
        if derived:
            mirror.put(key, answer, held.learnt + self.period)
        elif not held.refused and not mirror.put(key, answer, held.learnt + self.period):
            held.refused = True

    def _offer_given(self, key: StatusKey, picked: tuple[_Kept, bool], answer: bytes) -> None:
        """``kept`` gave ``answer`` from ``picked``, read without the lock: copied only if the
        same answer is still what ``kept(key)`` gives (an event meanwhile wins)."""
        with self._lock:
            again = self._pick(key)
            if again is not None and again[0] is picked[0] and again[1] == picked[1]:
                self._offer(key, picked, answer)

    # -- answers -------------------------------------------------------------------------------
    def kept(self, key: StatusKey) -> bytes | None:
        """The answer to give for ``key`` now, if the store may give one (invariants 1, 3); a
        mirror is offered it (invariant 8)."""
        picked = self._pick(key)
        if picked is None:
            return None
        held, derived = picked
        if held.stamped:
            return stamped(held.answer, self._wall_clock())
        answer = held.answer
        if derived:
            try:
                answer = plain_answer(answer)
            except ProtobufError:
                return None
        if self._mirror is not None:
            self._offer_given(key, picked, answer)
        return answer

    def _pick(self, key: StatusKey) -> tuple[_Kept, bool] | None:
        """What ``kept(key)`` gives now: the answer kept for ``key`` within the period, else
        a container's verbose answer within it, whose status is the plain one (True)."""
        held = self._givable(key)
        if held is not None and self._clock() - held.learnt <= self.period:
            return held, False
        if key.method != CONTAINER or key.verbose:
            return None
        verbose = self._givable(key._replace(verbose=True))
        if verbose is None or self._clock() - verbose.learnt > self.period:
            return None
        return verbose, True

    def kept_listed(self, key: StatusKey) -> tuple[bytes, int] | None:
        """An answer kept past the period that may stand while a listing within the period
        shows its item in the state it gives (invariant 3), and that state. Never a CRI-O
        sandbox answer: its containers' statuses change with no change of its state."""
        held = self._givable(key)
        if held is None or held.state is None:
            return None
        if key.method == CONTAINER and (not held.tasks or held.tasks != self._tasks):
            return None
        return held.answer, held.state

    def offer_listed(self, key: StatusKey, held: tuple[bytes, int], fresh_until: float) -> None:
        """``kept_listed(key)`` gave ``held`` and a listing fresh until ``fresh_until`` showed
        its item in that state: copied to the mirror if the store still offers the same."""
        with self._lock:
            kept = self._answers.get(key)
            if self._mirror is None or kept is None or key.ident != kept.ids[0]:
                return
            if fresh_until <= max(self._clock(), kept.learnt + self.period):
                return  # the listing is older than the answer's own period, or than now
            if self.kept_listed(key) == held and not kept.refused:
                kept.refused = not self._mirror.put(key, held[0], fresh_until)

    def _givable(self, key: StatusKey) -> _Kept | None:
        """The answer kept for ``key`` while the stream that learnt it is open and no event
        named its item since (invariants 1, 2), whatever its age."""
        held = self._answers.get(key)
        if held is None or held.stale or not self._open or held.epoch != self._epoch:
            return None
        return held

    @property
    def missing_size(self) -> tuple[int, int]:
        """NOT_FOUND answers kept now (``MAX_MISSING``), and their details' characters."""
        with self._lock:
            return len(self._missing), sum(len(held.details) for held in self._missing.values())

    def missing(self, key: StatusKey) -> str | None:
        """The details of the runtime's NOT_FOUND to give for ``key`` now, kept for it or for
        the same call of the other verbosity (invariant 7)."""
        for each in (key, key._replace(verbose=not key.verbose)):
            held = self._missing.get(each)
            if held is None or not self._open or held.epoch != self._epoch:
                continue
            if self._clock() - held.learnt <= self.period:
                return held.details
        return None

    def keep_missing(self, key: StatusKey, details: str, ticket: Ticket) -> None:
        """Keep the runtime's NOT_FOUND ``details`` for ``key``, asked at ``ticket``."""
        if len(key.ident) != WHOLE_ID:
            return
        with self._lock:
            if self._overtaken(ticket, (key.ident,)):
                return
            self._missing.pop(key, None)
            self._missing[key] = _Missing(details, self._clock(), self._epoch)
            while len(self._missing) > MAX_MISSING:
                del self._missing[next(iter(self._missing))]

    def begin(self) -> Ticket:
        """Taken before the runtime is asked (invariant 4)."""
        with self._lock:
            return Ticket(self._epoch, self._seq, self._tasks_now())

    def keep(self, key: StatusKey, answer: bytes, ticket: Ticket) -> None:
        """Keep the runtime's ``answer`` for ``key``, asked at ``ticket`` (invariant 4)."""
        try:
            ident = answer_id(answer)
            parts = sandbox_parts(answer) if key.method == SANDBOX else None
        except ProtobufError:
            return
        with self._lock:
            ids = self._ids_of(key.method, ident, key.ident)
            if parts is not None:
                answer, ids = parts.body, ids + parts.container_ids
                if ticket.epoch == self._epoch:
                    self.sandbox_extras = parts.extras
            if not self._overtaken(ticket, ids):
                tasks = ticket.tasks
                self._put(key, answer, ids, tasks=tasks, stamp=parts is not None and parts.extras)

    def overtaken(self, ticket: Ticket, key: StatusKey) -> bool:
        """Whether an event may have changed ``key``'s item since ``ticket`` (or the stream
        ended or reopened): a call begun then may answer what a caller told of the event has
        already seen change. An ID asked by a prefix counts as named by any event since."""
        with self._lock:
            if len(key.ident) != WHOLE_ID and self._seq > ticket.seq:
                return True
            return self._overtaken(ticket, self._ids_of(key.method, key.ident, key.ident))

    def _overtaken(self, ticket: Ticket, ids: tuple[str, ...]) -> bool:
        """Whether an answer asked at ``ticket`` about ``ids`` may be older than what an
        event told since, or the stream ended or reopened meanwhile (invariant 4)."""
        if not self._open or ticket.epoch != self._epoch or ticket.seq < self._forgotten:
            return True
        return any(self._last_named.get(each, -1) > ticket.seq for each in ids)

    def _ids_of(self, method: str, ident: str, asked: str) -> tuple[str, ...]:
        ids = [ident]
        if method == CONTAINER:
            sandbox = self._sandbox_of.get(ident)
            if sandbox:
                ids.append(sandbox)
        if asked != ident:
            ids.append(asked)
        return tuple(ids)

    def _put(
        self,
        key: StatusKey,
        answer: bytes,
        ids: tuple[str, ...],
        *,
        tasks: int = 0,
        stamp: bool = False,
        stale: bool = False,
    ) -> None:
        self._forget(key)
        try:
            state = None if stamp else _listed_state(key, answer)
        except ProtobufError:
            return
        held = self._answers[key] = _Kept(
            answer,
            self._clock(),
            self._epoch,
            ids,
            stale=stale,
            state=state,
            stamped=stamp,
            tasks=tasks,
        )
        self._bytes += len(answer)
        for each in ids:
            self._by_id.setdefault(each, set()).add(key)
        while self._answers and (
            len(self._answers) > self.max_answers or self._bytes > self.max_bytes
        ):
            self._forget(next(iter(self._answers)))
        if self._mirror is not None:
            picked = self._pick(key)
            if picked is not None and picked[0] is held and not picked[1]:
                self._offer(key, picked, answer)

    def _forget(self, key: StatusKey) -> None:
        """``key``'s answer leaves (and every answer of its ID the mirror holds: one given for
        it may be another answer's status, invariant 8)."""
        if self._mirror is not None:
            self._mirror.drop(key.ident)
        held = self._answers.pop(key, None)
        if held is None:
            return
        self._bytes -= len(held.answer)
        for each in held.ids:
            keys = self._by_id.get(each)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_id[each]

    # -- events (invariant 2) ------------------------------------------------------------------
    def event(self, data: bytes) -> None:
        """One event's bytes, in the runtime's order (the stream's reading thread)."""
        try:
            facts = event_facts(data)
        except ProtobufError:
            with self._lock:
                self.unreadable += 1
                self._epoch += 1  # what it named is unknown: nothing kept may be given
                self._drop_all()
            return
        with self._lock:
            self._seq += 1
            self._apply(facts)

    def _apply(self, facts: EventFacts) -> None:
        named = {facts.container_id, facts.sandbox_id, *(i for i, _ in facts.container_statuses)}
        named.discard("")
        last = self._last_known(facts) if self.departed is not None else None
        for ident in named:
            self._named(ident)
        if facts.sandbox_id and facts.container_id not in ("", facts.sandbox_id):
            self._pair(facts.container_id, facts.sandbox_id)
        gone = facts.container_id if facts.kind == DELETED else ""
        if facts.sandbox_status is not None and facts.sandbox_id and facts.sandbox_id != gone:
            # Not the runtime's answer until it is known to be the status alone (invariant 6);
            # with the departed kept, the last known of its sandbox all the same.
            as_answer = self.sandbox_extras is False
            if as_answer or self.departed is not None:
                self._learn(SANDBOX, facts.sandbox_id, facts.sandbox_status, stale=not as_answer)
        for ident, status in facts.container_statuses:
            if ident and ident != gone:
                self._learn(CONTAINER, ident, status)
        if gone:
            self._sandbox_of.pop(gone, None)
            if self.departed is not None:
                if last is not None:
                    self.departed.left(last[0], gone, last[1], last[2], facts.created_at)
                self._forget_answers_of(gone)

    def _forget_answers_of(self, gone: str) -> None:
        """A deleted item's own answers (stale since its event) leave: what is last known of
        it is the departed's now, and nothing names it again."""
        for key in tuple(self._by_id.get(gone, ())):
            held = self._answers.get(key)
            if held is not None and held.ids[0] == gone:
                self._forget(key)

    def _pair(self, container: str, sandbox: str) -> None:
        self._sandbox_of.pop(container, None)
        self._sandbox_of[container] = sandbox  # the newest last, for the bound
        if len(self._sandbox_of) > self.max_pairs:
            del self._sandbox_of[next(iter(self._sandbox_of))]

    @property
    def pairs(self) -> int:
        """Containers whose sandbox is remembered now (``MAX_PAIRS``)."""
        return len(self._sandbox_of)

    def _last_known(self, facts: EventFacts) -> tuple[str, bytes, bytes | None] | None:
        """For a DELETED event: the method, and the last plain and verbose answers known of
        the item it names, before the event drops them (§10 rule 9: else a sandbox's from the
        event itself)."""
        ident = facts.container_id
        if facts.kind != DELETED or not ident:
            return None
        for method in (CONTAINER, SANDBOX):
            plain = self._answers.get(StatusKey(method, ident, False))
            verbose = self._answers.get(StatusKey(method, ident, True))
            last = _last_answers(plain, verbose)
            if last is not None:
                return method, *last
        if facts.sandbox_status is not None and facts.sandbox_id == ident:
            return SANDBOX, status_answer(facts.sandbox_status), None
        return None

    def _named(self, ident: str) -> None:
        """An event named ``ident``: its answers go (while the departed are kept, they stay,
        stale, as the last known of their items), its number is remembered."""
        for key in tuple(self._by_id.get(ident, ())):
            held = self._answers.get(key)
            if held is not None and self.departed is not None:
                held.stale = True
                if self._mirror is not None:
                    self._mirror.drop(key.ident)
            else:
                self._forget(key)
        if self._missing:
            for method in (CONTAINER, SANDBOX):
                for verbose in (False, True):
                    self._missing.pop(StatusKey(method, ident, verbose), None)
        self._last_named[ident] = self._seq
        self._last_named.move_to_end(ident)
        while len(self._last_named) > RECENT_IDS:
            _, seq = self._last_named.popitem(last=False)
            self._forgotten = max(self._forgotten, seq)

    def _learn(self, method: str, ident: str, status: bytes, *, stale: bool = False) -> None:
        ids: tuple[str, ...] = (ident,)
        if method == CONTAINER and self._sandbox_of.get(ident):
            ids = (ident, self._sandbox_of[ident])
        key = StatusKey(method, ident, False)
        self._put(key, status_answer(status), ids, tasks=self._tasks_now(), stale=stale)
