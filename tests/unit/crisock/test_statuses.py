"""The CRI socket's status store (``serve/crisock/statuses.py``, docs/architecture.md §10 rules
8 and 9) against a reference model, and its bounds at and past their limits.

The model is the freshness rule itself, stated over a history: an answer the store gives for
an item is the last thing learnt of that item (an event's status, or a runtime answer begun
after the last event naming it), learnt within the period, while the stream stayed open; a
container's plain answer may be its verbose one's status; a sandbox's plain answer is offered
past the period, with its state, for a listing to confirm.
Hypothesis draws interleavings of events, runtime answers (begun before or after events),
stream ends and reopenings, and the clock's advance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podcache.cri.proto import api_pb2 as pb
from podcache.serve.crisock.departedstatus import DepartedStatuses, rfc3339
from podcache.serve.crisock.statuses import (
    CONTAINER,
    SANDBOX,
    StatusKey,
    StatusStore,
    Ticket,
)

SANDBOX_ID = "s" * 64
IDS = ["a" * 64, "b" * 64, "c" * 64]
PERIOD = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def status(ident: str, state: int, exit_code: int = 0) -> pb.ContainerStatus:
    return pb.ContainerStatus(id=ident, state=state, exit_code=exit_code)  # type: ignore[arg-type]


def event(ident: str, kind: int, *, statuses: list[pb.ContainerStatus], at: int = 0) -> bytes:
    return pb.ContainerEventResponse(
        container_id=ident,
        container_event_type=kind,  # type: ignore[arg-type]
        created_at=at,
        pod_sandbox_status=pb.PodSandboxStatus(id=SANDBOX_ID, state=pb.SANDBOX_READY),
        containers_statuses=statuses,
    ).SerializeToString()


def answer(ident: str, exit_code: int, verbose: bool) -> bytes:
    info = {"info": f'{{"n":{exit_code}}}'} if verbose else {}
    return pb.ContainerStatusResponse(
        status=status(ident, pb.CONTAINER_RUNNING, exit_code), info=info
    ).SerializeToString()


@dataclass
class Model:
    """The freshness rule over a history: what may be answered per key, as (answer, learnt at,
    epoch, the IDs it depends on: its own, and its sandbox once an event paired them)."""

    clock: Clock
    sandbox_extras: bool = False  # CRI-O's sandbox answers: never from an event's status
    open: bool = True
    epoch: int = 1
    known: dict[StatusKey, tuple[bytes, float, int, frozenset[str]]] = field(default_factory=dict)
    named_at: dict[str, int] = field(default_factory=dict)  # ID -> its last event's number
    paired: set[str] = field(default_factory=set)  # containers an event put in SANDBOX_ID
    seq: int = 0
    covers: dict[StatusKey, int] = field(default_factory=dict)  # key -> following learnt in
    tasks: int = 0  # the following of containerd's own events now (0: none)
    followings: int = 0
    tasks_from: float = 0.0

    def tasks_now(self) -> int:
        return self.tasks if self.tasks and self.clock.now >= self.tasks_from else 0

    def tasks_opened(self, settle: float) -> None:
        self.followings += 1
        self.tasks, self.tasks_from = self.followings, self.clock.now + settle

    def task_event(self, ident: str) -> None:
        self.seq += 1
        self.named_at[ident] = self.seq
        self.known = {k: v for k, v in self.known.items() if ident not in v[3]}

    def deps(self, ident: str) -> frozenset[str]:
        return frozenset({ident, SANDBOX_ID} if ident in self.paired else {ident})

    def learn(self, key: StatusKey, data: bytes, deps: frozenset[str], covered: int) -> None:
        self.known[key] = (data, self.clock.now, self.epoch, deps)
        self.covers[key] = covered

    def event(self, ident: str, state: int, code: int) -> None:
        self.seq += 1
        named = {ident, SANDBOX_ID}
        for each in named:
            self.named_at[each] = self.seq
        self.known = {k: v for k, v in self.known.items() if not v[3] & named}
        self.paired.add(ident)
        body = pb.ContainerStatusResponse(status=status(ident, state, code))
        covered = self.tasks_now()
        key = StatusKey(CONTAINER, ident, False)
        self.learn(key, body.SerializeToString(), self.deps(ident), covered)
        if self.sandbox_extras:
            return
        sandbox = pb.PodSandboxStatus(id=SANDBOX_ID, state=pb.SANDBOX_READY)
        self.learn(
            StatusKey(SANDBOX, SANDBOX_ID, False),
            pb.PodSandboxStatusResponse(status=sandbox).SerializeToString(),
            frozenset({SANDBOX_ID}),
            covered,
        )

    def answered(self, key: StatusKey, data: bytes, asked: tuple[int, int, int]) -> None:
        """``data`` came for a call begun at ``asked``: (event number, epoch, following)."""
        seq, epoch, covered = asked
        deps = self.deps(key.ident)
        if self.open and epoch == self.epoch and all(self.named_at.get(d, 0) <= seq for d in deps):
            self.learn(key, data, deps, covered)

    def end(self, reopen: bool) -> None:
        self.open, self.epoch, self.known = reopen, self.epoch + (2 if reopen else 1), {}

    def givable(self, key: StatusKey) -> tuple[bytes, float, int, frozenset[str]] | None:
        held = self.known.get(key)
        return None if held is None or not self.open or held[2] != self.epoch else held

    def expected(self, key: StatusKey) -> bytes | None:
        held = self.givable(key)
        if held is not None and self.clock.now - held[1] <= PERIOD:
            return held[0]
        verbose = self.givable(key._replace(verbose=True))
        if key.method != CONTAINER or key.verbose or verbose is None:
            return None
        if self.clock.now - verbose[1] > PERIOD:
            return None
        plain = pb.ContainerStatusResponse(
            status=pb.ContainerStatusResponse.FromString(verbose[0]).status
        )
        return plain.SerializeToString()  # a verbose answer's status gives the plain one

    def expected_listed(self, key: StatusKey) -> tuple[bytes, int] | None:
        """Whatever its age, with its state: a sandbox's plain answer (READY: the events'); a
        container's learnt under the following of containerd's own events that goes on."""
        held = self.givable(key)
        if held is None:
            return None
        if key.method == SANDBOX:
            return held[0], pb.SANDBOX_READY
        if not self.covers[key] or self.covers[key] != self.tasks:
            return None
        return held[0], pb.ContainerStatusResponse.FromString(held[0]).status.state


Step = tuple[str, object, object, object]
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("event"), st.sampled_from(IDS), st.sampled_from([0, 1, 2]), st.integers(0, 9)
        ),
        st.tuples(st.just("ask"), st.sampled_from(IDS), st.booleans(), st.integers(0, 9)),
        st.tuples(st.just("answer"), st.integers(0, 5), st.just(0), st.just(0)),
        st.tuples(st.just("tick"), st.floats(0, 8), st.just(0), st.just(0)),
        st.tuples(st.just("end"), st.booleans(), st.just(0), st.just(0)),
        st.tuples(st.just("task"), st.sampled_from([*IDS, SANDBOX_ID]), st.just(0), st.just(0)),
        st.tuples(st.just("tasks"), st.booleans(), st.floats(0, 8), st.just(0)),
    ),
    max_size=60,
)


class Run:
    """One history applied to the store and the model side by side."""

    def __init__(self, sandbox_extras: bool) -> None:
        self.clock = Clock()
        self.store = StatusStore(PERIOD, clock=self.clock, sandbox_extras=sandbox_extras)
        self.store.stream_opened()
        self.model = Model(self.clock, sandbox_extras)
        self.asked: list[tuple[StatusKey, bytes, Ticket, tuple[int, int, int]]] = []  # in flight

    def event(self, ident: str, state: int, code: int) -> None:
        self.store.event(event(ident, state, statuses=[status(ident, state, code)]))
        self.model.event(ident, state, code)

    def ask(self, ident: str, verbose: bool, code: int) -> None:
        key = StatusKey(CONTAINER, ident, verbose)
        data = answer(ident, code, verbose)
        model = self.model
        began = (model.seq, model.epoch, model.tasks_now())
        self.asked.append((key, data, self.store.begin(), began))

    def answer(self, which: int, _: object, __: object) -> None:
        if self.asked:
            key, data, ticket, began = self.asked.pop(which % len(self.asked))
            self.store.keep(key, data, ticket)
            self.model.answered(key, data, began)

    def task(self, ident: str, _: object, __: object) -> None:
        self.store.task_event(ident)
        self.model.task_event(ident)

    def tasks(self, opened: bool, settle: float, _: object) -> None:
        if opened:
            self.store.tasks_opened(settle)
            self.model.tasks_opened(settle)
        else:
            self.store.tasks_ended()
            self.model.tasks = 0

    def tick(self, seconds: float, _: object, __: object) -> None:
        self.clock.now += seconds

    def end(self, reopen: bool, _: object, __: object) -> None:
        self.store.stream_ended()
        if reopen:
            self.store.stream_opened()
        self.model.end(reopen)

    def check(self) -> None:
        for ident in IDS:
            for verbose in (False, True):
                key = StatusKey(CONTAINER, ident, verbose)
                assert self.store.kept(key) == self.model.expected(key), key
                assert self.store.kept_listed(key) == self.model.expected_listed(key), key
        key = StatusKey(SANDBOX, SANDBOX_ID, False)
        assert self.store.kept(key) == self.model.expected(key), key
        assert self.store.kept_listed(key) == self.model.expected_listed(key), key


@settings(max_examples=300, deadline=None)
@given(steps, st.booleans())
def test_the_store_gives_what_the_freshness_rule_allows_and_nothing_else(
    history: list[Step], sandbox_extras: bool
) -> None:
    """Over generated histories, as containerd's shape (an event's sandbox status is its
    plain answer) and CRI-O's (a sandbox's answer lists its containers: never an event's)."""
    run = Run(sandbox_extras)
    for kind, a, b, c in history:
        getattr(run, kind)(a, b, c)
        run.check()


