"""The status store's mirror (``serve/crisock/statuses.py`` invariant 8; docs/architecture.md
§10 rule 8): the answers copied to the C relay, which gives them for an exact key without
asking Python. The C relay is played by ``FakeMirror``, which gives what it holds as the C
does: for the key exactly, until ``fresh_until`` on the store's clock, until dropped.

The rule held: whatever the mirror would give now, ``store.kept`` gives now, byte for byte.
Hypothesis draws interleavings of runtime answers (begun before or after events), ``kept``
calls, events naming the IDs (DELETED ones with the departed kept), unreadable events,
containerd's own events, the stream's ends and reopenings, and the clock's advance, on a store
small enough that its bound evicts.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podcache.cri.proto import api_pb2 as pb
from podcache.serve.crisock.departedstatus import DepartedStatuses
from podcache.serve.crisock.statuses import CONTAINER, SANDBOX, StatusKey, StatusStore, Ticket
from podcache.serve.crisock.statuswire import plain_answer
from tests.unit.crisock.test_statuses import IDS, PERIOD, SANDBOX_ID, Clock, answer, event, status
from tests.unit.crisock.test_statuses_sandbox import containerd_answer, crio_answer

PREFIX = IDS[0][:12]
SANDBOX_KEY = StatusKey(SANDBOX, SANDBOX_ID, False)


class FakeMirror:
    """A fake of the C relay's table of answers: ``put`` keeps an answer for its exact key
    (refused past ``max_bytes``, what was held for the key left as it was: the store must
    cope), ``gives`` is what the C would answer now."""

    def __init__(self, clock: Callable[[], float], max_bytes: int = 1 << 20) -> None:
        self.clock = clock
        self.max_bytes = max_bytes
        self.held: dict[StatusKey, tuple[bytes, float]] = {}
        self.puts = 0

    def put(self, key: StatusKey, answer: bytes, fresh_until: float) -> bool:
        self.puts += 1
        if len(answer) > self.max_bytes:
            return False
        self.held[key] = (answer, fresh_until)
        return True

    def drop(self, ident: str) -> None:
        for key in [k for k in self.held if k.ident == ident]:
            del self.held[key]

    def clear(self) -> None:
        self.held.clear()

    def gives(self, key: StatusKey) -> bytes | None:
        held = self.held.get(key)
        return None if held is None or self.clock() > held[1] else held[0]


def mirrored_store(
    *, departed: bool = False, max_answers: int = 50, max_bytes: int = 1 << 20
) -> tuple[StatusStore, FakeMirror, Clock]:
    clock = Clock()
    store = StatusStore(
        PERIOD,
        clock=clock,
        departed=DepartedStatuses(60.0, clock=clock) if departed else None,
        max_answers=max_answers,
    )
    mirror = FakeMirror(clock, max_bytes)
    store.mirror_to(mirror)
    store.stream_opened()
    return store, mirror, clock


def assert_mirror_gives_only_what_the_store_gives(store: StatusStore, mirror: FakeMirror) -> None:
    for key in list(mirror.held):
        given = mirror.gives(key)
        if given is not None:
            assert store.kept(key) == given, key


# -- each rule once ------------------------------------------------------------------------------
def test_a_kept_answer_is_mirrored_until_its_period_ends() -> None:
    store, mirror, clock = mirrored_store()
    key = StatusKey(CONTAINER, IDS[0], True)
    clock.now = 3.0
    store.keep(key, answer(IDS[0], 1, True), store.begin())
    assert mirror.held == {key: (answer(IDS[0], 1, True), 3.0 + PERIOD)}
    clock.now = 3.0 + PERIOD
    assert mirror.gives(key) == store.kept(key) == answer(IDS[0], 1, True)
    clock.now += 1
    assert mirror.gives(key) is None
    assert store.kept(key) is None


def test_a_plain_answer_from_a_verbose_one_is_mirrored_under_the_verbose_ones_age() -> None:
    store, mirror, clock = mirrored_store()
    verbose = StatusKey(CONTAINER, IDS[0], True)
    store.keep(verbose, answer(IDS[0], 1, True), store.begin())
    plain = verbose._replace(verbose=False)
    assert plain not in mirror.held
    clock.now = 4.0
    given = store.kept(plain)
    assert given == plain_answer(answer(IDS[0], 1, True))
    assert mirror.held[plain] == (given, PERIOD)  # learnt at 0


def test_an_events_status_is_mirrored_and_the_next_event_drops_it() -> None:
    store, mirror, _ = mirrored_store()
    store.event(event(IDS[0], pb.CONTAINER_STARTED_EVENT, statuses=[status(IDS[0], 1)]))
    key = StatusKey(CONTAINER, IDS[0], False)
    assert mirror.gives(key) == store.kept(key) is not None
    store.keep(StatusKey(CONTAINER, IDS[1], True), answer(IDS[1], 0, True), store.begin())
    store.event(event(IDS[0], pb.CONTAINER_STOPPED_EVENT, statuses=[]))
    assert key not in mirror.held
    assert store.kept(key) is None
    # It named the sandbox too: the sibling's answer never paired with it stays.
    assert StatusKey(CONTAINER, IDS[1], True) in mirror.held


@pytest.mark.parametrize("departed", [False, True], ids=["dropped", "kept-stale"])
def test_an_event_drops_the_answers_it_ends_also_those_kept_stale(departed: bool) -> None:
    store, mirror, _ = mirrored_store(departed=departed)
    key = StatusKey(CONTAINER, IDS[0], True)
    store.keep(key, answer(IDS[0], 1, True), store.begin())
    store.event(event(IDS[0], pb.CONTAINER_STOPPED_EVENT, statuses=[]))
    assert store.kept(key) is None
    assert key not in mirror.held


def test_an_answer_asked_by_a_prefix_is_never_mirrored() -> None:
    store, mirror, _ = mirrored_store()
    key = StatusKey(CONTAINER, PREFIX, True)
    store.keep(key, answer(IDS[0], 1, True), store.begin())
    assert store.kept(key) == answer(IDS[0], 1, True)
    assert mirror.held == {}
    assert mirror.puts == 0


def test_a_sandbox_answer_given_with_the_time_of_the_answer_is_never_mirrored() -> None:
    store, mirror, _ = mirrored_store()
    store.keep(SANDBOX_KEY, crio_answer(IDS[0]), store.begin())
    assert store.kept(SANDBOX_KEY) is not None
    assert mirror.puts == 0
    store.stream_opened()
    store.keep(SANDBOX_KEY, containerd_answer(), store.begin())
    assert mirror.held == {SANDBOX_KEY: (containerd_answer(), PERIOD)}


@pytest.mark.parametrize(
    "ending",
    [
        StatusStore.stream_ended,
        StatusStore.stream_opened,
        lambda store: store.event(b"\xff"),
        lambda store: store.task_event(IDS[0]),
    ],
    ids=["stream-ended", "stream-reopened", "unreadable-event", "task-event"],
)
def test_what_ends_every_kept_answer_empties_the_mirror(
    ending: Callable[[StatusStore], None],
) -> None:
    store, mirror, _ = mirrored_store()
    store.keep(StatusKey(CONTAINER, IDS[0], True), answer(IDS[0], 1, True), store.begin())
    ending(store)
    assert mirror.held == {}


def test_an_answer_evicted_by_the_bound_leaves_the_mirror() -> None:
    store, mirror, _ = mirrored_store(max_answers=1)
    first, second = (StatusKey(CONTAINER, ident, True) for ident in IDS[:2])
    store.keep(first, answer(IDS[0], 1, True), store.begin())
    store.keep(second, answer(IDS[1], 1, True), store.begin())
    assert list(mirror.held) == [second]


def test_an_answer_the_mirror_refused_is_not_offered_again_until_kept_again() -> None:
    store, mirror, _ = mirrored_store(max_bytes=0)
    key = StatusKey(CONTAINER, IDS[0], True)
    store.keep(key, answer(IDS[0], 1, True), store.begin())
    assert store.kept(key) is not None
    assert store.kept(key) is not None
    assert mirror.puts == 1
    mirror.max_bytes = 1 << 20
    store.keep(key, answer(IDS[0], 2, True), store.begin())
    assert mirror.held == {key: (answer(IDS[0], 2, True), PERIOD)}


class EventOnRead(Clock):
    """A clock that, read for the ``at``-th time, lets an event arrive (``fire``): as one
    read by the stream's thread while ``kept`` runs on the socket's loop, between its read
    of the answer and its copy to the mirror."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.at = -1
        self.fire: Callable[[], None] = lambda: None

    def __call__(self) -> float:
        self.reads += 1
        if self.reads == self.at:
            self.fire()
        return self.now


