"""What the operator is told about the event subscription (``cache/events.py``
rules 4 and 5): each change of the reported state is logged once, at WARNING with its cause
(the first subscription and the close at INFO), every line naming the method and the endpoint;
every failed attempt is counted, also those that never opened a stream. On the I/OPEN-free
``Subscription`` (table-driven), and through both drivers over the fakes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import pytest

from podcache import AsyncFakeRuntime, AsyncRuntimeCache, FakeRuntime, RuntimeCache
from podcache.cache.events import ENDED, METHOD, Signal, Subscription, cause_of
from podcache.errors import RuntimeUnavailableError
from tests.unit.cache.drivers import FakeClock, make_pod

ENDPOINT = "unix:///run/x.sock"
OPEN, F, U, N = Signal.OPENED, Signal.FAILED, Signal.UNREACHABLE, Signal.UNSUPPORTED

# (signals in order, each failure's cause "c<i>"), the WARNING lines expected (substrings, in
# order), the failures counted.
CASES = [
    ([OPEN], [], 0),
    ([OPEN, F], ["stream lost: c1"], 1),
    ([F], ["cannot subscribe: c0"], 1),  # the first open fails: said, and counted
    ([F, F, U, U, F], ["cannot subscribe: c0"], 5),  # one outage: one line
    # A runtime down (or restarted) before the first subscription: it ends with the first,
    # never said to be subscribed "again" (rule 4: no resubscription either).
    ([F, U, OPEN], ["cannot subscribe: c0", "subscribed after 2 failed attempts"], 2),
    ([OPEN, F, F, U, OPEN], ["stream lost: c1", "subscribed again after 3 failed attempts"], 3),
    (
        [OPEN, F, OPEN, F, OPEN],
        ["stream lost: c1", "again after 1 failed attempt in", "lost: c3", "again"],
        2,
    ),
    ([N, N, N], ["sends no container events (c0)"], 3),  # once per cache (rule 3)
    ([N, OPEN], ["sends no container events (c0)", "now streams container events"], 1),
    ([OPEN, N, F, N], ["sends no container events (c1)", "cannot subscribe: c2"], 3),
]


def run_signals(signals: list[Signal]) -> Subscription:
    sub = Subscription(ENDPOINT, FakeClock())
    for index, signal in enumerate(signals):
        sub.on(signal, f"c{index}" if signal is not OPEN else None)
    return sub


@pytest.mark.parametrize(("signals", "said", "failures"), CASES)
def test_each_change_is_one_warning_with_its_cause_and_every_failure_counts(
    caplog: pytest.LogCaptureFixture, signals: list[Signal], said: list[str], failures: int
) -> None:
    with caplog.at_level(logging.DEBUG, "podcache.cache"):
        sub = run_signals(signals)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == len(said), warnings
    for line, words in zip(warnings, said, strict=True):
        assert words in line, (line, words)
    for record in caplog.records:  # every line, any level, names the method and the endpoint
        assert METHOD in record.getMessage() and ENDPOINT in record.getMessage()
    assert sub.failures == failures
    assert sub.counters().failures == failures


def test_the_first_subscription_and_the_close_are_info(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, "podcache.cache"):
        sub = run_signals([OPEN])
        sub.on(Signal.CLOSE)
    levels = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in levels] == [logging.INFO, logging.INFO]
    assert "subscribed" in levels[0][1] and "closed" in levels[1][1]


def test_causes_name_a_podcache_errors_message_else_the_type() -> None:
    error = RuntimeUnavailableError(ENDPOINT, "connection refused")
    assert cause_of(error) == str(error)
    assert cause_of(OSError(5, "I/OPEN error")) == "OSError: [Errno 5] I/OPEN error"
    assert cause_of(RuntimeError()) == "RuntimeError"


# -- through the drivers -------------------------------------------------------------------------
WAIT = 10.0


def eventually(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.002)


def test_thread_driver_says_and_counts_a_lost_stream_and_failed_opens(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeRuntime([make_pod(1)])
    down = RuntimeUnavailableError("fake://runtime", "down for the test")
    with (
        caplog.at_level(logging.INFO, "podcache.cache"),
        RuntimeCache(fake, 60, events=True) as cache,
    ):
        eventually(lambda: cache.stats().events_state == "subscribed")
        fake.events_error = down  # every open fails from now on
        fake.end_streams(down)
        eventually(lambda: cache.stats().event_stream_failures >= 3)  # opens fail, counted
        fake.events_error = None
        eventually(lambda: cache.stats().events_state == "subscribed")
        assert cache.stats().resubscriptions == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "stream lost" in warnings[0] and "down for the test" in warnings[0]
    assert "subscribed again" in warnings[1]


def test_thread_driver_says_a_stream_the_runtime_ended(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeRuntime([make_pod(1)])
    with (
        caplog.at_level(logging.INFO, "podcache.cache"),
        RuntimeCache(fake, 60, events=True) as cache,
    ):
        eventually(lambda: cache.stats().events_state == "subscribed")
        fake.end_streams()
        eventually(lambda: cache.stats().resubscriptions == 1)
        assert cache.stats().event_stream_failures == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert ENDED in warnings[0]


def test_asyncio_driver_says_and_counts_the_same(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        fake = AsyncFakeRuntime([make_pod(1)])
        down = RuntimeUnavailableError("fake://runtime", "down for the test")
        async with AsyncRuntimeCache(fake, 60, events=True) as cache:
            await cache.get_pods()
            while cache.stats().events_state != "subscribed":
                await asyncio.sleep(0.002)
            fake.events_error = down
            fake.end_streams(down)
            while cache.stats().event_stream_failures < 3:
                await asyncio.sleep(0.002)
            fake.events_error = None
            while cache.stats().events_state != "subscribed":
                await asyncio.sleep(0.002)

    with caplog.at_level(logging.INFO, "podcache.cache"):
        asyncio.run(asyncio.wait_for(scenario(), WAIT))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "stream lost" in warnings[0] and "down for the test" in warnings[0]
    assert "subscribed again" in warnings[1]