def _decoded(data: bytes | None) -> pb.ContainerStatusResponse | None:
    return None if data is None else pb.ContainerStatusResponse.FromString(data)


def test_an_answer_the_runtime_gave_before_an_event_is_not_kept() -> None:
    store = StatusStore(PERIOD, clock=Clock())
    store.stream_opened()
    key = StatusKey(CONTAINER, IDS[0], True)
    ticket = store.begin()
    store.event(event(IDS[1], pb.CONTAINER_STARTED_EVENT, statuses=[]))
    store.keep(StatusKey(CONTAINER, IDS[1], True), answer(IDS[1], 1, True), ticket)
    store.keep(key, answer(IDS[0], 1, True), ticket)
    assert store.kept(StatusKey(CONTAINER, IDS[1], True)) is None  # overtaken by the event
    assert store.kept(key) == answer(IDS[0], 1, True)  # the event named another


def test_without_a_stream_nothing_is_kept() -> None:
    store = StatusStore(PERIOD, clock=Clock())
    key = StatusKey(CONTAINER, IDS[0], False)
    store.keep(key, answer(IDS[0], 0, False), store.begin())
    store.event(event(IDS[0], pb.CONTAINER_STARTED_EVENT, statuses=[status(IDS[0], 1)]))
    assert not store.streaming
    assert store.kept(key) is None


