"""Specification of the simulated population: kubelet-shaped records, invariants, churn."""

from __future__ import annotations

import gc
import re
from collections import Counter, defaultdict

import pytest

from podcache.sim import (
    LogicalClock,
    PodShape,
    Population,
    SimContainerState,
    SimEvent,
    SimEventType,
    SimSandboxState,
    Snapshot,
)
from podcache.sim import population as sim_population_module
from podcache.sim.population import SimContainer, SimSandbox

HEX64 = re.compile(r"[0-9a-f]{64}")
POD_KEYS = ("io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.pod.uid")


def by_pod(snapshot: Snapshot) -> dict[str, list[str]]:
    """Sandbox IDs per pod UID."""
    pods: dict[str, list[str]] = defaultdict(list)
    for sandbox in snapshot.sandboxes:
        pods[sandbox.uid].append(sandbox.id)
    return pods


def check_invariants(snapshot: Snapshot) -> None:
    sandboxes = {s.id: s for s in snapshot.sandboxes}
    containers = {c.id: c for c in snapshot.containers}
    assert len(sandboxes) == len(snapshot.sandboxes)
    assert len(containers) == len(snapshot.containers)
    assert not set(sandboxes) & set(containers)
    for ident in [*sandboxes, *containers]:
        assert HEX64.fullmatch(ident), ident
    for container in snapshot.containers:
        sandbox = sandboxes[container.pod_sandbox_id]
        assert container.pod_uid == sandbox.uid
        if sandbox.state is SimSandboxState.NOTREADY:
            assert container.state is SimContainerState.EXITED
    for sandbox_ids in by_pod(snapshot).values():
        pod_sandboxes = [sandboxes[i] for i in sandbox_ids]
        newest = max(pod_sandboxes, key=lambda s: (s.attempt, s.created_at))
        for sandbox in pod_sandboxes:
            if sandbox.state is SimSandboxState.READY:
                assert sandbox is newest
        assert len({(s.name, s.namespace) for s in pod_sandboxes}) == 1


def test_population_has_the_requested_number_of_pods_in_the_given_namespaces() -> None:
    population = Population(40, seed=3, namespaces=("a", "b"))
    snapshot = population.snapshot()
    assert len(population) == 40
    assert len(snapshot.pod_uids()) == 40
    assert {s.namespace for s in snapshot.sandboxes} == {"a", "b"}
    names = {(s.namespace, s.name) for s in snapshot.sandboxes}
    assert len(names) == 40  # unique full names


def test_same_seed_gives_the_same_population_and_another_seed_does_not() -> None:
    first = Population(30, seed=7).snapshot()
    again = Population(30, seed=7).snapshot()
    other = Population(30, seed=8).snapshot()
    assert first == again
    assert first.sandboxes[0].id != other.sandboxes[0].id


def test_invariants_hold_for_a_large_population() -> None:
    check_invariants(Population(500, seed=11).snapshot())


def test_sandboxes_carry_the_pods_labels_plus_the_three_pod_keys() -> None:
    for sandbox in Population(30, seed=1).snapshot().sandboxes:
        assert sandbox.labels["io.kubernetes.pod.name"] == sandbox.name
        assert sandbox.labels["io.kubernetes.pod.namespace"] == sandbox.namespace
        assert sandbox.labels["io.kubernetes.pod.uid"] == sandbox.uid
        assert sandbox.labels["app"] == sandbox.name.split("-")[0]
        assert sandbox.name.split("-")[1] == sandbox.labels["pod-template-hash"]
        assert sandbox.annotations["kubernetes.io/config.source"] == "api"
        assert sandbox.has_metadata


def test_a_re_created_sandbox_shows_a_label_added_to_the_pod_since_the_first() -> None:
    snapshot = Population(len(PodShape), seed=4).snapshot()
    for ids in by_pod(snapshot).values():
        attempts = sorted((s for s in snapshot.sandboxes if s.id in ids), key=lambda s: s.attempt)
        if len(attempts) == 2:
            assert "tier" not in attempts[0].labels
            assert "tier" in attempts[1].labels
            break
    else:
        pytest.fail("no re-created sandbox")