def test_an_event_between_kept_reading_an_answer_and_mirroring_it_wins() -> None:
    clock = EventOnRead()
    store = StatusStore(PERIOD, clock=clock)
    mirror = FakeMirror(clock)
    store.stream_opened()
    key = StatusKey(CONTAINER, IDS[0], True)
    store.keep(key, answer(IDS[0], 1, True), store.begin())  # before the mirror: not copied
    store.mirror_to(mirror)
    stop = event(IDS[0], pb.CONTAINER_STOPPED_EVENT, statuses=[])
    clock.at, clock.fire = clock.reads + 1, lambda: store.event(stop)
    assert store.kept(key) == answer(IDS[0], 1, True)  # read before the event: given
    assert mirror.held == {}  # but not copied: the event ended it
    assert store.kept(key) is None


def test_a_new_mirror_and_the_one_replaced_start_empty() -> None:
    store, mirror, clock = mirrored_store()
    store.keep(StatusKey(CONTAINER, IDS[0], True), answer(IDS[0], 1, True), store.begin())
    other = FakeMirror(clock)
    other.held[SANDBOX_KEY] = (b"old", 99.0)
    store.mirror_to(other)
    assert store.mirror is other
    assert mirror.held == other.held == {}
    store.mirror_to(None)
    assert store.mirror is None
    store.keep(StatusKey(CONTAINER, IDS[1], True), answer(IDS[1], 1, True), store.begin())
    assert other.puts == 0


