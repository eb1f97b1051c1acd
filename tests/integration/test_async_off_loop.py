"""AsyncCRIRuntime never reads or converts a listing on the event loop (issue 12 section 7).

Over real gRPC to the simulated runtime: the readers and the conversion run in the runtime's
worker thread, and the event loop keeps ticking while a (deliberately slowed) conversion runs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from podcache.cri import AsyncCRIRuntime, CRIRuntime, converter
from podcache.sim import SimRuntime

SLOW = 0.3  # seconds each slowed conversion step sleeps


@pytest.fixture
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(pods=300, seed=5) as runtime:
        yield runtime


def _recording(
    function: Callable[..., Any], threads: list[threading.Thread], delay: float = 0.0
) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        threads.append(threading.current_thread())
        time.sleep(delay)
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


async def test_the_event_loop_keeps_ticking_while_a_slow_conversion_runs(
    sim: SimRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[threading.Thread] = []
    convert = getattr(converter, "pods_from_listings")  # noqa: B009 (not exported)
    monkeypatch.setattr(converter, "pods_from_listings", _recording(convert, threads, SLOW))
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            before = time.monotonic()
            await asyncio.sleep(0.005)
            lags.append(time.monotonic() - before - 0.005)

    async with AsyncCRIRuntime(sim.endpoint) as runtime:
        await runtime.get_pods()  # connect and learn the version first
        tick = asyncio.create_task(ticker())
        started = time.monotonic()
        await runtime.get_pods()
        elapsed = time.monotonic() - started
        done.set()
        await tick
    assert elapsed >= SLOW  # the slow conversion did run inside this call
    assert len(lags) >= 10
    assert max(lags) < SLOW / 2, f"the loop stalled {max(lags):.3f} s"


async def test_close_during_a_conversion_does_not_hang(
    sim: SimRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[threading.Thread] = []
    convert = getattr(converter, "pods_from_listings")  # noqa: B009 (not exported)
    monkeypatch.setattr(converter, "pods_from_listings", _recording(convert, threads, SLOW))
    runtime = AsyncCRIRuntime(sim.endpoint)
    call = asyncio.create_task(runtime.get_pods())
    while not threads:
        await asyncio.sleep(0.01)
    started = time.monotonic()
    await runtime.close()
    assert time.monotonic() - started < SLOW
    await call  # the conversion already running ends normally