def test_containers_are_labelled_and_annotated_as_the_kubelet_writes_them() -> None:
    snapshot = Population(30, seed=1).snapshot()
    sandboxes = {s.id: s for s in snapshot.sandboxes}
    for container in snapshot.containers:
        sandbox = sandboxes[container.pod_sandbox_id]
        assert dict(container.labels) == {
            "io.kubernetes.container.name": container.name,
            "io.kubernetes.pod.name": sandbox.name,
            "io.kubernetes.pod.namespace": sandbox.namespace,
            "io.kubernetes.pod.uid": sandbox.uid,
        }
        annotations = container.annotations
        assert re.fullmatch(r"[0-9a-f]{1,8}", annotations["io.kubernetes.container.hash"])
        assert annotations["io.kubernetes.container.restartCount"] == str(container.attempt)
        assert annotations["io.kubernetes.container.terminationMessagePath"] == (
            "/dev/termination-log"
        )
        assert annotations["io.kubernetes.container.terminationMessagePolicy"] == "File"
        assert annotations["io.kubernetes.pod.terminationGracePeriod"].isdigit()
        assert container.log_path == (
            f"/var/log/pods/{sandbox.namespace}_{sandbox.name}_{sandbox.uid}/"
            f"{container.name}/{container.attempt}.log"
        )


def test_every_attempt_of_a_container_shares_its_spec_hash() -> None:
    snapshot = Population(200, seed=2).snapshot()
    hashes: dict[tuple[str, str], set[str]] = defaultdict(set)
    for container in snapshot.containers:
        hashes[(container.pod_uid, container.name)].add(
            container.annotations["io.kubernetes.container.hash"]
        )
    assert all(len(values) == 1 for values in hashes.values())


def test_images_come_in_every_form_a_runtime_reports() -> None:
    snapshot = Population(200, seed=5).snapshot()
    refs = {c.image_ref for c in snapshot.containers}
    ids = {c.image_id for c in snapshot.containers}
    for container in snapshot.containers:
        assert re.fullmatch(r"registry\.example/[a-z-]+:1\.\d", container.image)
        assert re.fullmatch(
            r"(sha256:|registry\.example/[a-z-]+@sha256:)[0-9a-f]{64}", container.image_ref
        )
        assert container.image_id == "" or re.fullmatch(r"sha256:[0-9a-f]{64}", container.image_id)
    assert any(ref.startswith("sha256:") for ref in refs)  # containerd
    assert any("@sha256:" in ref for ref in refs)  # CRI-O's repository digest
    assert "" in ids  # a runtime older than CRI of Kubernetes 1.30
    assert any(ident.startswith("sha256:") for ident in ids)


def test_the_first_pods_show_every_shape() -> None:
    snapshot = Population(len(PodShape), seed=4).snapshot()
    pods = by_pod(snapshot)
    sandboxes = {s.id: s for s in snapshot.sandboxes}
    states = Counter(c.state for c in snapshot.containers)
    assert set(states) == set(SimContainerState)
    # Init containers that ran to completion.
    assert any(
        c.init and c.state is SimContainerState.EXITED and c.exit_code == 0
        for c in snapshot.containers
    )
    # A re-created sandbox: attempt 0 NOTREADY beside attempt 1 READY.
    assert any(
        sorted((sandboxes[i].attempt, sandboxes[i].state) for i in ids)
        == [(0, SimSandboxState.NOTREADY), (1, SimSandboxState.READY)]
        for ids in pods.values()
    )
    # A pod stopped entirely: NOTREADY only.
    assert any(
        all(sandboxes[i].state is SimSandboxState.NOTREADY for i in ids) and len(ids) == 1
        for ids in pods.values()
    )
    # A restarted container: attempt 0 EXITED beside attempt 1 RUNNING with restartCount 1.
    attempts = defaultdict(set)
    for c in snapshot.containers:
        attempts[(c.pod_sandbox_id, c.name)].add((c.attempt, c.state))
    assert {(0, SimContainerState.EXITED), (1, SimContainerState.RUNNING)} in attempts.values()


