"""The freshness core on its own: the rounding-exact hit bound and the decision table."""

from __future__ import annotations

import math

from hypothesis import example, given
from hypothesis import strategies as st

from podcache.cache.core import NEVER, FreshnessCore, fresh_until
from podcache.model import PodList

times = st.floats(0, 1e7, allow_nan=False)
periods = st.floats(0, 1e4, allow_nan=False) | st.sampled_from([0.1, 0.2, 0.3, 1.0, 3.0])


@given(timestamp=times, period=periods, delta=st.floats(-1e4, 1e4, allow_nan=False))
@example(timestamp=0.1, period=0.2, delta=0.2)
@example(timestamp=1e6 + 0.1, period=0.3, delta=0.3)
def test_fresh_until_agrees_exactly_with_age_comparison(
    timestamp: float, period: float, delta: float
) -> None:
    until = fresh_until(timestamp, period)
    for now in (timestamp + delta, until, math.nextafter(until, math.inf)):
        assert (now <= until) == (now - timestamp <= period)


def test_fresh_until_of_never_or_disabled_is_never() -> None:
    assert fresh_until(NEVER, 1.0) == NEVER
    assert fresh_until(5.0, NEVER) == NEVER
    assert fresh_until(5.0, math.inf) == math.inf


def core(period: float = 1.0) -> FreshnessCore[object]:
    return FreshnessCore(period, object)


def test_plan_decision_table() -> None:
    c = core()
    pods, refresh, start = c.plan(10.0)
    assert (pods, start) == (None, True) and refresh is not None
    assert refresh.started_at == 10.0
    # while in flight: a get at 10.5 joins (10.5 - 10 <= 1); a force(10.2) waits for the next
    assert c.plan(10.5) == (None, refresh, False)
    _, queued, start = c.plan(10.6, 10.2)
    assert queued is not None and queued is not refresh and start is False
    assert c.plan(10.7, 10.3)[1] is queued  # shared by everyone in that position
    result = PodList()
    nxt = c.complete(refresh, result, None, 11.0)
    assert nxt is queued and queued.started_at == 11.0 and c.inflight is queued
    assert c.snapshot[0] is result and c.snapshot[1] == 10.0
    assert c.plan(11.0) == (result, None, False)  # age 1.0: a hit
    assert c.complete(queued, None, ValueError(), 11.5) is None
    assert queued.error is not None and c.snapshot[0] is result
    assert (c.misses, c.joins, c.refreshes, c.errors) == (4, 3, 1, 1)
