"""Hypothesis stateful test of watch(): both caches against a reference model of revisions,
history and backlogs.

The runtime's pods change at random (added, deleted, modified, replaced by an equal copy),
the cache refreshes when told, time jumps past the history's age, and watchers open at random
revisions (valid, too old, never reached, or none) and read at random, some often and some
rarely. The model numbers every distinct state, keeps every change with the time it was
published, and applies the documented retention rule (changes.py, invariant 3) on its own
data. Invariants: applying a watcher's changes in order to the state at its starting revision
gives exactly the state at the revision of each read's last change, with no change lost or
repeated; revisions strictly increase; ResyncRequiredError comes exactly when the rules say.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from podcache import ContainerState, Pod, PodChange, ResyncRequiredError
from podcache.cache.changes import HISTORY_AGE, HISTORY_CAP
from tests.unit.cache.drivers import AsyncDriver, Driver, FakeClock, SyncDriver, WatchFace, make_pod

PERIOD = 1e9  # the cache never expires by itself: every refresh here is the test's


@dataclass
class ModelWatcher:
    """A watcher as the model sees it, with the real watch it stands for."""

    face: WatchFace
    pos: int  # sequence number of the first change not read
    revision: int
    state: dict[str, Pod]
    pending: bool  # its first batch (the snapshot's pods) is still unread
    open: bool = True


@dataclass
class Model:
    """Revisions, every change ever published, and the retention rule."""

    history: int
    max_lag: int
    revision: int = 0
    states: dict[int, dict[str, Pod]] = field(default_factory=lambda: {0: {}})
    revisions: list[int] = field(default_factory=list)  # per change, in sequence order
    times: list[float] = field(default_factory=list)
    base: int = 0  # first sequence number kept
    oldest: int = 0

    @property
    def head(self) -> int:
        return len(self.revisions)

    def publish(self, pods: dict[str, Pod], now: float, watchers: list[ModelWatcher]) -> None:
        before = self.states[self.revision]
        changed = sum(1 for uid in before if uid not in pods) + sum(
            1 for uid, pod in pods.items() if uid not in before or before[uid] != pod
        )
        if not changed:
            return
        self.revision += 1
        self.states[self.revision] = dict(pods)
        self.revisions += [self.revision] * changed
        self.times += [now] * changed
        head = self.head
        young = bisect.bisect_left(self.times, now - HISTORY_AGE)
        keep = max(min(head - self.history, young), head - max(self.history, HISTORY_CAP))
        for w in watchers:
            if w.open and head - w.pos <= self.max_lag:
                keep = min(keep, w.pos)
        if keep > self.base:
            self.oldest = max(self.oldest, self.revisions[keep - 1])
            self.base = keep

    def start(self, since: int) -> int:
        """The sequence number of the first change after revision ``since``."""
        return bisect.bisect_right(self.revisions, since)


def _pods(n: int) -> st.SearchStrategy[int]:
    return st.integers(0, n)


class WatchAgainstModel(RuleBasedStateMachine):
    driver_type: type[SyncDriver] | type[AsyncDriver] = SyncDriver
    watchers = Bundle("watchers")

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(100.0)
        self.runtime: dict[str, Pod] = {}
        self.next_uid = 0
        self.driver: Driver | None = None
        self.model = Model(history=0, max_lag=1)
        self.open_watchers: list[ModelWatcher] = []
        self.last_revision = 0

    @initialize(history=st.integers(0, 6), max_lag=st.integers(1, 8), pods=st.integers(0, 3))
    def build(self, history: int, max_lag: int, pods: int) -> None:
        self.driver = self.driver_type(PERIOD, self.clock, history=history, max_lag=max_lag)
        self.model = Model(history=history, max_lag=max_lag)
        for _ in range(pods):
            self._add()
        self.refresh()

    def teardown(self) -> None:
        for w in self.open_watchers:
            w.face.close()
        if self.driver is not None:
            self.driver.close()

    # -- the runtime -------------------------------------------------------------------------
    def _set(self) -> None:
        assert self.driver is not None
        self.driver.fake.set_pods(list(self.runtime.values()))

    def _add(self) -> None:
        self.next_uid += 1
        pod = make_pod(self.next_uid, containers=1)
        self.runtime[pod.id] = pod
        self._set()

    @rule()
    def add_pod(self) -> None:
        self._add()

    @rule(which=st.integers(0, 100))
    def delete_pod(self, which: int) -> None:
        if self.runtime:
            del self.runtime[sorted(self.runtime)[which % len(self.runtime)]]
            self._set()

    @rule(which=st.integers(0, 100), state=st.sampled_from(list(ContainerState)))
    def modify_pod(self, which: int, state: ContainerState) -> None:
        if self.runtime:
            uid = sorted(self.runtime)[which % len(self.runtime)]
            pod = self.runtime[uid]
            container = pod.containers[0]
            self.runtime[uid] = Pod(
                id=pod.id,
                name=pod.name,
                namespace=pod.namespace,
                created_at=pod.created_at,
                containers=[
                    type(container)(
                        id=container.id, name=container.name, image=container.image, state=state
                    )
                ],
            )
            self._set()

    @rule(which=st.integers(0, 100))
    def replace_with_equal_copy(self, which: int) -> None:
        """A different object with the same value: no change."""
        if self.runtime:
            uid = sorted(self.runtime)[which % len(self.runtime)]
            pod = self.runtime[uid]
            self.runtime[uid] = Pod(
                id=pod.id,
                name=pod.name,
                namespace=pod.namespace,
                created_at=pod.created_at,
                containers=list(pod.containers),
            )
            self._set()

    @rule(seconds=st.sampled_from([0.001, HISTORY_AGE + 1, HISTORY_AGE + 1]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # -- the cache ---------------------------------------------------------------------------
    @rule()
    def refresh(self) -> None:
        assert self.driver is not None
        self.clock.advance(0.001)
        self.driver.force(self.clock.now)
        self.model.publish(self.runtime, self.clock.now, self.open_watchers)
        pods = self.driver.get()
        assert pods.revision == self.model.revision
        assert pods.revision >= self.last_revision
        self.last_revision = pods.revision
        assert {pod.id: pod for pod in pods} == self.model.states[pods.revision]

    # -- watchers ----------------------------------------------------------------------------
    @rule(target=watchers, since=st.none() | st.integers(-1, 40))
    def open_watcher(self, since: int | None) -> ModelWatcher | None:
        assert self.driver is not None
        model = self.model
        face = self.driver.watch(since)
        if since is not None and not model.oldest <= since <= model.revision:
            try:
                face.read()
            except ResyncRequiredError as error:
                assert error.since == since and error.oldest == model.oldest
                return None
            raise AssertionError(f"since={since} outside {model.oldest}..{model.revision}")
        if since is None:
            watcher = ModelWatcher(
                face, model.head, model.revision, {}, pending=True
            )  # its first batch fills the state
        else:
            watcher = ModelWatcher(
                face, model.start(since), since, dict(model.states[since]), pending=False
            )
        self.open_watchers.append(watcher)
        self.read(watcher)
        return watcher

    @rule(watcher=watchers)
    def read(self, watcher: ModelWatcher | None) -> None:
        if watcher is None or not watcher.open:
            return
        model = self.model
        if watcher.pending:
            batch = watcher.face.read()
            watcher.pending = False
            assert all(c.type == "ADDED" and c.revision == watcher.revision for c in batch)
            self._apply(watcher, batch)
            assert watcher.state == model.states[watcher.revision]
            return
        unread = model.head - watcher.pos
        if unread > model.max_lag:
            try:
                watcher.face.read()
            except ResyncRequiredError:
                self._closed(watcher)
                return
            raise AssertionError(f"{unread} unread changes > max_lag {model.max_lag}: no resync")
        batch = watcher.face.read()
        assert len(batch) == unread  # nothing lost, nothing repeated
        for change in batch:
            assert change.revision > watcher.revision or (
                change.revision == watcher.revision and change is not batch[0]
            )
            if change.revision != watcher.revision:
                assert watcher.state == model.states[watcher.revision]
            watcher.revision = change.revision
            self._apply(watcher, [change])
        watcher.pos = model.head
        assert watcher.state == model.states[watcher.revision]
        if batch:
            assert watcher.revision == model.revision

    @rule(watcher=watchers)
    def close(self, watcher: ModelWatcher | None) -> None:
        if watcher is not None and watcher.open:
            watcher.face.close()
            self._closed(watcher)
            assert watcher.face.read() == []

    def _closed(self, watcher: ModelWatcher) -> None:
        watcher.open = False
        self.open_watchers.remove(watcher)

    @staticmethod
    def _apply(watcher: ModelWatcher, changes: list[PodChange]) -> None:
        for change in changes:
            uid = change.pod.id
            if change.type == "DELETED":
                assert watcher.state.pop(uid) == change.pod
            elif change.type == "ADDED":
                assert uid not in watcher.state
                watcher.state[uid] = change.pod
            else:
                assert change.type == "MODIFIED"
                assert watcher.state[uid] == change.previous != change.pod
                watcher.state[uid] = change.pod

    @invariant()
    def history_bounded(self) -> None:
        if self.driver is not None:
            log = self.driver.cache._core.changes  # type: ignore[attr-defined]
            assert len(log) == self.model.head - self.model.base
            assert log.oldest == self.model.oldest
            assert len(log.cursors) == len(self.open_watchers)


class AsyncWatchAgainstModel(WatchAgainstModel):
    driver_type = AsyncDriver


TestWatchAgainstModel = WatchAgainstModel.TestCase
TestWatchAgainstModel.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
TestAsyncWatchAgainstModel = AsyncWatchAgainstModel.TestCase
TestAsyncWatchAgainstModel.settings = settings(
    max_examples=120, stateful_step_count=50, deadline=None
)