def test_unreadable_event_bytes_end_every_kept_answer() -> None:
    store = StatusStore(PERIOD, clock=Clock())
    store.stream_opened()
    key = StatusKey(CONTAINER, IDS[0], False)
    store.keep(key, answer(IDS[0], 0, False), store.begin())
    assert store.kept(key) is not None
    store.event(b"\x0a\xff")  # a length past the end
    assert store.kept(key) is None
    assert store.unreadable == 1


def test_the_answers_are_bounded_in_count_at_and_past_the_limit() -> None:
    store = StatusStore(PERIOD, clock=Clock(), max_answers=3)
    store.stream_opened()
    ids = [f"{n:064x}" for n in range(4)]
    for ident in ids[:3]:
        store.keep(StatusKey(CONTAINER, ident, False), answer(ident, 0, False), store.begin())
    assert store.size[0] == 3  # at the bound: all kept
    assert all(store.kept(StatusKey(CONTAINER, i, False)) for i in ids[:3])
    store.keep(StatusKey(CONTAINER, ids[3], False), answer(ids[3], 0, False), store.begin())
    assert store.size[0] == 3  # past it: the oldest went
    assert store.kept(StatusKey(CONTAINER, ids[0], False)) is None
    assert all(store.kept(StatusKey(CONTAINER, i, False)) for i in ids[1:])


