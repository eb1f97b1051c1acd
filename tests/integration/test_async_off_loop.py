"""AsyncCRIRuntime never reads or converts a listing on the event loop.

Over real gRPC to the simulated runtime: the readers and the conversion run in the runtime's
worker thread, and the event loop keeps running while a conversion is held in its worker.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from podcache.cri import AsyncCRIRuntime, CRIRuntime, converter
from podcache.sim import SimRuntime


@pytest.fixture
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(pods=300, seed=5) as runtime:
        yield runtime


def _recording(function: Callable[..., Any], threads: list[threading.Thread]) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        threads.append(threading.current_thread())
        return function(*args)

    return wrapper


async def test_list_answers_are_read_and_converted_off_the_event_loop(
    sim: SimRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[threading.Thread] = []
    for method, reader in list(converter._READERS.items()):
        monkeypatch.setitem(converter._READERS, method, _recording(reader, threads))
    convert = getattr(converter, "pods_from_listings")  # noqa: B009 (not exported)
    monkeypatch.setattr(converter, "pods_from_listings", _recording(convert, threads))
    async with AsyncCRIRuntime(sim.endpoint) as runtime:
        pods = await runtime.get_pods()
    loop_thread = threading.current_thread()
    assert len(threads) >= 3  # the readers (once per piece of an answer), one conversion
    assert all(thread is not loop_thread for thread in threads)
    with CRIRuntime(sim.endpoint) as sync_runtime:
        assert pods == sync_runtime.get_pods()  # the same answer as the thread twin


class HeldConversion:
    """The conversion, held in its worker until the test releases it: what the loop does
    meanwhile, and whether the test (not ``GATE_TIMEOUT``) released it, show whether anything
    waited for the conversion. A conversion run on the loop would block the loop until the
    timeout: ``released_by_test`` would then be ``[False]``."""

    GATE_TIMEOUT = 30.0

    def __init__(self, convert: Callable[..., Any]) -> None:
        self._convert = convert
        self.started = threading.Event()
        self.gate = threading.Event()
        self.threads: list[threading.Thread] = []
        self.released_by_test: list[bool] = []

    def __call__(self, *args: Any) -> Any:
        self.threads.append(threading.current_thread())
        self.started.set()
        self.released_by_test.append(self.gate.wait(self.GATE_TIMEOUT))
        return self._convert(*args)

    async def wait_started(self) -> None:
        while not self.started.is_set():
            await asyncio.sleep(0.005)  # the loop runs while the worker gets there


async def test_the_event_loop_keeps_ticking_while_a_slow_conversion_runs(
    sim: SimRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    convert = getattr(converter, "pods_from_listings")  # noqa: B009 (not exported)
    held = HeldConversion(convert)
    async with AsyncCRIRuntime(sim.endpoint) as runtime:
        await runtime.get_pods()  # connect and learn the version first
        monkeypatch.setattr(converter, "pods_from_listings", held)
        call = asyncio.create_task(runtime.get_pods())
        await held.wait_started()
        for _ in range(3):  # the loop goes on while the conversion is held in its worker
            await asyncio.sleep(0.005)
        assert not call.done()
        held.gate.set()
        pods = await call
    assert held.released_by_test == [True]
    assert held.threads[0] is not threading.current_thread()
    assert len(pods) > 0


async def test_close_during_a_conversion_does_not_hang(
    sim: SimRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    convert = getattr(converter, "pods_from_listings")  # noqa: B009 (not exported)
    held = HeldConversion(convert)
    monkeypatch.setattr(converter, "pods_from_listings", held)
    runtime = AsyncCRIRuntime(sim.endpoint)
    call = asyncio.create_task(runtime.get_pods())
    await held.wait_started()
    await runtime.close()  # returns while the conversion is still held
    held.gate.set()
    await call  # the conversion already running ends normally
    assert held.released_by_test == [True]
