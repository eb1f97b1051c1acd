"""Events are facts (docs/architecture.md §7): every pod, sandbox and container an
event reported is remembered with its interval, however short its life, in both views, through
the library and through ``serve``.

The simulated runtime runs in its own gRPC server, events carrying full statuses (as
containerd 1.7 and 2.x send them). 1,000 pods are each created and removed 0-5 ms later; the
cache's period is 60 s, so whatever it knows of them came from their events and the relists
those asked for. Afterwards every UID, sandbox ID, container ID and IP is found, departed, with
its pod, name and image, over an interval from its sandbox's creation to when the cache saw it
gone (its DELETED event's time, or a later relist's: never after the test asks), and found
``at`` a moment inside that interval.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest

from podcache import Found, RuntimeCache
from podcache.cri import CRIRuntime
from podcache.sim import PodShape, SimEvent, SimRuntime
from tests.cli.conftest import podcache_path
from tests.serve.conftest import Client, ServeProcess, free_port, settle_subscription

PODS = 1_000
WAIT = 120.0  # how long the cache may take to read the events (a busy machine's margin)


@dataclass(frozen=True)
class Lived:
    """One short-lived pod as the simulator made it: its keys."""

    uid: str
    name: str
    sandbox_id: str
    created: float  # the sandbox's creation, epoch seconds
    containers: dict[str, tuple[str, str]]  # container ID -> (name, image)
    ip: str


def _lived(uid: str, made: list[SimEvent]) -> Lived:
    sandbox = next(e.sandbox for e in made if e.sandbox is not None)
    containers = {c.id: (c.name, c.image) for e in made for c in e.containers}
    return Lived(uid, sandbox.name, sandbox.id, sandbox.created_at / 1e9, containers, sandbox.ip)


def churn_short_lives(sim: SimRuntime, count: int, seed: int = 42) -> tuple[list[Lived], int]:
    """``count`` pods, each removed 0-5 ms after it was created (by the seed); and how many
    events that made."""
    rng = random.Random(seed)
    lives: list[Lived] = []
    events = 0
    for _ in range(count):
        uid, made = sim.population.create_pod(PodShape.RUNNING)
        time.sleep(rng.choice((0.0, 0.0005, 0.001, 0.002, 0.005)))
        made += sim.population.remove_pod(uid)
        lives.append(_lived(uid, made))
        events += len(made)
    return lives, events


def eventually(check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


@pytest.fixture
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(5, seed=7, host_network=0.0) as runtime:
        yield runtime


def _check_interval(found: Found | None, life: Lived, what: str) -> Found:
    assert found is not None, f"{what} of pod {life.uid} is not remembered"
    assert found.pod.id == life.uid, what
    assert found.departed_at is not None and found.held_until is not None, what
    # it left after its sandbox was made, and the cache said so before the test asked
    assert life.created <= found.held_until <= time.time(), what
    return found


def assert_remembered(find: Callable[..., Found | None], lives: list[Lived]) -> None:
    """Every key of every pod found with its pod and interval, also ``at`` inside it."""
    for life in lives:
        found = _check_interval(find(uid=life.uid), life, "its UID")
        assert found.pod.name == life.name and found.held_until is not None
        inside = (life.created + found.held_until) / 2
        assert find(uid=life.uid, at=inside) == found
        assert find(uid=life.uid, at=life.created - 1.0) is None
        sandbox = _check_interval(find(container_id=life.sandbox_id), life, "its sandbox")
        assert sandbox.kind == "sandbox"
        for cid, (name, image) in life.containers.items():
            got = _check_interval(find(container_id=cid), life, f"container {cid}")
            assert got.container is not None and got.kind == "container"
            assert (got.container.name, got.container.image) == (name, image)
        # the IPs the listing or the events last knew (a relist may catch a pod before its
        # network is known: then its UID's pod has none, and its IP is remembered alone)
        assert set(found.pod.ips) <= {life.ip}
    last_holders = {life.ip: life for life in lives if life.ip}  # the simulator reuses IPs
    for ip, life in last_holders.items():
        _check_interval(find(ip=ip), life, f"IP {ip}")


@pytest.mark.parametrize("all_view", [False, True], ids=["ready view", "all view"])
def test_a_thousand_pods_of_0_to_5_ms_are_each_remembered(sim: SimRuntime, all_view: bool) -> None:
    with (
        CRIRuntime(sim.endpoint) as runtime,
        RuntimeCache(runtime, 60.0, events="on", all=all_view) as cache,
    ):
        cache.get_pods()
        eventually(lambda: cache.stats().events_state == "subscribed")
        sim.wait_for_event_subscribers(1)
        received = cache.stats().events_received
        lives, sent = churn_short_lives(sim, PODS)
        eventually(lambda: cache.stats().events_received - received >= sent)
        eventually(lambda: all(cache.find(uid=life.uid) is not None for life in lives))
        eventually(lambda: all(cache.find(uid=life.uid).departed_at for life in lives))  # type: ignore[union-attr]
        assert_remembered(cache.find, lives)


def test_through_serve_every_short_lived_pod_is_answered_departed(sim: SimRuntime) -> None:
    """``/pods/{uid}?departed=1`` and ``/containers/{id}?departed=1`` of ``podcache serve``,
    in the default view and the all view (``all=1``), for every pod of the churn; and
    ``podcache inspect ID --departed`` asking that server, for a few."""
    port = free_port()
    args = ["-r", sim.endpoint, "--listen", f"127.0.0.1:{port}", "--cache-period", "60s"]
    with ServeProcess(args):
        client = Client(port=port)
        assert client.get("/pods?all=1").status == 200  # the all view, subscribed too
        settle_subscription(client)
        sim.wait_for_event_subscribers(1)  # both views follow one stream
        lives, _ = churn_short_lives(sim, PODS, seed=43)
        for view in ("", "&all=1"):
            for life in lives:
                target = f"/pods/{life.uid}?departed=1{view}"
                eventually(partial(_answered, client, target))
                body = _departed(client, target)
                assert body is not None and body["pod"]["name"] == life.name, target
                for cid, (name, image) in life.containers.items():
                    got = _departed(client, f"/containers/{cid}?departed=1{view}")
                    assert got is not None and got["pod"]["id"] == life.uid, cid
                    assert (got["container"]["name"], got["container"]["image"]) == (name, image)
        for life in lives[:: PODS // 3]:  # the command too, for a few (a process each)
            cid = next(iter(life.containers))
            server = f"http://127.0.0.1:{port}"
            args = ["inspect", cid[:12], "--departed", "--server", server, "-r", sim.endpoint]
            cli = subprocess.run(
                [podcache_path(), *args, "-o", "json"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert cli.returncode == 0, cli.stderr
            item = json.loads(cli.stdout)
            assert item["id"] == life.uid and item["departed_at"].endswith("Z")
            assert item["departed_container"]["id"].endswith(cid)


def _answered(client: Client, target: str) -> bool:
    return _departed(client, target) is not None


def _departed(client: Client, target: str) -> dict[str, Any] | None:
    """The body of a departed answer (200 with departed_at set), else None."""
    reply = client.get(target)
    if reply.status != 200:
        return None
    body: dict[str, Any] = reply.json()
    return body if body.get("departed_at") else None
