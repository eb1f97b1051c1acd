"""AsyncCRIRuntime's list calls and their answers' bytes stay off the event loop; the cyclic
garbage collector is paused while a listing is read and converted.

Over real gRPC to the simulated runtime. The list calls go through a sync channel in worker
threads (``listcalls._ListCaller``): the event loop only receives the finished bytes. Cancelling
the awaiting task cancels the gRPC call it waits for.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from podcache.cri import AsyncCRIRuntime, CRIRuntime, caller, converter, listcalls
from podcache.cri.proto import api_pb2 as pb
from podcache.errors import CRIError
from podcache.sim import SimRuntime


@pytest.fixture
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(pods=200, seed=11) as runtime:
        yield runtime


async def test_list_calls_are_made_in_worker_threads_and_give_the_sync_twins_pods(
    sim: SimRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, threading.Thread]] = []
    invoke = listcalls._ListCaller._invoke

    def recording(self: Any, line: Any, method: str, request: Any, timeout: float) -> object:
        calls.append((method, threading.current_thread()))
        return invoke(self, line, method, request, timeout)

    statuses = caller.SyncCaller.statuses

    def recording_statuses(self: Any, sandbox_ids: Any) -> Any:
        calls.extend(("PodSandboxStatus", threading.current_thread()) for _ in sandbox_ids)
        return statuses(self, sandbox_ids)

    monkeypatch.setattr(listcalls._ListCaller, "_invoke", recording)
    monkeypatch.setattr(caller.SyncCaller, "statuses", recording_statuses)
    async with AsyncCRIRuntime(sim.endpoint) as runtime:
        first = await runtime.get_pods()
        second = await runtime.get_pods(all=True)
    loop_thread = threading.current_thread()
    lists = [method for method, _ in calls if method != "PodSandboxStatus"]
    # Version first, once (the sim streams lists)
    assert lists == ["Version", *["StreamPodSandboxes", "StreamContainers"] * 2]
    asked = [method for method, _ in calls if method == "PodSandboxStatus"]
    assert len(asked) == runtime.status_calls > 0  # once per READY sandbox, in threads too
    assert all(thread is not loop_thread for _, thread in calls)
    with CRIRuntime(sim.endpoint) as sync_runtime:
        assert first == sync_runtime.get_pods()
        assert second == sync_runtime.get_pods(all=True)


async def test_cancelling_get_pods_cancels_the_list_call_in_flight(
    sim: SimRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    attached: list[grpc.Future[Any]] = []
    attach = listcalls._CallHandle.attach

    def recording(self: Any, call: grpc.Future[Any]) -> None:
        attached.append(call)
        attach(self, call)

    monkeypatch.setattr(listcalls._CallHandle, "attach", recording)
    async with AsyncCRIRuntime(sim.endpoint, timeout=10.0) as runtime:
        await runtime.version()
        attached.clear()  # Version's call: the list call is the one watched
        sim.faults.hang()
        try:
            task = asyncio.create_task(runtime.get_pods())
            deadline = time.monotonic() + 5.0
            while not attached:
                assert time.monotonic() < deadline, "the list call was never made"
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            call = attached[-1]
            deadline = time.monotonic() + 2.0
            while not call.done():
                assert time.monotonic() < deadline, "the cancelled task's call goes on"
                await asyncio.sleep(0.01)
            assert call.cancelled()
        finally:
            sim.faults.release()
        pods = await runtime.get_pods()  # the getter is still usable
    with CRIRuntime(sim.endpoint) as sync_runtime:
        assert pods == sync_runtime.get_pods()


async def test_a_handle_cancelled_before_its_call_cancels_the_call_at_once(
    sim: SimRuntime,
) -> None:
    with CRIRuntime(sim.endpoint) as sync_runtime:
        sync_runtime.version()
        sim.faults.hang()
        try:
            line = sync_runtime._caller.line
            call = line.rpcs["Version"].future(
                pb.VersionRequest(), timeout=10.0, wait_for_ready=True
            )
            handle = listcalls._CallHandle()
            handle.cancel()
            handle.attach(call)  # a retry made after the task gave up
            assert call.cancelled()
        finally:
            sim.faults.release()


async def test_the_collector_is_paused_while_a_listing_is_converted(
    sim: SimRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []
    convert = getattr(converter, "pods_from_listings")  # noqa: B009 (not exported)

    def recording(*args: Any) -> Any:
        seen.append(gc.isenabled())
        return convert(*args)

    monkeypatch.setattr(converter, "pods_from_listings", recording)
    assert gc.isenabled()
    async with AsyncCRIRuntime(sim.endpoint) as runtime:
        await runtime.get_pods()
        assert gc.isenabled()  # on again once the conversion ended
    assert seen == [False]


def test_gc_pauses_nest_across_threads_and_keep_a_disabled_collector_off() -> None:
    pause = converter._GCPause()
    assert gc.isenabled()
    inner_entered, outer_may_leave, inner_may_leave = (threading.Event() for _ in range(3))
    states: list[tuple[str, bool]] = []

    def inner() -> None:
        with pause():
            inner_entered.set()
            inner_may_leave.wait(5)
        states.append(("inner left", gc.isenabled()))

    try:
        thread = threading.Thread(target=inner)
        with pause():
            states.append(("outer in", gc.isenabled()))
            thread.start()
            assert inner_entered.wait(5)
            outer_may_leave.set()
        states.append(("outer left, inner in", gc.isenabled()))
        inner_may_leave.set()
        thread.join(5)
        assert states == [
            ("outer in", False),
            ("outer left, inner in", False),
            ("inner left", True),
        ]
        gc.disable()
        with pause():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off before: the pause leaves it off
    finally:
        gc.enable()


async def test_close_during_a_list_call_ends_it_with_the_thread_twins_error(
    sim: SimRuntime,
) -> None:
    runtime = AsyncCRIRuntime(sim.endpoint, timeout=10.0)
    await runtime.version()
    sim.faults.hang()
    try:
        task = asyncio.create_task(runtime.get_pods())
        await asyncio.sleep(0.2)  # the call is waiting in the runtime
        started = time.monotonic()
        await runtime.close()
        with pytest.raises(
            CRIError, match=r"StreamPodSandboxes was cancelled after .* s: AsyncCRIRuntime closed"
        ):
            await task  # cancelled by close while the hang still holds: close did not wait
        assert time.monotonic() - started < 5.0  # long before the call's 10 s deadline
    finally:
        sim.faults.release()
