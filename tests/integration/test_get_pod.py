"""``get_pod(uid, all)`` and ``pod_uid_of(id)`` over real CRI (the simulated runtime on a unix
socket), both twins: one pod listed with the kubelet's pod-UID label as the filter equals that
pod in a full listing of the same moment (same rules, same reader), for every pod of a
population with multi-attempt pods, exited containers and NotReady sandboxes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from podcache.cri import AsyncCRIRuntime, CRIRuntime
from podcache.sim import SimRuntime


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(60, seed=11) as runtime:
        yield runtime


@pytest.mark.parametrize("all_", [False, True], ids=["running", "all"])
def test_every_pod_relisted_alone_equals_its_full_listing(sim: SimRuntime, all_: bool) -> None:
    with sim.pause_churn(), CRIRuntime(sim.endpoint) as runtime:
        full = runtime.get_pods(all_)
        assert len(full) > 10
        for pod in full:
            assert runtime.get_pod(pod.id, all_) == pod
        assert runtime.get_pod("no-such-uid", all_) is None


@pytest.mark.parametrize("all_", [False, True], ids=["running", "all"])
def test_the_asyncio_twin_agrees(sim: SimRuntime, all_: bool) -> None:
    async def check() -> None:
        async with AsyncCRIRuntime(sim.endpoint) as runtime:
            full = await runtime.get_pods(all_)
            for pod in full:
                assert await runtime.get_pod(pod.id, all_) == pod
            assert await runtime.get_pod("no-such-uid", all_) is None

    with sim.pause_churn():
        asyncio.run(check())


def test_pod_uid_of_finds_containers_and_sandboxes_and_nothing_else(sim: SimRuntime) -> None:
    with sim.pause_churn(), CRIRuntime(sim.endpoint) as runtime:
        full = runtime.get_pods(True)
        for pod in list(full)[:10]:
            for part in (*pod.containers, *pod.sandboxes):
                assert runtime.pod_uid_of(part.id.id) == pod.id
        assert runtime.pod_uid_of("f" * 64) is None

    async def twin() -> None:
        async with AsyncCRIRuntime(sim.endpoint) as runtime:
            pod = next(iter(full))
            assert await runtime.pod_uid_of(pod.sandboxes[0].id.id) == pod.id
            assert await runtime.pod_uid_of("f" * 64) is None

    with sim.pause_churn():
        asyncio.run(twin())


def _filtered_list_calls(sim: SimRuntime) -> int:
    counts = sim.call_counts()
    return sum(counts[m]["filtered"]["calls"] for m in ("ListPodSandbox", "ListContainers"))


def test_relists_of_one_pod_asked_in_one_turn_share_one_pair_of_calls(sim: SimRuntime) -> None:
    """Both views relist a pod on the same event (serve): one pair of calls listing every
    state serves both, and each gets what it would get alone; a relist asked after the
    shared calls began makes its own."""

    async def check() -> None:
        async with AsyncCRIRuntime(sim.endpoint) as runtime:
            full = {False: await runtime.get_pods(False), True: await runtime.get_pods(True)}
            mixed = [p for p in full[True] if p != full[False].by_uid(p.id)]
            assert mixed, "the population has pods with NotReady sandboxes or exited containers"
            for pod in mixed[:5]:
                before = _filtered_list_calls(sim)
                running, every = await asyncio.gather(
                    runtime.get_pod(pod.id, False), runtime.get_pod(pod.id, True)
                )
                assert _filtered_list_calls(sim) == before + 2
                assert running == full[False].by_uid(pod.id)
                assert every == full[True].by_uid(pod.id) == pod
            pod = mixed[0]
            assert await runtime.get_pod(pod.id, True) == pod
            before = _filtered_list_calls(sim)  # its calls ended: the next makes its own
            assert await runtime.get_pod(pod.id, False) == full[False].by_uid(pod.id)
            assert _filtered_list_calls(sim) == before + 2

    with sim.pause_churn():
        asyncio.run(check())


@pytest.mark.parametrize("inline_bytes", [16 * 1024, 0], ids=["on-the-loop", "in-the-thread"])
def test_a_pod_is_read_on_the_loop_or_in_its_thread_by_its_size_alike(
    sim: SimRuntime, inline_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One pod's answers of at most ``INLINE_POD_BYTES`` are read on the event loop, larger
    ones in the pod converter's thread; either way the pod is its full listing's."""
    from podcache.cri import client

    monkeypatch.setattr(client, "INLINE_POD_BYTES", inline_bytes)

    async def check() -> tuple[int, int]:
        async with AsyncCRIRuntime(sim.endpoint) as runtime:
            ran = 0
            run = runtime._pod_converter.run

            def counted(*args: object) -> object:
                nonlocal ran
                ran += 1
                return run(*args)  # type: ignore[arg-type]

            runtime._pod_converter.run = counted  # type: ignore[method-assign,assignment]
            full = await runtime.get_pods(True)
            for pod in full:
                assert await runtime.get_pod(pod.id, True) == pod
            return ran, len(full)

    with sim.pause_churn():
        ran, pods = asyncio.run(check())
    assert ran == (0 if inline_bytes else pods)
