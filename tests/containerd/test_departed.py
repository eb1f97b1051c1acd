"""Containers that exited or left, found by their IDs on real containerd 2.1
(docs/architecture.md §3 rule 12).

A pod is made with a container whose first attempt "crashes" (StopContainer) and a second
attempt that runs; then it is torn down in the kubelet's order: StopContainer,
StopPodSandbox, RemoveContainer, RemovePodSandbox. After each step the test waits until the
cache shows it (with events: the relist of that pod; without: a forced refresh, as a reader
would cause), so every intermediate state is published. Then every container of the departed
pod (each attempt), its sandbox and its UID must be found, by whole ID and by crictl's
12-character prefix, and ``at=`` must give the holder at a moment: in both views (the
kubelet's ``get_pods(False)`` and ``get_pods(True)``), with events on and off, on both twins.
Over HTTP and the CLI: ``/containers/{id}?departed=1`` and ``podcache inspect ID --departed``.

The cache period is 60 s: what a reader sees before it ran out came from events or a forced
refresh, never from the period.
"""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from podcache import AsyncRuntimeCache, Found, Pod, PodList, RuntimeCache
from podcache.cri import AsyncCRIRuntime, CRIRuntime
from tests.cli.conftest import podcache_path
from tests.containerd.conftest import Containerd
from tests.containerd.harness import ContainerRecord, CRIHarness, SandboxRecord
from tests.serve.conftest import Client, ServeProcess, free_port

pytestmark = [
    pytest.mark.containerd,
    pytest.mark.timeout(300),
    pytest.mark.parametrize("containerd", ["2.1"], indirect=True),
]

PERIOD = 60.0
WAIT = 20.0  # for what must happen, on a loaded machine
T = TypeVar("T")


def until(check: Callable[[], bool], what: str) -> None:
    """Wait until ``check()`` (a safety net of ``WAIT`` seconds, never a bound on speed)."""
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


class AllPods:
    """The all view's getter for the thread twin: ``get_pods(True)`` whatever is asked (as
    serve's ``allview.AllPods``), the same events and relists of one pod."""

    def __init__(self, runtime: CRIRuntime) -> None:
        self._runtime = runtime
        self.endpoint = runtime.endpoint

    def get_pods(self, all: bool) -> PodList:
        return self._runtime.get_pods(True)

    def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        return self._runtime.get_pod(uid, True)

    def pod_uid_of(self, ident: str) -> str | None:
        return self._runtime.pod_uid_of(ident)

    def container_events(self) -> Any:
        return self._runtime.container_events()


class AsyncAllPods:
    """``AllPods`` for the asyncio twin."""

    def __init__(self, runtime: AsyncCRIRuntime) -> None:
        self._runtime = runtime
        self.endpoint = runtime.endpoint

    async def get_pods(self, all: bool) -> PodList:
        return await self._runtime.get_pods(True)

    async def get_pod(self, uid: str, all: bool = False) -> Pod | None:
        return await self._runtime.get_pod(uid, True)

    async def pod_uid_of(self, ident: str) -> str | None:
        return await self._runtime.pod_uid_of(ident)

    def container_events(self) -> Any:
        return self._runtime.container_events()


class Twin:
    """One cache of one view on one twin, driven from the test's thread (the asyncio twin on
    a loop of its own, so its subscription runs while the test waits)."""

    def __init__(self, endpoint: str, asynchronous: bool, all_view: bool, events: bool) -> None:
        self.asynchronous = asynchronous
        self.loop: asyncio.AbstractEventLoop | None = None
        if asynchronous:
            loop = self.loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, daemon=True).start()
            self.aruntime = self.run(_async_runtime(endpoint))
            agetter: Any = AsyncAllPods(self.aruntime) if all_view else self.aruntime
            self.acache = self.run(_async_cache(agetter, events))
        else:
            self.runtime = CRIRuntime(endpoint)
            getter: Any = AllPods(self.runtime) if all_view else self.runtime
            self.cache = RuntimeCache(getter, PERIOD, events=events)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(WAIT)

    def pods(self) -> PodList:
        if self.asynchronous:
            return self.run(self.acache.get_pods())
        return self.cache.get_pods()

    def refresh(self) -> None:
        if self.asynchronous:
            self.run(self.acache.force_update_if_older(self.run(_now())))
        else:
            self.cache.force_update_if_older(time.monotonic())

    def subscribed(self) -> bool:
        stats = self.acache.stats() if self.asynchronous else self.cache.stats()
        return stats.events_state == "subscribed"

    def find(self, **kw: Any) -> Found | None:
        if self.asynchronous:
            return self.run(self.acache.find(**kw))
        return self.cache.find(**kw)

    def close(self) -> None:
        if self.asynchronous:
            self.run(self.acache.close())
            self.run(self.aruntime.close())
            assert self.loop is not None
            self.loop.call_soon_threadsafe(self.loop.stop)
        else:
            self.cache.close()
            self.runtime.close()


