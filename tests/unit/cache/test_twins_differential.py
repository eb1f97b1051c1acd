"""The twins held to one specification by their differences: ``RuntimeCache`` and
``AsyncRuntimeCache`` (with events and relists of one pod) driven by the same generated script
must be seen to do the same things, step by step.

A script mixes the runtime's changes, its failures, the clock moving, readers (``get_pods``,
``force_update_if_older``) and container events naming a pod, an unknown container or
nothing. After each step both caches are let run until nothing is in flight (no full listing,
no relist of one pod, none waiting), then observed: what the reader got (pods or the error's
type), the getter's calls (full listings and relists), the snapshot's revision and time, and
every counter of ``stats()``. The observations must be equal; the scheduling both drivers
share (``cache.scheduling``, ``cache.core``) is then the only thing that decides.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache import ContainerEvent, ContainerEventType, ContainerState, Pod
from podcache.errors import RuntimeUnavailableError
from tests.unit.cache.drivers import AsyncEventsDriver, FakeClock, SyncEventsDriver, make_pod

PERIOD = 60.0
WAIT = 10.0

Twin = SyncEventsDriver | AsyncEventsDriver

_pods = st.dictionaries(st.integers(1, 6), st.booleans(), max_size=5).map(
    lambda chosen: ("pods", tuple(sorted(chosen.items(), reverse=True)))
)
_step = st.one_of(
    _pods,
    st.tuples(st.just("advance"), st.sampled_from([0.0, 1.0, 30.0, 61.0])),
    st.just(("get",)),
    st.just(("force",)),
    st.tuples(st.just("event"), st.one_of(st.none(), st.integers(1, 6))),
    st.tuples(st.just("fail"), st.sampled_from(["none", "pods", "pod"])),
)


def _pod(n: int, stopped: bool) -> Pod:
    pod = make_pod(n)
    if not stopped:
        return pod
    exited = [msgspec.structs.replace(c, state=ContainerState.EXITED) for c in pod.containers]
    return msgspec.structs.replace(pod, containers=tuple(exited))


def _event(target: int | None) -> ContainerEvent:
    """An event naming pod ``uid-n``, or (None) a container no pod holds."""
    if target is None:
        return ContainerEvent(type=ContainerEventType.STOPPED, container_id="nobody-holds-this")
    return ContainerEvent(
        type=ContainerEventType.STOPPED, container_id="c", pod_uid=f"uid-{target}"
    )


def _quiet(twin: Twin) -> bool:
    """Nothing in flight or waiting: no full listing, no relist of one pod (and, on the loop,
    no task left)."""
    core = twin.cache._core
    relists = core.pod_relists
    idle = core.inflight is None and core.queued is None
    idle = idle and not relists.inflight and not relists.pending()
    if isinstance(twin, AsyncEventsDriver):
        return idle and not twin.cache._tasks
    return idle and twin.cache._pod_busy == 0 and twin.cache._pod_jobs.empty()


def _settle(twin: Twin, done: Callable[[], bool]) -> None:
    """Let the twin's threads or loop run until ``done()`` and nothing is in flight."""
    deadline = time.monotonic() + WAIT
    while not (done() and _quiet(twin)):
        assert time.monotonic() < deadline, f"{twin.name} never settled"
        if isinstance(twin, AsyncEventsDriver):
            twin.loop.run_until_complete(asyncio.sleep(0.001))
        else:
            time.sleep(0.001)


def _read(twin: Twin, call: Callable[[], Any]) -> object:
    """What a reader got: the pods' UIDs and states, None, or the type of its error."""
    try:
        got = call()
    except RuntimeUnavailableError as error:
        return type(error).__name__
    if got is None:
        return None
    return [(pod.id, [c.state for c in pod.containers]) for pod in got]


def _apply(twin: Twin, clock: FakeClock, step: tuple[Any, ...], events: list[int]) -> object:
    """Do one step of the script on ``twin``; what a reader got, if the step reads."""
    kind = step[0]
    if kind == "pods":
        twin.fake.set_pods([_pod(n, stopped) for n, stopped in step[1]])
    elif kind == "advance":
        clock.advance(step[1])
    elif kind == "get":
        return _read(twin, twin.get)
    elif kind == "force":
        return _read(twin, lambda: twin.force(clock.now))
    elif kind == "event":
        events[0] += 1
        twin.fake.emit(_event(step[1]))
        _settle(twin, lambda: twin.stats().events_received == events[0])
    else:
        failure = RuntimeUnavailableError("fake://runtime", "down")
        twin.fake.error = failure if step[1] == "pods" else None
        twin.fake.pod_error = failure if step[1] == "pod" else None
    return None


def _observe(twin: Twin, read: object) -> tuple[object, ...]:
    _settle(twin, lambda: True)
    stats = twin.stats()
    timings = ("last_refresh_duration", "age", "last_event_age")
    counted = {k: v for k, v in dataclasses.asdict(stats).items() if k not in timings}
    return (read, twin.fake.calls, twin.fake.pod_calls, twin.cache_time, counted)


def _run(twin_type: type[Twin], script: list[tuple[Any, ...]]) -> list[tuple[object, ...]]:
    clock = FakeClock()
    twin = twin_type(PERIOD, clock)
    try:
        twin.fake.set_pods([make_pod(2), make_pod(1)])
        twin.get()
        events = [0]
        return [_observe(twin, _apply(twin, clock, step, events)) for step in script]
    finally:
        twin.fake.error = twin.fake.pod_error = None
        twin.close()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(_step, min_size=1, max_size=12))
def test_the_twins_do_the_same_on_the_same_script(script: list[tuple[Any, ...]]) -> None:
    threads = _run(SyncEventsDriver, script)
    tasks = _run(AsyncEventsDriver, script)
    for number, (step, seen_threads, seen_tasks) in enumerate(
        zip(script, threads, tasks, strict=True)
    ):
        assert seen_threads == seen_tasks, f"step {number} {step}"


@pytest.mark.parametrize("twin_type", [SyncEventsDriver, AsyncEventsDriver])
def test_the_observation_sees_a_relist_and_a_listing(twin_type: type[Twin]) -> None:
    """The observation can tell steps apart: an event naming a pod is a relist, one naming
    nothing is a full listing (so a driver that did either differently would differ)."""
    seen = _run(twin_type, [("event", 1), ("event", None)])
    (_, calls, pod_calls, _, _), (_, calls_after, pod_calls_after, _, _) = seen
    assert (calls, pod_calls) == (1, 1)
    assert (calls_after, pod_calls_after) == (2, 1)