def test_the_answers_are_bounded_in_bytes_at_and_past_the_limit() -> None:
    one = len(answer(IDS[0], 0, False))
    store = StatusStore(PERIOD, clock=Clock(), max_bytes=2 * one)
    store.stream_opened()
    for ident in IDS[:2]:
        store.keep(StatusKey(CONTAINER, ident, False), answer(ident, 0, False), store.begin())
    assert store.size == (2, 2 * one)
    store.keep(StatusKey(CONTAINER, IDS[2], False), answer(IDS[2], 0, False), store.begin())
    assert store.size == (2, 2 * one)
    assert store.kept(StatusKey(CONTAINER, IDS[0], False)) is None


# -- rule 9: the departed --------------------------------------------------------------------------
NOW_NS = 1_700_000_100_123_456_789
"""The wall clock's reading in the departed tests: 100 s after the deletions they make."""


def _departing(
    keep_for: float = 600.0,
    max_items: int = 10_000,
    max_bytes: int = 1 << 20,
    sandbox_extras: bool | None = None,
) -> tuple[StatusStore, Clock]:
    clock = Clock()
    departed = DepartedStatuses(
        keep_for,
        clock=clock,
        wall_clock=lambda: NOW_NS + int(clock.now * 1e9),
        max_items=max_items,
        max_bytes=max_bytes,
    )
    store = StatusStore(PERIOD, clock=clock, departed=departed, sandbox_extras=sandbox_extras)
    store.stream_opened()
    return store, clock


def _leave(store: StatusStore, ident: str, at: int) -> None:
    store.event(
        event(ident, pb.CONTAINER_STOPPED_EVENT, statuses=[status(ident, pb.CONTAINER_EXITED, 3)])
    )
    store.event(event(ident, pb.CONTAINER_DELETED_EVENT, statuses=[], at=at))


def test_a_deleted_container_answers_its_last_status_and_when_it_left() -> None:
    store, clock = _departing(keep_for=160.0)
    _leave(store, IDS[0], at=1_700_000_000_123_456_789)  # 100 s before the wall clock
    assert store.kept(StatusKey(CONTAINER, IDS[0], False)) is None
    assert store.departed is not None
    found = store.departed.answer(CONTAINER, IDS[0], verbose=True)
    assert found is not None
    data, left = found
    assert _decoded(data) == pb.ContainerStatusResponse(
        status=status(IDS[0], pb.CONTAINER_EXITED, 3)
    )
    assert left == "2023-11-14T22:13:20.123456789Z" == rfc3339(1_700_000_000_123_456_789)
    clock.now += 60.0  # 160 s after it left (100 s before the event was read)
    assert store.departed.answer(CONTAINER, IDS[0], verbose=False) is not None  # at the limit
    clock.now += 0.001
    assert store.departed.answer(CONTAINER, IDS[0], verbose=False) is None  # past it


def test_a_deletion_older_than_the_duration_when_read_is_not_kept() -> None:
    store, _ = _departing(keep_for=99.0)  # the event is read 100 s after the deletion
    _leave(store, IDS[0], at=1_700_000_000_123_456_789)
    assert store.departed is not None
    assert store.departed.answer(CONTAINER, IDS[0], verbose=False) is None
    assert store.departed.size == (0, 0)


def test_the_departed_are_bounded_in_count_at_and_past_the_limit() -> None:
    store, _ = _departing(max_items=2)
    assert store.departed is not None
    _leave(store, IDS[0], at=0)
    _leave(store, IDS[1], at=0)
    assert store.departed.size[0] == 2
    assert store.departed.answer(CONTAINER, IDS[0], verbose=False) is not None
    _leave(store, IDS[2], at=0)
    assert store.departed.size[0] == 2
    assert store.departed.answer(CONTAINER, IDS[0], verbose=False) is None
    assert store.departed.answer(CONTAINER, IDS[2], verbose=False) is not None