# -- generated histories ---------------------------------------------------------------------------
KEYS = [
    *(StatusKey(CONTAINER, ident, verbose) for ident in IDS for verbose in (False, True)),
    StatusKey(CONTAINER, PREFIX, True),
    SANDBOX_KEY,
    StatusKey(SANDBOX, SANDBOX_ID, True),
]


def runtime_answer(key: StatusKey, variant: int) -> bytes:
    if key.method == CONTAINER:
        return answer(IDS[0] if key.ident == PREFIX else key.ident, variant, key.verbose)
    return crio_answer(IDS[variant % 3]) if variant >= 4 else containerd_answer()


class MirroredRun:
    """One history applied to a mirrored store (a bound of 4 answers: evictions happen), its
    mirror refusing answers past ``mirror_bytes``."""

    def __init__(self, departed: bool, mirror_bytes: int) -> None:
        self.store, self.mirror, self.clock = mirrored_store(
            departed=departed, max_answers=4, max_bytes=mirror_bytes
        )
        self.asked: list[tuple[StatusKey, bytes, Ticket]] = []

    def ask(self, which: int, variant: int) -> None:
        key = KEYS[which % len(KEYS)]
        self.asked.append((key, runtime_answer(key, variant), self.store.begin()))

    def answer(self, which: int, _: int) -> None:
        if self.asked:
            self.store.keep(*self.asked.pop(which % len(self.asked)))

    def kept(self, which: int, _: int) -> None:
        self.store.kept(KEYS[which % len(KEYS)])

    def event(self, which: int, kind: int) -> None:
        ident = IDS[which % 3]
        kinds = (pb.CONTAINER_STARTED_EVENT, pb.CONTAINER_STOPPED_EVENT, pb.CONTAINER_DELETED_EVENT)
        carried = [status(ident, which % 4)] if kind % 2 else []
        self.store.event(event(ident, kinds[kind % 3], statuses=carried))

    def unreadable(self, _: int, __: int) -> None:
        self.store.event(b"\xff")

    def task(self, which: int, _: int) -> None:
        self.store.task_event(IDS[which % 3])

    def stream(self, reopen: int, _: int) -> None:
        self.store.stream_ended()
        if reopen % 2:
            self.store.stream_opened()

    def tick(self, seconds: int, _: int) -> None:
        self.clock.now += seconds