def test_pods_have_one_to_four_main_containers_in_their_newest_sandbox() -> None:
    snapshot = Population(200, seed=6).snapshot()
    newest: dict[str, tuple[int, str]] = {}
    for sandbox in snapshot.sandboxes:
        newest[sandbox.uid] = max(newest.get(sandbox.uid, (-1, "")), (sandbox.attempt, sandbox.id))
    counts = Counter(
        c.pod_sandbox_id
        for c in snapshot.containers
        if not c.init and c.attempt == 0 and c.pod_sandbox_id in {i for _, i in newest.values()}
    )
    assert set(counts.values()) <= {1, 2, 3, 4}
    assert len(set(counts.values())) > 1


def test_some_pods_and_some_containers_share_a_created_at() -> None:
    snapshot = Population(100, seed=9).snapshot()
    pod_created: dict[str, int] = {}
    for sandbox in snapshot.sandboxes:
        pod_created[sandbox.uid] = max(pod_created.get(sandbox.uid, 0), sandbox.created_at)
    assert len(set(pod_created.values())) < len(pod_created)
    per_pod = Counter((c.pod_uid, c.created_at) for c in snapshot.containers)
    assert max(per_pod.values()) > 1


def test_a_logical_clock_fixes_timestamps_and_a_given_clock_is_used() -> None:
    ticks = iter(range(10**18, 10**18 + 10**6, 1000))
    population = Population(5, seed=1, clock=lambda: next(ticks))
    newest = max(s.created_at for s in population.snapshot().sandboxes)
    assert 10**18 - 3600 * 10**9 - 3600 * 10**9 < newest <= 10**18
    clock = LogicalClock(start_ns=100, step_ns=5)
    assert (clock(), clock()) == (105, 110)


def test_step_replaces_one_pod_and_emits_events_for_every_change() -> None:
    population = Population(20, seed=1)
    before = population.snapshot()
    events = population.step()
    after = population.snapshot()
    assert after.generation == before.generation + 1
    assert len(population) == 20
    gone = before.pod_uids() - after.pod_uids()
    new = after.pod_uids() - before.pod_uids()
    assert len(gone) == len(new) == 1
    removed_ids = {s.id for s in before.sandboxes if s.uid in gone} | {
        c.id for c in before.containers if c.pod_uid in gone
    }
    created_ids = {s.id for s in after.sandboxes if s.uid in new} | {
        c.id for c in after.containers if c.pod_uid in new
    }
    deleted = {e.container_id for e in events if e.type is SimEventType.DELETED}
    created = {e.container_id for e in events if e.type is SimEventType.CREATED}
    assert deleted == removed_ids
    assert created == created_ids
    check_invariants(after)


def test_an_event_carries_the_sandbox_and_the_containers_in_it() -> None:
    population = Population(5, seed=1)
    _, events = population.create_pod(PodShape.WITH_INIT)
    for event in events:
        assert event.sandbox is not None
        assert all(c.pod_sandbox_id == event.sandbox.id for c in event.containers)
        if event.container_id != event.sandbox.id:
            assert event.container_id in {c.id for c in event.containers}


def test_subscribers_receive_each_change_in_order_until_they_unsubscribe() -> None:
    population = Population(10, seed=1)
    received: list[SimEvent] = []
    unsubscribe = population.subscribe(received.extend)
    first = population.step()
    second = population.step()
    assert received == first + second
    unsubscribe()
    population.step()
    assert received == first + second


def test_churn_is_deterministic_by_seed() -> None:
    def run(seed: int) -> list[tuple[str, SimEventType]]:
        population = Population(25, seed=seed)
        return [(e.container_id, e.type) for _ in range(30) for e in population.step()]

    assert run(12) == run(12)
    assert run(12) != run(13)


def test_stopping_a_pod_exits_its_containers_and_its_sandbox() -> None:
    population = Population(10, seed=1)
    uid, _ = population.create_pod(PodShape.RUNNING)
    events = population.stop_pod(uid)
    snapshot = population.snapshot()
    assert {c.state for c in snapshot.containers if c.pod_uid == uid} == {SimContainerState.EXITED}
    assert {s.state for s in snapshot.sandboxes if s.uid == uid} == {SimSandboxState.NOTREADY}
    assert {e.type for e in events} == {SimEventType.STOPPED}
    assert all(c.exit_code == 137 for c in snapshot.containers if c.pod_uid == uid)
    check_invariants(snapshot)


