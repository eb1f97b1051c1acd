"""``PodRelists.fetched`` stays bounded when no full listing runs: churn with
nobody reading makes only relists of one pod, and a relist that finds its pod gone used to
leave its entry until the next full listing (65,954 entries and growing after 12 minutes of
100 pods/s). Driven through ``FreshnessCore`` (I/O-free), counting entries, never timing.
"""

from __future__ import annotations

import pytest

from podcache import PodList
from podcache.cache import podrelists
from podcache.cache.core import FreshnessCore
from tests.unit.cache.drivers import make_pod


def filled_core(pods: int) -> FreshnessCore[object]:
    core: FreshnessCore[object] = FreshnessCore(60.0, object)
    _, refresh, start = core.plan(0.0)
    assert refresh is not None and start
    core.complete(refresh, PodList([make_pod(n) for n in range(pods)]), None, 0.1)
    return core


def relist(core: FreshnessCore[object], n: int, now: float, *, gone: bool) -> None:
    """An event for pod ``n``, and its relist finding it there (``make_pod(n)``) or gone."""
    started, full = core.pod_hint(f"uid-{n}", now)
    assert len(started) == 1 and full is None  # each relist takes no time: within the budget
    core.pod_complete(started[0], None if gone else make_pod(n), None, now)


def test_churn_without_a_full_listing_keeps_fetched_at_the_nodes_size_plus_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(podrelists, "GONE_KEPT", 16, raising=False)
    core = filled_core(10)
    now = 1.0
    for n in range(10, 2_010):  # one pod created and one removed per step, nobody listing
        relist(core, n, now, gone=False)
        relist(core, n - 10, now, gone=True)
        now += 0.01
        assert len(core.pod_relists.fetched) <= 10 + 16
    pods = core.snapshot[0]
    assert pods is not None and [p.id for p in pods] == [
        f"uid-{n}" for n in range(2_009, 1_999, -1)
    ]


def test_a_listing_in_flight_keeps_every_gone_entry_it_began_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the bound, the pods removed while a full listing runs are still removed from what
    it stores: it began before their relists, so its data for them is older."""
    monkeypatch.setattr(podrelists, "GONE_KEPT", 4, raising=False)
    core = filled_core(40)
    _, listing, start = core.plan(100.0)  # past the period: a full listing begins
    assert listing is not None and start
    for n in range(30):
        relist(core, n, 100.5, gone=True)
    assert len(core.pod_relists.fetched) >= 30
    core.complete(listing, PodList([make_pod(n) for n in range(40)]), None, 101.0)
    pods = core.snapshot[0]
    assert pods is not None and sorted(p.id for p in pods) == sorted(
        f"uid-{n}" for n in range(30, 40)
    )
    relist(core, 35, 102.0, gone=True)  # no listing in flight now: back within the bound
    assert len(core.pod_relists.fetched) <= 4
