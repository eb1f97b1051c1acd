"""Events are facts (docs/architecture.md §7): the remembered intervals, after any
interleaving of events and listings, against a reference stated from the runtime's truth.

A hypothesis world of up to four pods, each a sandbox (with an IP while ready) and one
container: sandbox CREATED at ``c``, container CREATED at ``c+1``, container DELETED at
``c+2``, sandbox DELETED at ``c+3``, each event carrying its pod as containerd does (a
container's DELETED without that container's status, a sandbox's DELETED without its IP).
Events reach the cache late (each by its own delay, so reordered across and within pods),
some twice, some never (a resubscription's gap); full listings list the truth at their
moment, between, before and after the events. ``Departed`` is fed as a cache feeds it (each
event with the snapshot of the moment; each listing's changes, then its settling).

The reference, from the truth and the order of delivery alone: a key is *known* from the
first delivery that shows it (an event of its pod that names it, or a listing that lists it);
it *left* at the first fact delivered after that which says it is gone: the DELETED event of
its container or of its pod's sandbox (at that event's time), or a listing that does not list
it (at the listing's time). Every known key is then found with its pod, held from its
sandbox's creation until it left; an unknown one is not found.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, note, settings
from hypothesis import strategies as st

from podcache import Container, ContainerEvent, ContainerEventType, ContainerID, ContainerState, Pod
from podcache.cache.changes import diff
from podcache.cache.departed import Departed, Key
from podcache.model import PodList

BASE = 1_700_000_000.0
RUNTIME = "containerd"


@dataclass(frozen=True)
class World:
    """One pod's truth: created at ``c``; its container lives [c+1, c+2), the rest [c, c+3)."""

    n: int
    c: float

    @property
    def uid(self) -> str:
        return f"uid-{self.n}"

    @property
    def sandbox(self) -> str:
        return f"sandbox{self.n:04d}"

    @property
    def container(self) -> str:
        return f"container{self.n:04d}"

    @property
    def ip(self) -> str:
        return f"10.0.0.{self.n + 1}"

    def keys_at(self, t: float) -> set[Key]:
        keys: set[Key] = set()
        if self.c <= t < self.c + 3:
            keys |= {("uid", self.uid), ("container_id", self.sandbox), ("ip", self.ip)}
        if self.c + 1 <= t < self.c + 2:
            keys.add(("container_id", self.container))
        return keys

    def pod(self, *, ready: bool, container: bool) -> Pod:
        item = Container(
            id=ContainerID(RUNTIME, self.container),
            name="app",
            image="registry.example/app:1",
            state=ContainerState.RUNNING,
        )
        sandbox = Container(
            id=ContainerID(RUNTIME, self.sandbox),
            state=ContainerState.RUNNING if ready else ContainerState.EXITED,
        )
        return Pod(
            id=self.uid,
            name=f"pod-{self.n}",
            namespace="default",
            created_at=int(self.c * 1e9),
            containers=(item,) if container else (),
            sandboxes=(sandbox,),
            ips=(self.ip,) if ready else (),
        )

    def listed(self, t: float) -> Pod | None:
        if not self.c <= t < self.c + 3:
            return None
        return self.pod(ready=True, container=self.c + 1 <= t < self.c + 2)

    def events(self) -> list[tuple[float, ContainerEvent]]:
        steps = [
            (0, ContainerEventType.CREATED, self.sandbox, True, False),
            (1, ContainerEventType.CREATED, self.container, True, True),
            (2, ContainerEventType.DELETED, self.container, True, False),
            (3, ContainerEventType.DELETED, self.sandbox, False, False),
        ]
        made = []
        for offset, kind, ident, ready, container in steps:
            t = self.c + offset
            event = ContainerEvent(
                type=kind,
                container_id=ident,
                pod_sandbox_id=self.sandbox,
                created_at=int(t * 1e9),
                pod_uid=self.uid,
                pod=self.pod(ready=ready, container=container),
            )
            made.append((t, event))
        return made

    def ends(self, key: Key, event: ContainerEvent) -> bool:
        """Whether ``event`` says ``key`` is gone (its own DELETED, or its pod's sandbox's)."""
        if event.type is not ContainerEventType.DELETED or event.pod_uid != self.uid:
            return False
        return event.container_id in (self.sandbox, key[1])


Delivery = tuple[float, int, ContainerEvent | tuple[float, float]]
"""(when it reaches the cache, order, what): an event, or a listing's (began, published)."""


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[World], list[Delivery]]:
    count = draw(st.integers(1, 4))
    worlds = [World(n, BASE + draw(st.integers(0, 12))) for n in range(count)]
    deliveries: list[Delivery] = []
    order = 0
    for world in worlds:
        for t, event in world.events():
            for _ in range(draw(st.sampled_from([0, 1, 1, 1, 1, 2]))):  # lost, once, twice
                order += 1
                deliveries.append((t + draw(st.integers(0, 6)) + 0.5, order, event))
    published = 0.0  # one listing at a time, each begun after the last one's publish
    for moment in sorted(draw(st.lists(st.integers(0, 20), max_size=6))):
        order += 1
        began = max(BASE + moment + 0.25, published)
        published = began + draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]))  # a slow call
        deliveries.append((published, order, (began, published)))
    order += 1
    deliveries.append((BASE + 100.0, order, (BASE + 100.0, BASE + 100.0)))  # all gone
    deliveries.sort()
    return worlds, deliveries