async def _async_runtime(endpoint: str) -> AsyncCRIRuntime:
    return AsyncCRIRuntime(endpoint)


async def _async_cache(getter: Any, events: bool) -> AsyncRuntimeCache:
    return AsyncRuntimeCache(getter, PERIOD, events=events)


async def _now() -> float:
    return time.monotonic()


def listed(h: CRIHarness, sandbox: SandboxRecord, all_view: bool) -> set[tuple[str, int]] | None:
    """What the view lists of the pod now, as (ID, CRI state) of its containers and sandbox;
    None when it lists no such pod (from the harness's record, not from podcache)."""
    if sandbox.removed or (not all_view and sandbox.state != 0):  # 0: SANDBOX_READY
        return None
    containers = {
        (c.id, c.state)
        for c in h.live_containers()
        if c.sandbox_id == sandbox.id and (all_view or c.state == 1)  # 1: CONTAINER_RUNNING
    }
    return containers | {(sandbox.id, sandbox.state)}


_STATES = {"created": 0, "running": 1, "exited": 2}


def shown(twin: Twin, uid: str) -> set[tuple[str, int]] | None:
    """What the cache's snapshot holds of the pod, in the same terms."""
    pod = twin.pods().by_uid(uid)
    if pod is None:
        return None
    items = {(c.id.id, _STATES.get(c.state.value, 3)) for c in pod.containers}
    # A sandbox's Container state is running (READY) or exited (NOTREADY): CRI's 0 and 1.
    return items | {(s.id.id, 0 if s.state.value == "running" else 1) for s in pod.sandboxes}


class Scene:
    """The pod of one test and what happened to it when (wall clock)."""

    def __init__(self, h: CRIHarness, twin: Twin | None, all_view: bool, events: bool) -> None:
        self.h, self.twin, self.all_view, self.events = h, twin, all_view, events
        self.times: dict[str, float] = {}
        self.sandbox = h.run_pod("departed-0", "departed", labels={"test": "departed"})
        self.attempts: list[ContainerRecord] = []

    def step(self, name: str, action: Callable[[], None]) -> None:
        """``action`` at a recorded time, then waited for until the cache shows it."""
        self.times[f"before {name}"] = time.time()
        action()
        twin = self.twin
        if twin is not None:
            if not self.events:
                twin.refresh()
            expected = listed(self.h, self.sandbox, self.all_view)
            until(lambda: shown(twin, self.sandbox.uid) == expected, f"the cache shows {name}")
        self.times[f"after {name}"] = time.time()

    def crash_then_restart(self) -> None:
        h, sandbox = self.h, self.sandbox
        self.step("start", lambda: self.attempts.append(h.create_container(sandbox, "app")))
        self.step("crash", lambda: h.stop_container(self.attempts[0]))
        restart = h.create_container  # attempt 1, with a new ID, as the kubelet restarts it
        self.step("restart", lambda: self.attempts.append(restart(sandbox, "app", attempt=1)))

    def tear_down(self) -> None:
        """The kubelet's order: StopContainer, StopPodSandbox, RemoveContainer,
        RemovePodSandbox."""
        h = self.h
        self.step("stop container", lambda: h.stop_container(self.attempts[1]))
        self.step("stop sandbox", lambda: h.stop_pod(self.sandbox))
        for n, attempt in enumerate(self.attempts):
            self.step(f"remove container {n}", functools.partial(h.remove_container, attempt))
        self.step("remove sandbox", lambda: h.remove_pod(self.sandbox))


@pytest.fixture
def cleanup(cri_harness: CRIHarness) -> Iterator[list[Scene]]:
    scenes: list[Scene] = []
    yield scenes
    cri_harness.remove_all([s.sandbox.id for s in scenes if not s.sandbox.removed])


def _is(found: Found | None, uid: str, ident: str | None) -> Found:
    assert found is not None, (uid, ident)
    assert found.pod.id == uid
    if ident is not None:
        assert found.container is not None and found.container.id.id == ident
    return found


CASES = [
    pytest.param(twin, events, view, id=f"{twin}-{'events' if events else 'no-events'}-{view}")
    for twin in ("threads", "asyncio")
    for events in (True, False)
    for view in ("ready", "all")
]


