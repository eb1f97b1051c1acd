"""``networks``: what a sandbox status makes of a pod's network, and the memo's bounds (issue
23 §1): invalid strings dropped and counted, a host-network sandbox's strings ignored, an
event's status remembered only for a READY sandbox, at most ``MEMO_MAX`` entries, at most
``STATUS_ATTEMPTS`` calls for a sandbox that keeps failing, entries dropped when their
sandbox leaves a full listing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from podcache import Container, ContainerID, ContainerState, Pod, PodList
from podcache.cri import networks
from podcache.cri.eventwire import EventFields
from podcache.cri.networks import (
    STATUS_ATTEMPTS,
    STATUS_CONCURRENCY,
    UNCONFIRMED_MAX,
    NetworkMemo,
    SandboxNetwork,
    StatusBatch,
    StatusReader,
    loop_turn,
    network_of,
)


def fields(
    sid: str = "s",
    ip: str = "",
    extra: tuple[str, ...] = (),
    mode: int = 0,
    state: int = 0,
    *,
    uid: str = "u",
) -> EventFields:
    return EventFields(0, "", 0, sid, uid, state, ip, extra, 0, mode)


def batch_of(call: Callable[[str], EventFields]) -> StatusBatch:
    """A fake ``StatusBatch``: ``call`` for each sandbox in turn, its exception that one's
    outcome."""

    def batch(sandbox_ids: Sequence[str]) -> list[EventFields | Exception]:
        outcomes: list[EventFields | Exception] = []
        for sid in sandbox_ids:
            try:
                outcomes.append(call(sid))
            except Exception as failure:  # the fake's failures are its outcomes
                outcomes.append(failure)
        return outcomes

    return batch


def test_addresses_are_canonical_primary_first_each_once_and_junk_is_counted() -> None:
    got = network_of(fields(ip="FD00::0:7", extra=("10.0.0.7", "fd00::7", "10.0.0.300", "", "x")))
    assert got == (SandboxNetwork(("fd00::7", "10.0.0.7"), False), 2)


def test_a_host_network_sandbox_has_no_ips_of_its_own() -> None:
    assert network_of(fields(ip="192.168.1.10", mode=2)) == (SandboxNetwork((), True), 0)


def test_additional_ips_past_the_bound_count_as_dropped() -> None:
    status = EventFields(0, "", 0, "s", "u", 0, "10.0.0.1", ("10.0.0.2",), 5, 0)
    assert network_of(status) == (SandboxNetwork(("10.0.0.1", "10.0.0.2"), False), 5)


def test_only_a_ready_sandboxs_event_status_is_remembered() -> None:
    memo = NetworkMemo()
    memo.learn_event(fields("gone", ip="10.0.0.1", state=1))
    memo.learn_event(fields("", ip="10.0.0.2"))
    memo.learn_event(fields("early", ip=""))  # no address yet: a call will ask
    assert len(memo) == 0
    memo.learn_event(fields("host", mode=2))
    assert memo.get("host") == SandboxNetwork((), True)
    memo.learn_event(fields("live", ip="10.0.0.3"))
    assert memo.get("live") == SandboxNetwork(("10.0.0.3",), False)


def test_the_memo_never_holds_more_than_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(networks, "MEMO_MAX", 4)
    memo = NetworkMemo()
    for n in range(10):
        memo.learn(f"s{n}", fields(ip=f"10.0.0.{n}"), f"pod{n}")
        assert len(memo) <= 4
    assert [memo.get(f"s{n}") is not None for n in range(10)] == [False] * 6 + [True] * 4


def test_a_full_listing_drops_sandboxes_it_no_longer_lists() -> None:
    memo = NetworkMemo()
    for sid in ("a", "b", "c"):
        memo.learn(sid, fields(ip="10.0.0.1"), f"pod-{sid}")
    listing = memo.begin(full=True)
    assert listing.network("a") is not None and listing.network("new") is None
    memo.finish(listing, {})
    assert memo.get("a") is not None and memo.get("b") is None and memo.get("c") is None
    assert listing.wanted == ["new"]


def test_a_sandbox_that_keeps_failing_is_asked_at_most_status_attempts_times() -> None:
    memo = NetworkMemo()
    calls: list[str] = []

    def failing(sid: str) -> EventFields:
        calls.append(sid)
        raise OSError("no answer")

    for _ in range(STATUS_ATTEMPTS + 4):
        listing = memo.begin(full=True)
        listing.network("stuck")
        assert memo.ask_all(memo.to_ask(listing), batch_of(failing)) in ([None], [])
        memo.finish(listing, {})
    assert calls == ["stuck"] * STATUS_ATTEMPTS
    assert memo.status_failures == memo.status_calls == STATUS_ATTEMPTS


def test_a_batch_that_fails_whole_fails_each_of_its_sandboxes() -> None:
    memo = NetworkMemo()

    def broken(sandbox_ids: Sequence[str]) -> list[EventFields | Exception]:
        raise OSError("connection refused")

    assert memo.ask_all(["a", "b"], broken) == [None, None]
    assert memo.status_failures == memo.status_calls == 2
    ok = batch_of(lambda sid: fields(sid, ip="10.0.0.4"))
    assert memo.ask_all(["a", "b"], ok) == [SandboxNetwork(("10.0.0.4",), False)] * 2
    assert memo.status_calls == 4


def test_a_batch_that_answers_another_number_of_sandboxes_is_an_error() -> None:
    with pytest.raises(ValueError, match="2 statuses asked, 1 answered"):
        NetworkMemo().ask_all(["a", "b"], lambda ids: [fields("a", ip="10.0.0.4")])


def test_a_network_learnt_while_a_listing_ran_reaches_its_pods_with_no_call() -> None:
    """Two listings at once (the running and the all view share a getter), or an event: the
    sandbox one listing missed was learnt by the other before it asks; it must not be left
    without IPs, nor asked again."""
    memo = NetworkMemo()
    calls: list[str] = []

    def call(sid: str) -> EventFields:
        calls.append(sid)
        return fields(sid, ip="10.0.0.5")

    sandbox = Container(id=ContainerID("x", "s1"), state=ContainerState.RUNNING)
    pods = PodList([Pod(id="u", sandboxes=[sandbox])])
    listing = memo.begin(full=True)
    assert listing.network("s1") is None  # converted before anyone knew
    memo.learn("s1", fields("s1", ip="10.0.0.5"))  # the other listing's call, or an event
    done = StatusReader(memo, batch_of(call)).complete(pods, listing, full=True)
    assert done[0].ips == ("10.0.0.5",)
    assert calls == []


# -- pacing: a cold start's rounds of status calls yield to the event loop -------------------------
class RecordingLoop:
    """An event loop as ``loop_turn`` sees it, logging when a turn is asked for and when the
    loop runs it (the callback runs in the loop's thread, so the log shows who came first)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, log: list[str]) -> None:
        self._loop = loop
        self._log = log

    def call_soon_threadsafe(self, callback: Callable[[], object]) -> None:
        self._log.append("ask turn")

        def turn() -> None:
            self._log.append("turn")
            callback()

        self._loop.call_soon_threadsafe(turn)


@pytest.fixture
def running_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def many_pods(count: int) -> tuple[PodList, list[str]]:
    ids = [f"s{n:03d}" for n in range(count)]
    pods = [
        Pod(
            id=f"u{n:03d}",
            sandboxes=[Container(id=ContainerID("x", sid), state=ContainerState.RUNNING)],
        )
        for n, sid in enumerate(ids)
    ]
    return PodList(pods), ids


def test_each_round_of_status_calls_begins_after_the_event_loop_ran_a_turn(
    running_loop: asyncio.AbstractEventLoop,
) -> None:
    log: list[str] = []

    def call(sid: str) -> EventFields:
        log.append("call")
        return fields(sid, ip="10.0.0.9")

    pods, ids = many_pods(3 * STATUS_CONCURRENCY + 3)
    memo = NetworkMemo()
    listing = memo.begin(full=True)
    for sid in ids:
        listing.network(sid)
    pace = loop_turn(RecordingLoop(running_loop, log))  # type: ignore[arg-type]
    done = StatusReader(memo, batch_of(call)).complete(pods, listing, full=True, pace=pace)
    assert all(pod.ips == ("10.0.0.9",) for pod in done)
    # A turn is asked for only once the round before it ended, and nothing runs meanwhile.
    assert "".join("c" if e == "call" else "a" if e == "ask turn" else "t" for e in log) == (
        ("c" * STATUS_CONCURRENCY + "at") * 3 + "ccc"
    )


def test_no_second_round_while_the_event_loop_is_held(
    running_loop: asyncio.AbstractEventLoop,
) -> None:
    log: list[str] = []
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        held.set()
        release.wait()

    running_loop.call_soon_threadsafe(hold)
    assert held.wait(30)

    def call(sid: str) -> EventFields:
        log.append("call")
        return fields(sid, ip="10.0.0.9")

    pods, ids = many_pods(2 * STATUS_CONCURRENCY)
    memo = NetworkMemo()
    listing = memo.begin(full=True)
    for sid in ids:
        listing.network(sid)
    pace = loop_turn(RecordingLoop(running_loop, log))  # type: ignore[arg-type]
    reader = threading.Thread(
        target=StatusReader(memo, batch_of(call)).complete,
        args=(pods, listing),
        kwargs={"full": True, "pace": pace},
    )
    reader.start()
    try:
        waited = 0
        while "ask turn" not in log and log.count("call") <= STATUS_CONCURRENCY and waited < 3000:
            time.sleep(0.01)  # until the first round ended (or, unpaced, the second began)
            waited += 1
        assert log.count("call") == STATUS_CONCURRENCY  # the loop is held: no second round
    finally:
        release.set()
    reader.join(30)
    assert log.count("call") == 2 * STATUS_CONCURRENCY


# -- bounds without a full listing --------------------------------------------------------------
def one_pod(uid: str, sid: str | None) -> PodList:
    if sid is None:
        return PodList([])
    return PodList(
        [Pod(id=uid, sandboxes=[Container(id=ContainerID("x", sid), state=ContainerState.RUNNING)])]
    )


def relist(reader: StatusReader, uid: str, sid: str | None) -> PodList:
    """A relist of pod ``uid`` as ``CRIRuntime.get_pod`` makes it: the pod's newest READY
    sandbox looked up, asked for when missing, the entry settled."""
    listing = reader.memo.begin(full=False, pod=uid)
    if sid is not None:
        listing.network(sid)
    return reader.complete(one_pod(uid, sid), listing, full=False)


def test_churn_with_no_full_listing_keeps_the_memo_at_the_nodes_pods() -> None:
    """100 pods/s with nobody reading: only relists run. Every table stays at the node's
    pods (10 here), where ``_known`` and ``_learnt`` grew by one per pod created."""
    reader = StatusReader(NetworkMemo(), batch_of(lambda sid: fields(sid, ip="10.1.0.1", uid="")))
    for n in range(10):
        relist(reader, f"pod{n}", f"s{n}")
    for n in range(10, 3_000):
        assert relist(reader, f"pod{n}", f"s{n}")[0].ips == ("10.1.0.1",)
        relist(reader, f"pod{n - 10}", None)  # its removal's relist: gone
        assert max(reader.memo.sizes().values()) <= 10
    assert reader.memo.status_calls == 3_000


def test_a_pods_new_sandbox_replaces_its_old_entry() -> None:
    memo = NetworkMemo()
    memo.learn("s1", fields("s1", ip="10.0.0.1", uid="p"))
    memo.learn_event(fields("s2", ip="10.0.0.2", uid="p"))  # the pod's sandbox re-created
    assert memo.get("s1") is None and memo.get("s2") is not None and len(memo) == 1


def test_events_for_sandboxes_never_listed_are_bounded() -> None:
    """A runtime sending READY-sandbox events with new IPs (2,000/s reached MEMO_MAX in 33 s):
    what no listing or relist used is kept at most ``UNCONFIRMED_MAX``, the oldest going."""
    memo = NetworkMemo()
    for n in range(3 * UNCONFIRMED_MAX):
        memo.learn_event(fields(f"x{n}", ip="10.2.0.1", uid=f"fake{n}"))
        assert max(memo.sizes().values()) <= UNCONFIRMED_MAX
    assert memo.get(f"x{3 * UNCONFIRMED_MAX - 1}") is not None and memo.get("x0") is None
    listing = memo.begin(full=False, pod="fake-last")
    assert listing.network(f"x{3 * UNCONFIRMED_MAX - 1}") is not None


class CountingTable(OrderedDict[str, SandboxNetwork]):
    """The memo's table, counting the entries any walk of it visits."""

    visited = 0

    def __iter__(self) -> Iterator[str]:
        for key in super().__iter__():
            CountingTable.visited += 1
            yield key

    def items(self) -> Any:
        for item in super().items():
            CountingTable.visited += 1
            yield item


def test_learning_at_the_bound_visits_one_entry_not_the_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At ``MEMO_MAX`` every learn copied the whole table (65,536 entries per event: CPU
    0.28 -> 1.01 of a core); the oldest must go without a walk."""
    monkeypatch.setattr(networks, "MEMO_MAX", 500)
    memo = NetworkMemo()
    for n in range(500):
        memo.learn(f"s{n}", fields(f"s{n}", ip="10.0.0.1", uid=f"p{n}"))
    memo._known = CountingTable(memo._known)
    CountingTable.visited = 0
    for n in range(500, 600):
        memo.learn(f"s{n}", fields(f"s{n}", ip="10.0.0.1", uid=f"p{n}"))
        assert len(memo) <= 500
    assert CountingTable.visited <= 100
