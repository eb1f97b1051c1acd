"""The bound of what the cache remembers (docs/architecture.md §7, "Events are facts" rule 5;
§3 rule 12), at and past its limits: a flood of short-lived pods told by events alone, nobody
reading and no listing running. Keys (releases and reports together) never pass
``departed_max``, their ``pod_cost`` never passes ``departed_bytes``, the oldest go first, the
newest are always found; and ``pod_cost`` counts more than tracemalloc measures them to hold.
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from podcache import Container, ContainerEvent, ContainerEventType, ContainerID, ContainerState, Pod
from podcache.cache.departed import Departed, Key, pod_cost
from podcache.model import PodList

BASE = 1_700_000_000.0
KEYS_PER_POD = 4  # its UID, sandbox, container and IP


def pod(n: int, *, ready: bool = True, container: bool = True, text: int = 8) -> Pod:
    item = Container(
        id=ContainerID("containerd", f"{n:064x}"),
        name="app" + "x" * text,
        image="registry.example/app:1" + "y" * text,
        image_ref="sha256:" + "0" * 64,
        image_id="sha256:" + "0" * 64,
        state=ContainerState.RUNNING,
    )
    sandbox = Container(id=ContainerID("containerd", f"{n + 10**9:064x}"))
    return Pod(
        id=f"uid-{n:08d}",
        name=f"pod-{n}" + "z" * text,
        namespace="default",
        created_at=int((BASE + n) * 1e9),
        containers=(item,) if container else (),
        sandboxes=(sandbox,),
        ips=(f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}",) if ready else (),
    )


def short_life(n: int, *, text: int = 8) -> list[ContainerEvent]:
    """A pod's events, created and removed within the same millisecond."""
    alive = pod(n, text=text)
    sandbox, item = alive.sandboxes[0].id.id, alive.containers[0].id.id
    gone = pod(n, ready=False, container=False, text=text)
    steps = [
        (ContainerEventType.CREATED, sandbox, alive),
        (ContainerEventType.CREATED, item, alive),
        (ContainerEventType.DELETED, item, gone),
        (ContainerEventType.DELETED, sandbox, gone),
    ]
    return [
        ContainerEvent(
            type=kind,
            container_id=ident,
            pod_sandbox_id=sandbox,
            created_at=int((BASE + n) * 1e9),
            pod_uid=alive.id,
            pod=described,
        )
        for kind, ident, described in steps
    ]


def flood(departed: Departed, pods: int, *, text: int = 8, deleted: bool = True) -> None:
    """``pods`` short-lived pods told by events alone (``deleted`` False: never removed)."""
    empty = PodList([])
    for n in range(pods):
        events = short_life(n, text=text)
        for event in events if deleted else events[:2]:
            departed.observe(event, empty, BASE + n)
            assert len(departed) <= departed.departed_max
            assert departed.bytes <= departed.departed_bytes


def found(departed: Departed, n: int) -> bool:
    key: Key = ("uid", pod(n).id)
    return departed.find(None, key, None, BASE + n) is not None


@pytest.mark.parametrize("limit", [KEYS_PER_POD * 10, KEYS_PER_POD * 10 + 1, 1])
def test_a_flood_of_short_lives_keeps_at_most_departed_max_keys_the_newest(limit: int) -> None:
    departed = Departed(departed_max=limit)
    flood(departed, 100)
    assert len(departed) == limit  # at the limit, never past it
    assert departed.forgotten >= 100 * KEYS_PER_POD - limit
    assert found(departed, 99)  # a pod's UID is released last: the newest is found
    assert not found(departed, 0)


def test_at_exactly_departed_max_nothing_is_forgotten() -> None:
    departed = Departed(departed_max=10 * KEYS_PER_POD)
    flood(departed, 10)
    assert len(departed) == 10 * KEYS_PER_POD and departed.forgotten == 0
    assert all(found(departed, n) for n in range(10))


def test_reports_never_ended_are_bounded_too() -> None:
    """Pods whose removal was never told (a lost stream, no listing since): the oldest
    reports go first."""
    departed = Departed(departed_max=40)
    flood(departed, 100, deleted=False)
    assert departed.reported == 40 and len(departed) == 40
    assert found(departed, 99) and not found(departed, 0)


@pytest.mark.parametrize("pods_fitting", [1, 5, 50])
def test_bytes_are_bounded_at_and_past_departed_bytes(pods_fitting: int) -> None:
    probe = Departed()
    flood(probe, pods_fitting)
    budget = probe.bytes  # what these short lives cost, exactly
    departed = Departed(departed_bytes=budget)
    flood(departed, pods_fitting)
    assert departed.bytes == budget and departed.forgotten == 0  # at the limit
    flood(departed, pods_fitting + 1)  # past it
    assert departed.bytes <= budget
    assert departed.forgotten > 0 and found(departed, pods_fitting)


def test_big_texts_cost_more_and_the_bound_holds() -> None:
    departed = Departed(departed_bytes=2_000_000)
    flood(departed, 200, text=4_000)
    assert departed.bytes <= 2_000_000
    assert found(departed, 199)


@pytest.mark.parametrize("text", [8, 1_000])
def test_pod_cost_counts_more_than_tracemalloc_measures(text: int) -> None:
    """The bytes a flood makes the cache keep (its index, the holdings, the pods: all that
    tracemalloc sees grow) stay below what ``pod_cost`` counted for them."""
    pods = 500
    lives = [short_life(n, text=text) for n in range(pods)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        departed = Departed(departed_for=10_000.0)
        empty = PodList([])
        for n, events in enumerate(lives):
            for event in events:
                departed.observe(event, empty, BASE + n)
        del lives, events
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(departed) == pods * KEYS_PER_POD
    assert 0 < kept < departed.bytes, (kept, departed.bytes)
    assert pod_cost(pod(0, text=text)) > 0