def test_the_departed_are_bounded_in_bytes_at_and_past_the_limit() -> None:
    one = len(
        pb.ContainerStatusResponse(
            status=status(IDS[0], pb.CONTAINER_EXITED, 3)
        ).SerializeToString()
    )
    store, _ = _departing(max_bytes=2 * one)
    assert store.departed is not None
    _leave(store, IDS[0], at=0)
    _leave(store, IDS[1], at=0)
    assert store.departed.size == (2, 2 * one)
    _leave(store, IDS[2], at=0)
    assert store.departed.size == (2, 2 * one)
    assert store.departed.answer(CONTAINER, IDS[0], verbose=False) is None


@pytest.mark.parametrize("sandbox_extras", [False, True], ids=["containerd", "crio"])
def test_a_flow_of_departing_containers_leaves_only_the_live_answers_kept(
    sandbox_extras: bool,
) -> None:
    """Each container of a flow is started, asked verbose, stopped and deleted: its answers
    leave the live store with its DELETED event (the departed hold its last status), so the
    store keeps the sandbox's status alone after each, never one more per departed item: on
    containerd's shape as its answer, on CRI-O's (whose answer lists the containers) stale,
    never given, as the sandbox's last known."""
    store, _ = _departing(max_items=20, sandbox_extras=sandbox_extras)
    assert store.departed is not None
    sandbox = StatusKey(SANDBOX, SANDBOX_ID, False)
    sandbox_answer = pb.PodSandboxStatusResponse(
        status=pb.PodSandboxStatus(id=SANDBOX_ID, state=pb.SANDBOX_READY)
    ).SerializeToString()
    for n in range(50):
        ident = f"{n:064x}"
        store.event(event(ident, pb.CONTAINER_STARTED_EVENT, statuses=[status(ident, 1)]))
        store.keep(StatusKey(CONTAINER, ident, True), answer(ident, n, True), store.begin())
        assert store.size[0] == 3  # the sandbox's, the container's plain and verbose
        _leave(store, ident, at=0)
        assert store.size == (1, len(sandbox_answer))
        assert store.kept(sandbox) == (None if sandbox_extras else sandbox_answer)
        assert store.departed.size[0] == min(n + 1, 20)
        assert store.departed.answer(CONTAINER, ident, verbose=True) is not None
    assert store.departed.answer(CONTAINER, f"{29:064x}", verbose=False) is None  # past 20


def test_the_containers_sandboxes_are_bounded_at_and_past_the_limit() -> None:
    store = StatusStore(PERIOD, clock=Clock(), max_pairs=2)
    store.stream_opened()
    for ident in IDS[:2]:
        store.event(event(ident, pb.CONTAINER_CREATED_EVENT, statuses=[]))
    assert store.pairs == 2
    store.event(event(IDS[2], pb.CONTAINER_CREATED_EVENT, statuses=[]))
    assert store.pairs == 2
    # The oldest told went: an answer of it no longer depends on the sandbox.
    store.keep(StatusKey(CONTAINER, IDS[0], True), answer(IDS[0], 0, True), store.begin())
    store.event(event(IDS[1], pb.CONTAINER_STARTED_EVENT, statuses=[]))
    assert store.kept(StatusKey(CONTAINER, IDS[0], True)) is not None


def test_a_deleted_containers_verbose_answer_is_its_last_status_with_the_last_info() -> None:
    """Asked verbose while it ran, then stopped and deleted: the departed verbose answer is the
    STOPPED event's status with the info of the verbose answer given while it ran."""
    store, _ = _departing()
    verbose = StatusKey(CONTAINER, IDS[0], True)
    store.event(event(IDS[0], pb.CONTAINER_STARTED_EVENT, statuses=[status(IDS[0], 1)]))
    store.keep(verbose, answer(IDS[0], 7, True), store.begin())
    _leave(store, IDS[0], at=0)
    assert store.kept(verbose) is None  # never given once an event named it
    assert store.departed is not None
    found = store.departed.answer(CONTAINER, IDS[0], verbose=True)
    assert found is not None
    assert _decoded(found[0]) == pb.ContainerStatusResponse(
        status=status(IDS[0], pb.CONTAINER_EXITED, 3), info={"info": '{"n":7}'}
    )
    plain = store.departed.answer(CONTAINER, IDS[0], verbose=False)
    assert plain is not None
    assert _decoded(plain[0]) == pb.ContainerStatusResponse(
        status=status(IDS[0], pb.CONTAINER_EXITED, 3)
    )


