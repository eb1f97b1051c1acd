"""Hypothesis stateful test of relists of one pod against a model (docs/architecture.md §7 rules
1-5 and 7, ``cache/podrelists.py`` invariants 1-6, ``cache/core.py`` invariant 8).

The freshness core is driven directly (it does no I/O): a model runtime whose pods change at
random (created, modified, removed; a UID is never reused), events for them (sent, dropped,
repeated), relists of one pod and full listings started when the core says and finished in
any order, some failing, and the clock moving. Each call reads the runtime as it was when the
call began: that is what "fetched at" means in the rules.

Invariants, after every step:
- no pod goes backward: a pod's version in the snapshot never decreases, and a pod that left
  the snapshot after the runtime removed it never comes back;
- the timestamp is the start of the last full listing stored, and never newer than any pod's
  data;
- coalescing: at most one relist per pod in flight and one pending, at most ``max_in_flight``
  in flight, at most ``max_pending`` pending;
- the budget (rule 7), as the clock moves by random steps and calls take random times: between
  the beginnings of any two relists, at least ``1 + EVENT_BUDGET`` times the durations of the
  relists that began in between and have ended; a pod's relist begins at least
  ``EVENT_BUDGET`` times its last one's duration after that one ended; and pods waiting with
  nothing in flight always have the driver's timer armed (the model fires it at its time);
- every publish hands the hooks' ``Publication`` the snapshot's own pods and changes;
and at quiescence (every call finished, every timer fired, the events delivered, no full
listing failed), the snapshot equals the runtime, and every event was followed by a successful
call for its pod (its relist, or a full listing) that began after it (or, for an event that
says when it happened, whose call began after that): events beyond the budget are coalesced,
never dropped; after one more full listing (the period's) the snapshot equals the runtime
whatever events were lost or listings failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from podcache import Container, ContainerID, ContainerState, Pod, PodList
from podcache.cache.changes import replay
from podcache.cache.core import FreshnessCore, Refresh
from podcache.cache.podrelists import EVENT_BUDGET, PodRelist, PodRelists

UIDS = [f"uid-{n}" for n in range(6)]
GONE = 10**9  # the version of a pod the runtime removed
SLACK = 1e-9  # float rounding in sums of durations


def pod_of(uid: str, version: int) -> Pod:
    """The runtime's pod ``uid`` at ``version`` (its creation order fixes its place)."""
    n = UIDS.index(uid)
    return Pod(
        id=uid,
        name=f"pod-{n}",
        namespace="default",
        created_at=100 - n,
        labels={"version": str(version)},
        containers=[
            Container(
                id=ContainerID("containerd", f"{n:02x}{version:06x}" + "0" * 56),
                name="app",
                state=ContainerState.RUNNING,
            )
        ],
    )


def version_of(pod: Pod) -> int:
    return int(pod.label("version") or 0)


@dataclass
class Runtime:
    """The model runtime: each UID's version (absent: not created yet, ``GONE``: removed)."""

    versions: dict[str, int] = field(default_factory=dict)

    def listing(self) -> PodList:
        pods = [pod_of(uid, v) for uid, v in self.versions.items() if v != GONE]
        return PodList(sorted(pods, key=lambda pod: (-pod.created_at, pod.id)))

    def pod(self, uid: str) -> Pod | None:
        version = self.versions.get(uid)
        return None if version is None or version == GONE else pod_of(uid, version)


class PodRelistMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.core: FreshnessCore[None] = FreshnessCore(1e9, lambda: None)
        self.core.pod_relists = PodRelists(max_in_flight=2, max_pending=3)
        self.runtime = Runtime()
        self.full: list[tuple[Refresh[None], PodList]] = []  # in flight, with their data
        self.relists: list[tuple[PodRelist, Pod | None]] = []
        self.stored_full_starts: list[float] = []
        self.highest: dict[str, int] = {}  # the highest version the snapshot ever showed
        self.left: set[str] = set()  # pods that left the snapshot after their removal
        self.lost_events = False
        self.state: dict[str, Pod] = {}  # replayed from the publications' changes
        self.changed_at: dict[str, float] = {}
        # Every call begun: its start number -> (pod uid, None for a full listing; began at;
        # ended at, None while in flight; succeeded).
        self.calls: dict[int, tuple[str | None, float, float | None, bool]] = {}
        self.begun: list[PodRelist] = []  # every relist, in start order
        self.ended: dict[int, float] = {}  # start number -> its end, for relists that ended
        self.last_end: dict[str, tuple[float, float]] = {}  # pod -> (its last relist's end, d)
        # Every event delivered: (pod, start numbers given before it, when it happened).
        self.events: list[tuple[str, int, float | None]] = []
        self.timers: list[float] = []  # the relist timers armed (the driver's), their times
        self.failed_full = False
        # The first fill, as a reader would make it.
        _, refresh, start = self.core.plan(self.now)
        assert refresh is not None and start
        refresh.started_wall = self.now
        self._complete_full(refresh, self.runtime.listing())

    # -- starting and finishing calls ----------------------------------------------------------
    def _begin_relists(self, relists: list[PodRelist]) -> None:
        for relist in relists:
            assert relist.started_at == self.now
            relist.started_wall = self.now  # the model's clock is the wall clock too
            self._check_budget(relist)
            self.begun.append(relist)
            self.calls[relist.order] = (relist.uid, self.now, None, False)
            self.relists.append((relist, self.runtime.pod(relist.uid)))
        self._arm()

    def _check_budget(self, relist: PodRelist) -> None:
        """Rule 6, on the relists begun so far and ended by now."""
        now = self.now
        ended = 0.0
        for earlier in reversed(self.begun):  # from the latest back: each window [s_j, now]
            end = self.ended.get(earlier.order)
            if end is not None:
                ended += end - earlier.started_at
            assert (1 + EVENT_BUDGET) * ended <= now - earlier.started_at + SLACK, (
                f"relists took {ended} s of the {now - earlier.started_at} s since {earlier}"
            )
        last = self.last_end.get(relist.uid)
        if last is not None:
            end, took = last
            assert now >= end + EVENT_BUDGET * took - SLACK, f"{relist.uid} relisted too soon"

    def _arm(self) -> None:
        """What a driver does after every step: arm the relist timer when the core asks."""
        delay = self.core.pod_arm(self.now)
        if delay is not None:
            self.timers.append(self.now + delay)

    def _begin_full(self, refresh: Refresh[None] | None) -> None:
        if refresh is not None:
            assert refresh.started_at == self.now
            refresh.started_wall = self.now
            self.calls[refresh.order] = (None, self.now, None, False)
            self.full.append((refresh, self.runtime.listing()))

    def _complete_full(self, refresh: Refresh[None], pods: PodList | None) -> None:
        error = None if pods is not None else RuntimeError("listing failed")
        self.lost_events |= error is not None  # what it was to bring waits for the period
        self.failed_full |= error is not None
        self.calls[refresh.order] = (None, refresh.started_wall, self.now, error is None)
        stored_before = self.core.snapshot[1]
        queued = self.core.complete(refresh, pods, error, self.now)
        if error is None and refresh.started_at is not None and refresh.started_at >= stored_before:
            self.stored_full_starts.append(refresh.started_at)
        self._take_publication()
        self._begin_full(queued)

    def _take_publication(self) -> None:
        published = self.core.take_published()
        if published is None:
            return
        assert published.pods is self.core.snapshot[0]
        assert published.revision == published.pods.revision
        assert published.timestamp == self.core.snapshot[1]
        replay(self.state, published.changes)
        assert self.state == {pod.id: pod for pod in published.pods}

    # -- rules ---------------------------------------------------------------------------------
    @rule(gap=st.sampled_from([0.0, 0.25, 1.0, 4.0]))
    def tick(self, gap: float) -> None:
        self.now += gap

    @rule(uid=st.sampled_from(UIDS), sent=st.sampled_from(["once", "twice", "lost"]))
    def change(self, uid: str, sent: str) -> None:
        """The runtime changes pod ``uid`` (created, modified, removed), and says so or not."""
        version = self.runtime.versions.get(uid, 0)
        if version == GONE:
            return
        self.runtime.versions[uid] = GONE if version >= 3 else version + 1
        self.changed_at[uid] = self.now
        if sent == "lost":
            self.lost_events = True
        for _ in range({"once": 1, "twice": 2, "lost": 0}[sent]):
            self._event(uid, self.now)

    @rule(uid=st.sampled_from(UIDS), timed=st.sampled_from(["untimed", "when", "older"]))
    def event(self, uid: str, timed: str) -> None:
        """An event for ``uid`` again (late, repeated or replayed: events are hints), without
        a time, with its change's, or with an older one."""
        changed = self.changed_at.get(uid, 0.0)
        self._event(uid, {"untimed": None, "when": changed, "older": changed - 5.0}[timed])

    def _event(self, uid: str, happened: float | None) -> None:
        self.events.append((uid, self.core.pod_relists.starts, happened))
        relists, full = self.core.pod_hint(uid, self.now, happened)
        self._begin_relists(relists)
        self._begin_full(full)

    @precondition(lambda self: self.relists)
    @rule(data=st.data(), fails=st.booleans())
    def finish_relist(self, data: st.DataObject, fails: bool) -> None:
        at = data.draw(st.integers(0, len(self.relists) - 1))
        relist, pod = self.relists.pop(at)
        self._finish_relist(relist, pod, RuntimeError("relist failed") if fails else None)

    def _finish_relist(self, relist: PodRelist, pod: Pod | None, error: Exception | None) -> None:
        self.ended[relist.order] = self.now
        self.last_end[relist.uid] = (self.now, self.now - relist.started_at)
        self.calls[relist.order] = (relist.uid, relist.started_wall, self.now, error is None)
        following, full = self.core.pod_complete(relist, pod, error, self.now)
        self._take_publication()
        self._begin_relists(following)
        self._begin_full(full)

    @precondition(lambda self: self.timers)
    @rule()
    def relist_timer(self) -> None:
        """The driver's relist timer ends at its time (the clock moved there meanwhile)."""
        self.timers.sort()
        self.now = max(self.now, self.timers.pop(0))
        relists, again = self.core.pod_fire(self.now)
        if again is not None:
            self.timers.append(self.now + again)
        self._begin_relists(relists)

    @rule()
    def reader(self) -> None:
        """A caller that needs data from now on (``force_update_if_older(now)``)."""
        _, refresh, start = self.core.plan(self.now, self.now)
        if start:
            self._begin_full(refresh)

    @rule()
    def timer(self) -> None:
        """The driver's timer, for a full listing that waits for the event budget."""
        self.core.arm(self.now)
        refresh, _ = self.core.fire(self.now)
        self._begin_full(refresh)

    @precondition(lambda self: self.full)
    @rule(fails=st.booleans())
    def finish_full(self, fails: bool) -> None:
        refresh, pods = self.full.pop(0)  # at most one in flight: the core's invariant 1
        self._complete_full(refresh, None if fails else pods)

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def no_pod_goes_backward(self) -> None:
        pods = self.core.snapshot[0]
        assert pods is not None
        present = {pod.id: version_of(pod) for pod in pods}
        for uid, version in present.items():
            assert uid not in self.left, f"{uid} came back after it left"
            assert version >= self.highest.get(uid, 0), f"{uid} went back to {version}"
            self.highest[uid] = version
        for uid in self.highest.keys() - present.keys():
            if self.runtime.versions.get(uid) == GONE:
                self.left.add(uid)

    @invariant()
    def the_timestamp_is_the_last_full_listing(self) -> None:
        timestamp = self.core.snapshot[1]
        assert timestamp == max(self.stored_full_starts)
        relists = self.core.pod_relists
        assert all(entry[0] > relists.listed for entry in relists.fetched.values())

    @invariant()
    def coalescing_holds(self) -> None:
        relists = self.core.pod_relists
        in_flight = [relist.uid for relist, _ in self.relists]
        assert len(in_flight) == len(set(in_flight)) == len(relists.inflight)
        assert len(in_flight) <= relists.max_in_flight
        assert relists.pending() <= relists.max_pending
        assert relists.queued.keys() <= relists.inflight.keys()
        assert not (relists.waiting.keys() & relists.inflight.keys())
        assert len(self.full) <= 1

    @invariant()
    def waiting_pods_have_a_way_to_start(self) -> None:
        relists = self.core.pod_relists
        if relists.waiting and not relists.inflight:
            assert self.timers, "pods wait with nothing in flight and no timer armed"
            assert min(self.timers) <= relists.budget_at

    def teardown(self) -> None:
        """Quiescence: every call finishes (successfully) and every timer fires, until none is
        left; then every event was followed by a call for its pod that began after it."""
        while self.relists or self.full or self.timers or self.core.queued is not None:
            if self.relists:
                relist, pod = self.relists.pop(0)
                self._finish_relist(relist, pod, None)
            elif self.full:
                refresh, pods = self.full.pop(0)
                self._complete_full(refresh, pods)
            elif self.timers:
                self.relist_timer()
            else:  # a full listing waits for the event budget: its timer ends at its time
                assert self.core.queued is not None
                self.now = max(self.now, self.core.due(self.core.queued))
                self._begin_full(self.core.fire(self.now)[0])
        assert not self.core.pod_relists.pending(), "pods left pending with nothing to start them"
        final = self.core.snapshot[0]
        assert final is not None
        if not self.lost_events:
            assert final == self.runtime.listing(), "events alone did not bring the snapshot up"
        if not self.failed_full:
            for uid, mark, happened in self.events:
                assert self._followed(uid, mark, happened), f"an event for {uid} was dropped"
        self.now += 1.0
        _, last, start = self.core.plan(self.now, self.now)  # the period's full listing
        assert last is not None and start
        last.started_wall = self.now
        self._complete_full(last, self.runtime.listing())
        assert self.core.snapshot[0] == self.runtime.listing()

    def _followed(self, uid: str, mark: int, happened: float | None) -> bool:
        """Whether a successful call for pod ``uid`` began after an event that came when
        ``mark`` start numbers were given (and, with ``happened``, after it happened)."""
        return any(
            succeeded
            and pod in (uid, None)
            and (order > mark or (happened is not None and happened < began))
            for order, (pod, began, _, succeeded) in self.calls.items()
        )


PodRelistMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None
)
test_pod_relists_against_a_model = PodRelistMachine.TestCase
