"""Containers of a few milliseconds remembered from their events on real containerd 1.7 and 2.1
(docs/architecture.md §7, "Events are facts").

One pod; in it 20 containers whose command exits at once (``true``), each removed as soon as
the runtime says it exited. The caches' period is 60 s, so what they know of the containers
came from the events and the relists those asked for. Afterwards every container is found by
its ID, departed, with its pod, its name and its image, in the kubelet's ready view (where a
container that never ran long enough to be listed would be lost) and in the all view, on both
twins' driver (the thread one here; the asyncio one shares the same ``Departed``), each cache
the only subscriber of its test.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from podcache import Found, Pod, PodList, RuntimeCache
from podcache.cri import CRIRuntime
from tests.containerd.conftest import Containerd
from tests.containerd.harness import BUSYBOX_IMAGE, EXITING_COMMAND, ContainerRecord, CRIHarness

pytestmark = [
    pytest.mark.containerd,
    pytest.mark.timeout(300),
    pytest.mark.parametrize("containerd", ["1.7", "2.1"], indirect=True),
]

PERIOD = 60.0
WAIT = 30.0  # a safety net on a loaded machine, never a bound on speed
CONTAINERS = 20


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


class AllPods:
    """The all view's getter: ``get_pods(True)`` and ``get_pod(uid, True)``, the same events."""

    def __init__(self, runtime: CRIRuntime) -> None:
        self._runtime = runtime
        self.endpoint = runtime.endpoint

    def get_pods(self, all: bool) -> PodList:
        return self._runtime.get_pods(True)

    def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        return self._runtime.get_pod(uid, True)

    def container_events(self) -> Any:
        return self._runtime.container_events()


@pytest.fixture(params=["ready view", "all view"])
def cache(containerd: Containerd, request: pytest.FixtureRequest) -> Iterator[RuntimeCache]:
    """One cache, the only subscriber of the test: containerd 1.7 hands each event to one of
    its subscribers, not to each (2.x gives every subscriber every event)."""
    with CRIRuntime(containerd.endpoint) as runtime:
        getter: Any = AllPods(runtime) if request.param == "all view" else runtime
        made = RuntimeCache(getter, PERIOD, events="on")
        try:
            made.get_pods()
            until(partial(_subscribed, made), "subscribed")
            yield made
        finally:
            made.close()


def test_containers_that_exit_at_once_and_are_removed_are_found_with_pod_and_image(
    cri_harness: CRIHarness, cache: RuntimeCache
) -> None:
    h = cri_harness
    sandbox = h.run_pod("short-lives-0", "short-lives", labels={"test": "short-lives"})
    made: list[ContainerRecord] = []
    try:
        for n in range(CONTAINERS):
            container = h.create_container(sandbox, f"job-{n}", command=EXITING_COMMAND)
            h.wait_exited(container)
            h.remove_container(container)
            made.append(container)
        for container in made:
            what = f"container {container.name} ({container.id}) found departed"
            until(partial(_found_departed, cache, container.id), what)
            found = cache.find(container_id=container.id)
            assert found is not None and found.container is not None, what
            assert found.pod.id == sandbox.uid and found.pod.name == sandbox.name, what
            assert found.container.name == container.name, what
            assert found.container.image == BUSYBOX_IMAGE, what
            assert found.kind == "container", what
    finally:
        h.remove_all([sandbox.id])


def _subscribed(cache: RuntimeCache) -> bool:
    return cache.stats().events_state == "subscribed"


def _found_departed(cache: RuntimeCache, container_id: str) -> bool:
    found: Found | None = cache.find(container_id=container_id)
    return found is not None and found.held_until is not None