@pytest.mark.parametrize(("twin_kind", "events", "view"), CASES)
def test_every_container_of_a_pod_torn_down_in_the_kubelets_order_is_found(
    containerd: Containerd,
    cri_harness: CRIHarness,
    cleanup: list[Scene],
    *,
    twin_kind: str,
    events: bool,
    view: str,
) -> None:
    asynchronous, all_view = twin_kind == "asyncio", view == "all"
    twin = Twin(containerd.endpoint, asynchronous, all_view, events)
    try:
        twin.pods()
        if events:
            until(twin.subscribed, "the event subscription is open")
        scene = Scene(cri_harness, twin, all_view, events)
        cleanup.append(scene)
        scene.crash_then_restart()
        uid, times = scene.sandbox.uid, scene.times
        crashed, running = scene.attempts[0].id, scene.attempts[1].id
        # The crashed attempt of a running pod, in both views.
        exited = _is(twin.find(container_id=crashed), uid, crashed)
        assert exited.departed_at is None
        assert (exited.held_until is None) is all_view  # the all view still lists it
        scene.tear_down()
        for ident in (crashed, running, scene.sandbox.id):
            gone = _is(twin.find(container_id=ident), uid, ident)
            assert gone.departed_at is not None and gone.held_until is not None
            assert times["before stop sandbox"] <= gone.departed_at
            _is(twin.find(container_id=ident[:12]), uid, ident)  # crictl's prefix
        assert _is(twin.find(uid=uid), uid, None).departed_at is not None
        # at=: the holder at a moment, none once the key was released.
        _is(twin.find(container_id=running, at=times["before stop container"]), uid, running)
        assert twin.find(container_id=running, at=times["after remove sandbox"]) is None
        after_crash = twin.find(container_id=crashed, at=times["after crash"])
        if all_view:  # listed, exited, until RemoveContainer
            _is(after_crash, uid, crashed)
        else:  # the ready view stopped listing it when it exited
            assert after_crash is None
        _is(twin.find(container_id=crashed, at=times["before crash"]), uid, crashed)
    finally:
        twin.close()


def test_serve_and_the_cli_answer_for_containers_that_exited_or_left(
    containerd: Containerd, cri_harness: CRIHarness, cleanup: list[Scene]
) -> None:
    port = free_port()
    args = ["-r", containerd.endpoint, "--listen", f"127.0.0.1:{port}"]
    with ServeProcess([*args, "--cache-period", f"{PERIOD:g}s", "--events", "on"]) as server:
        client = Client(port=port)
        assert client.get("/pods").status == 200
        scene = Scene(cri_harness, None, False, True)
        cleanup.append(scene)
        h = cri_harness
        scene.attempts.append(h.create_container(scene.sandbox, "app"))
        until(lambda: client.get(f"/containers/{scene.attempts[0].id}").status == 200, "listed")
        h.stop_container(scene.attempts[0])  # it crashes; its pod runs on
        crashed = scene.attempts[0].id
        until(lambda: client.get(f"/containers/{crashed}").status == 404, "it exited")
        for query in ("departed=1", "departed=1&all=1"):
            reply = client.get(f"/containers/{crashed}?{query}")
            assert reply.status == 200, (query, reply)
            assert reply.json()["pod"]["id"] == scene.sandbox.uid
            assert reply.json()["departed_at"] is None
        scene.attempts.append(h.create_container(scene.sandbox, "app", attempt=1))
        running = scene.attempts[1].id
        until(lambda: client.get(f"/containers/{running}").status == 200, "restarted")
        scene.tear_down()
        until(lambda: client.get(f"/pods/{scene.sandbox.uid}").status == 404, "it left")
        for ident in (crashed, running, running[:12], scene.sandbox.id[:12]):
            reply = client.get(f"/containers/{ident}?departed=1")
            assert reply.status == 200, (ident, reply)
            assert reply.headers["x-podcache-departed"] == "true"
            assert reply.json()["departed_at"] is not None
            assert reply.json()["container"]["id"].split("://")[1].startswith(ident)
        cli = _cli(
            "inspect",
            running[:12],
            "--departed",
            "--server",
            f"http://127.0.0.1:{port}",
            "-r",
            containerd.endpoint,
        )
        assert cli.returncode == 0, cli.stderr
        item = json.loads(cli.stdout)
        assert item["id"] == scene.sandbox.uid and item["departed_at"].endswith("Z")
        assert item["departed_container"]["id"].endswith(running)
    assert "Traceback" not in server.stderr, server.stderr


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [podcache_path(), *args], capture_output=True, text=True, timeout=60, check=False
    )