def test_removing_a_pod_deletes_everything_it_had() -> None:
    population = Population(10, seed=1)
    uid = population.pod_uids()[0]
    population.remove_pod(uid)
    snapshot = population.snapshot()
    assert uid not in snapshot.pod_uids()
    assert all(c.pod_uid != uid for c in snapshot.containers)
    with pytest.raises(KeyError, match="no pod with UID"):
        population.remove_pod(uid)


def test_a_crash_loop_turn_exits_the_container_and_starts_its_next_attempt() -> None:
    population = Population(10, seed=1)
    uid, _ = population.create_pod(PodShape.RUNNING)
    first = next(c for c in population.snapshot().containers if c.pod_uid == uid and c.attempt == 0)
    for turn in range(1, 4):
        events = population.crash_container(uid)
        snapshot = population.snapshot()
        attempts = sorted(
            (c.attempt, c.state)
            for c in snapshot.containers
            if c.pod_uid == uid and c.name == first.name
        )
        # the newest exited attempt is kept, older ones are garbage-collected
        assert attempts == [
            (turn - 1, SimContainerState.EXITED),
            (turn, SimContainerState.RUNNING),
        ]
        kinds = [e.type for e in events]
        assert kinds[-3:] == [SimEventType.STOPPED, SimEventType.CREATED, SimEventType.STARTED]
        assert kinds.count(SimEventType.DELETED) == (1 if turn > 1 else 0)
        newest = next(c for c in snapshot.containers if c.id == events[-1].container_id)
        assert newest.annotations["io.kubernetes.container.restartCount"] == str(turn)
        assert newest.log_path.endswith(f"/{first.name}/{turn}.log")
        check_invariants(snapshot)


def test_a_crash_loop_needs_a_known_pod_with_a_running_container() -> None:
    population = Population(10, seed=1)
    uid, _ = population.create_pod(PodShape.RUNNING)
    population.stop_pod(uid)
    with pytest.raises(ValueError, match="no main container runs"):
        population.crash_container(uid)
    with pytest.raises(KeyError, match="no pod with UID"):
        population.crash_container("nope")


def test_no_record_is_tracked_by_the_cyclic_garbage_collector() -> None:
    """At 5,000 pods the records' mapping proxies and structs were 100,000 objects that every
    full collection walked (about 80 ms, in a process that runs the simulator, serve's with
    ``--sim``): records, their labels and annotations and the pods' tables are untracked."""
    population = Population(20, seed=3)
    for _ in range(10):
        population.step()
    snapshot = population.snapshot()
    records: list[SimSandbox | SimContainer] = [*snapshot.sandboxes, *snapshot.containers]
    assert records
    gc.collect()  # tuples of strings are untracked by the first collection that meets them
    for record in records:
        assert not gc.is_tracked(record)
        assert not gc.is_tracked(record.labels) and not gc.is_tracked(record.annotations)
    for pod in population._pods.values():
        assert not gc.is_tracked(pod) and not gc.is_tracked(pod.container_ids)


def test_a_snapshot_never_changes_afterwards() -> None:
    population = Population(10, seed=1)
    snapshot = population.snapshot()
    copy = Snapshot(snapshot.generation, tuple(snapshot.sandboxes), tuple(snapshot.containers))
    for _ in range(5):
        population.step()
    population.stop_pod(population.pod_uids()[0])
    assert snapshot == copy
    made_from = {"a": "b"}
    assert sim_population_module._frozen(made_from) is not made_from  # a copy of its own
    with pytest.raises(AttributeError):
        snapshot.containers[0].name = "x"  # type: ignore[misc]


def test_invalid_sizes_are_rejected() -> None:
    with pytest.raises(ValueError, match="pods must be >= 0"):
        Population(-1)
    with pytest.raises(ValueError, match="namespaces"):
        Population(1, namespaces=())