def reference(
    worlds: list[World], deliveries: list[Delivery]
) -> dict[Key, tuple[str, float, float]]:
    """Each known key's (UID, held from, left at), by the module docstring's rule."""
    known: dict[Key, World] = {}
    shown_at: dict[Key, float] = {}  # the latest time an event delivered showed the key
    left: dict[Key, float] = {}
    for _, _, what in deliveries:
        if isinstance(what, ContainerEvent):
            world = next(w for w in worlds if w.uid == what.pod_uid)
            assert what.pod is not None
            happened = what.created_at / 1e9
            shown = {("uid", world.uid), ("container_id", world.sandbox)}
            shown.add(("container_id", what.container_id))
            shown |= {("container_id", c.id.id) for c in what.pod.containers}
            shown |= {("ip", ip) for ip in what.pod.ips}
            for key in shown:
                known.setdefault(key, world)
                shown_at[key] = max(shown_at.get(key, happened), happened)
            for key, owner in known.items():
                if owner is world and key not in left and world.ends(key, what):
                    left[key] = happened
            continue
        began, published = what
        for world in worlds:
            for key in world.keys_at(began):
                known.setdefault(key, world)
        for key, owner in known.items():
            gone = key not in owner.keys_at(began) and began > shown_at.get(key, -1.0)
            if key not in left and gone:
                left[key] = published
    return {key: (world.uid, world.c, left[key]) for key, world in known.items()}


def replay(worlds: list[World], deliveries: list[Delivery]) -> Departed:
    """``Departed`` fed as a cache feeds it."""
    departed = Departed()
    snapshot = PodList([])
    revision = 0
    for when, _, what in deliveries:
        if isinstance(what, ContainerEvent):
            departed.observe(what, snapshot, when)
            continue
        began, published = what
        listed = [pod for w in worlds if (pod := w.listed(began)) is not None]
        new = PodList(listed)
        revision += 1
        departed.record(diff(snapshot, new, revision), published)
        snapshot = new
        departed.settle(None, snapshot, began, published)
    return departed


def all_keys(worlds: list[World]) -> list[Key]:
    keys: list[Key] = []
    for w in worlds:
        keys += [("uid", w.uid), ("container_id", w.sandbox), ("container_id", w.container)]
        keys.append(("ip", w.ip))
    return keys


@settings(max_examples=400, deadline=None)
@given(histories())
def test_remembered_intervals_equal_the_reference(
    history: tuple[list[World], list[Delivery]],
) -> None:
    worlds, deliveries = history
    note(f"worlds: {[(w.n, w.c - BASE) for w in worlds]}")
    for when, _, what in deliveries:
        shown = (
            (what.type.value, what.container_id, what.created_at / 1e9 - BASE)
            if isinstance(what, ContainerEvent)
            else tuple(x - BASE for x in what)
        )
        note(f"  at {when - BASE}: {shown}")
    departed = replay(worlds, deliveries)
    expected = reference(worlds, deliveries)
    now = BASE + 101.0
    for key in all_keys(worlds):
        found = departed.find(PodList([]), key, None, now)
        if key not in expected:
            assert found is None, key
            continue
        uid, start, until = expected[key]
        assert found is not None, f"{key} is not remembered"
        got = (found.pod.id, found.pod.created_at / 1e9, found.held_until)
        assert got == (uid, start, until), key
        assert found.departed_at is not None, key
        inside = departed.find(PodList([]), key, (start + until) / 2, now)
        assert inside is not None and inside.pod.id == uid, key
        if key[0] == "container_id" and key[1].startswith("container"):
            assert found.container is not None and found.container.name in ("app", ""), key


def test_a_key_listed_again_after_its_report_ended_is_released_when_the_listing_drops_it() -> None:
    """The ready view's sequence on containerd 2.1: a container's CREATED reports it; the relist
    it asks for does not list it (not running yet), so the report ends; then a listing holds
    it (running) until it stops. Its release must be the stop, not the first relist's end
    (the later release was dropped as a duplicate of the report's)."""
    world = World(0, BASE)
    departed = Departed()
    without = world.pod(ready=True, container=False)
    snapshot = PodList([without])
    departed.record(diff(None, snapshot, 1), BASE + 0.1)
    created = world.events()[1][1]  # the container's CREATED, its pod describing it
    departed.observe(created, snapshot, BASE + 1.0)
    departed.settle(world.uid, without, BASE + 1.1, BASE + 1.2)  # not running: not listed
    key: Key = ("container_id", world.container)
    assert departed.find(snapshot, key, None, BASE + 1.3) is not None
    running = PodList([world.pod(ready=True, container=True)])
    departed.record(diff(snapshot, running, 2), BASE + 1.5)  # listed, running
    departed.record(diff(running, snapshot, 3), BASE + 2.5)  # stopped: dropped by the view
    found = departed.find(snapshot, key, None, BASE + 3.0)
    assert found is not None and found.held_until == BASE + 2.5
    during = departed.find(snapshot, key, BASE + 2.0, BASE + 3.0)  # while it ran
    assert during is not None and during.container is not None
    assert departed.find(snapshot, key, BASE + 2.6, BASE + 3.0) is None