STEPS = ["ask", "answer", "kept", "event", "task", "stream", "tick", "unreadable"]
WEIGHTS = [6, 6, 6, 4, 1, 1, 3, 1]
"""How often each step is drawn: a history mostly keeps and gives answers, events between."""
mirror_steps = st.lists(
    st.tuples(
        st.sampled_from(
            [kind for kind, weight in zip(STEPS, WEIGHTS, strict=True) for _ in range(weight)]
        ),
        st.integers(0, 11),
        st.integers(0, 7),
    ),
    min_size=5,
    max_size=80,
)


@settings(max_examples=400, deadline=None)
@given(mirror_steps, st.booleans(), st.sampled_from([1 << 20, 80]))
def test_the_mirror_never_gives_what_the_store_would_not(
    history: list[tuple[str, int, int]], departed: bool, mirror_bytes: int
) -> None:
    """With a mirror that keeps every answer, and one that refuses the verbose ones."""
    run = MirroredRun(departed, mirror_bytes)
    for kind, a, b in history:
        getattr(run, kind)(a, b)
        assert_mirror_gives_only_what_the_store_gives(run.store, run.mirror)


def test_only_a_store_on_the_monotonic_clock_says_it_may_be_mirrored() -> None:
    """The server mirrors a store to the C relay only then: the relay's deadlines are
    ``time.monotonic``'s, and a test's fake clock must never feed it."""
    assert StatusStore(PERIOD).monotonic
    assert not StatusStore(PERIOD, clock=Clock()).monotonic


def _kept_past_the_period() -> tuple[StatusStore, FakeMirror, Clock, tuple[bytes, int]]:
    """A sandbox's plain answer kept, then the period passed: the store offers it only as a
    listing confirms it (``kept_listed``)."""
    store, mirror, clock = mirrored_store()
    store.keep(SANDBOX_KEY, containerd_answer(), store.begin())
    clock.now = PERIOD + 1
    assert mirror.gives(SANDBOX_KEY) is None and store.kept(SANDBOX_KEY) is None
    held = store.kept_listed(SANDBOX_KEY)
    assert held is not None
    return store, mirror, clock, held


def test_an_answer_a_listing_confirmed_is_mirrored_till_the_listing_leaves_the_period() -> None:
    store, mirror, clock, held = _kept_past_the_period()
    store.offer_listed(SANDBOX_KEY, held, clock.now + 2)
    assert mirror.held[SANDBOX_KEY] == (held[0], clock.now + 2)
    clock.now += 2
    assert mirror.gives(SANDBOX_KEY) == held[0]
    clock.now += 0.5
    assert mirror.gives(SANDBOX_KEY) is None


def test_a_listings_answer_is_not_mirrored_when_the_store_changed_or_the_listing_is_old() -> None:
    store, mirror, clock, held = _kept_past_the_period()
    store.offer_listed(SANDBOX_KEY, held, clock.now)  # a listing no longer within the period
    store.offer_listed(SANDBOX_KEY, (b"another", held[1]), clock.now + 2)
    assert mirror.gives(SANDBOX_KEY) is None
    # An event naming the sandbox brings its status: kept anew, and mirrored as such (till its
    # own period ends), not as the listing's answer of before.
    store.event(event(IDS[0], pb.CONTAINER_STOPPED_EVENT, statuses=[]))
    store.offer_listed(SANDBOX_KEY, held, clock.now + 2)
    assert mirror.held[SANDBOX_KEY][1] == clock.now + PERIOD


@pytest.mark.parametrize("change", ["tasks_opened", "tasks_ended"])
def test_a_change_in_following_containerds_own_events_empties_the_mirror(change: str) -> None:
    store, mirror, clock, held = _kept_past_the_period()
    store.offer_listed(SANDBOX_KEY, held, clock.now + 2)
    assert SANDBOX_KEY in mirror.held
    if change == "tasks_opened":
        store.tasks_opened(0.0)
    else:
        store.tasks_ended()
    assert mirror.held == {}