def test_a_container_only_asked_verbose_answers_that_status_once_deleted() -> None:
    """An agent's start-up asked verbose of a container no event named until it was deleted
    (it exited before podcache subscribed): the verbose answer's status is its last one."""
    store, _ = _departing()
    store.keep(StatusKey(CONTAINER, IDS[0], True), answer(IDS[0], 4, True), store.begin())
    store.event(event(IDS[0], pb.CONTAINER_DELETED_EVENT, statuses=[]))
    assert store.departed is not None
    last = pb.ContainerStatusResponse(status=status(IDS[0], pb.CONTAINER_RUNNING, 4))
    plain = store.departed.answer(CONTAINER, IDS[0], verbose=False)
    assert plain is not None and _decoded(plain[0]) == last
    verbose = store.departed.answer(CONTAINER, IDS[0], verbose=True)
    assert verbose is not None
    last.info["info"] = '{"n":4}'
    assert _decoded(verbose[0]) == last


# A model of rule 9: what a departed container answers, over generated lives of the containers
# of one pod (their events interleaved, verbose answers asked between them, time passing).
KEEP_FOR = 5.5
lives = st.lists(
    st.one_of(
        st.tuples(st.just("event"), st.sampled_from(IDS), st.sampled_from([0, 1, 2, 3])),
        st.tuples(st.just("ask"), st.sampled_from(IDS), st.integers(0, 9)),
        st.tuples(st.just("tick"), st.integers(1, 3), st.just(0)),
    ),
    max_size=40,
)


class DepartedRun:
    """One generated history applied to the store, and the model beside it."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.store, _ = _departing(keep_for=KEEP_FOR)
        assert self.store.departed is not None
        self.store.departed._clock = self.clock  # one clock for the store and its departed
        self.store.departed._wall_clock = lambda: NOW_NS + int(self.clock.now * 1e9)
        self.store._clock = self.clock
        self.status: dict[str, pb.ContainerStatus] = {}  # the last status an event carried
        self.asked: dict[str, pb.ContainerStatus] = {}  # the status of the last verbose answer
        self.info: dict[str, str] = {}  # the info of the last verbose answer given
        self.gone: dict[str, tuple[pb.ContainerStatusResponse, str | None, float]] = {}

    def event(self, ident: str, kind: int) -> None:
        if ident in self.gone:
            return  # a runtime never names a deleted ID again
        if kind != pb.CONTAINER_DELETED_EVENT:
            carried = status(ident, kind, kind)
            self.store.event(event(ident, kind, statuses=[carried]))
            self.status[ident] = carried
            return
        self.store.event(event(ident, kind, statuses=[]))
        last = self.status.get(ident) or self.asked.get(ident)  # an event's first
        if last is not None:
            plain = pb.ContainerStatusResponse(status=last)
            self.gone[ident] = (plain, self.info.get(ident), self.clock.now)

    def ask(self, ident: str, n: int) -> None:
        if ident in self.gone:
            return
        self.store.keep(
            StatusKey(CONTAINER, ident, True), answer(ident, n, True), self.store.begin()
        )
        self.info[ident] = f'{{"n":{n}}}'
        self.asked[ident] = status(ident, pb.CONTAINER_RUNNING, n)

    def tick(self, seconds: int, _: object) -> None:
        self.clock.now += seconds

    def check(self) -> None:
        departed = self.store.departed
        assert departed is not None
        for ident in IDS:
            expected = self.gone.get(ident)
            if expected is not None and self.clock.now - expected[2] > KEEP_FOR:
                expected = None
            for verbose in (False, True):
                found = departed.answer(CONTAINER, ident, verbose)
                if expected is None:
                    assert found is None, ident
                    continue
                assert found is not None, ident
                want = pb.ContainerStatusResponse()
                want.CopyFrom(expected[0])
                if verbose and expected[1] is not None:
                    want.info["info"] = expected[1]
                assert _decoded(found[0]) == want, (ident, verbose)


@settings(max_examples=300, deadline=None)
@given(lives)
def test_a_departed_container_answers_the_last_status_its_events_carried(
    history: list[tuple[str, object, object]],
) -> None:
    run = DepartedRun()
    for kind, a, b in history:
        getattr(run, kind)(a, b)
        run.check()
