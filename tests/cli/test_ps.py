"""``podcache ps``: containers with their pods, every output format read back and compared."""

from __future__ import annotations

import pytest

from podcache.cri import CRIRuntime
from podcache.model import Container, Pod
from podcache.sim import SimRuntime
from podcache.sim.population import PodShape
from tests.cli.conftest import (
    TRUNC,
    Runner,
    container_json,
    newest_sandbox_id,
    parse,
    paused,
    table,
)


def rows_of(pods: list[Pod] | tuple[Pod, ...]) -> list[tuple[Pod, Container]]:
    return [(pod, container) for pod in pods for container in pod.containers]


def item(pod: Pod, container: Container, ran_in: dict[str, str]) -> dict[str, object]:
    """``container``'s item; ``ran_in``: each container's sandbox, as the simulator holds it."""
    sandbox = ran_in[container.id.id]
    pod_part = {"id": pod.id, "name": pod.name, "namespace": pod.namespace, "sandbox_id": sandbox}
    return container_json(container) | {"pod": pod_part}


def sandboxes_ran_in(sim: SimRuntime) -> dict[str, str]:
    """The sandbox each container ran in, as the simulator holds it (crictl's POD ID)."""
    return {c.id: c.pod_sandbox_id for c in sim.population.snapshot().containers}


STATE_SHAPES = (PodShape.STARTING, PodShape.STOPPED, PodShape.UNKNOWN_CONTAINER)
"""Shapes holding a created, an exited and an unknown container."""


@pytest.mark.parametrize("all_", [False, True], ids=["running", "all"])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_document_lists_every_container_with_its_pod(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime, fmt: str, all_: bool
) -> None:
    flags = ["--all"] if all_ else []
    with sim.pause_churn():
        # Churn may have replaced the population's first pods, which held every state: one
        # pod of each shape with a state other than running makes the listing hold them all.
        for shape in STATE_SHAPES:
            sim.population.create_pod(shape)
        with paused(sim, runtime, all_) as pods:
            result = run("ps", "-r", sim.endpoint, "-o", fmt, *flags)
            ran_in = sandboxes_ran_in(sim)
    assert result.returncode == 0, result
    expected = [item(pod, c, ran_in) for pod, c in rows_of(pods.pods)]
    assert parse(fmt, result.stdout) == {"items": expected}
    states = {i["state"] for i in expected}
    assert states == ({"running"} if not all_ else {"running", "exited", "created", "unknown"})


def test_table_shows_each_containers_own_sandbox_as_pod_id_and_truncates_ids(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with paused(sim, runtime, True) as pods:
        result = run("ps", "-r", sim.endpoint, "-a")
        ran_in = sandboxes_ran_in(sim)
    assert result.returncode == 0, result
    header, rows = table(result)
    assert header == [
        "CONTAINER",
        "IMAGE",
        "STATE",
        "NAME",
        "ATTEMPT",
        "POD ID",
        "POD",
        "NAMESPACE",
    ]
    expected = [
        [
            c.id.id[:TRUNC],
            c.image,
            c.state.value.capitalize(),
            c.name,
            str(c.attempt),
            ran_in[c.id.id][:TRUNC],
            pod.name,
            pod.namespace,
        ]
        for pod, c in rows_of(pods.pods)
    ]
    assert rows == expected
    assert {row[4] for row in rows} >= {"0", "1"}  # restarted containers show crictl's ATTEMPT
    # Old attempts ran in older sandboxes: crictl shows those, not the pod's newest.
    assert any(ran_in[c.id.id] != newest_sandbox_id(pod) for pod, c in rows_of(pods.pods))


def test_wide_table_adds_image_id_hash_and_pod_uid(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with paused(sim, runtime, False) as pods:
        result = run("ps", "-r", sim.endpoint, "-o", "wide", "--no-trunc")
    assert result.returncode == 0, result
    header, rows = table(result)
    assert header[8:] == ["IMAGE ID", "HASH", "POD UID"]
    assert [row[0] for row in rows] == [c.id.id for _, c in rows_of(pods.pods)]
    assert [row[8:] for row in rows] == [
        [c.image_id or c.image_ref, f"{c.hash:x}", pod.id] for pod, c in rows_of(pods.pods)
    ]


def test_quiet_prints_container_ids(run: Runner, sim: SimRuntime, runtime: CRIRuntime) -> None:
    with paused(sim, runtime, False) as pods:
        result = run("ps", "-r", sim.endpoint, "-q")
    assert result.returncode == 0, result
    assert result.lines() == [c.id.id for _, c in rows_of(pods.pods)]


def test_name_selects_containers_and_namespace_selects_pods(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with paused(sim, runtime, True) as pods:
        result = run("ps", "-r", sim.endpoint, "-a", "-q", "--name", "^istio", "-n", "default")
    assert result.returncode == 0, result
    expected = [
        c.id.id
        for pod, c in rows_of(pods.pods)
        if c.name.startswith("istio") and pod.namespace == "default"
    ]
    assert expected, "the simulation should have istio sidecars in default"
    assert result.lines() == expected


@pytest.mark.parametrize("by", ["uid", "full-name", "sandbox-prefix"])
def test_pod_option_shows_one_pods_containers(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime, by: str
) -> None:
    with paused(sim, runtime, True) as pods:
        pod = next(p for p in pods if len(p.containers) > 1 and p.sandboxes)
        ref = {
            "uid": pod.id,
            "full-name": pod.full_name,
            "sandbox-prefix": pod.sandboxes[0].id.id[:12],
        }
        result = run("ps", "-r", sim.endpoint, "-a", "-q", "--pod", ref[by])
    assert result.returncode == 0, result
    assert result.lines() == [c.id.id for c in pod.containers]


def test_pod_option_naming_nothing_is_not_found(run: Runner, sim: SimRuntime) -> None:
    result = run("ps", "-r", sim.endpoint, "-p", "no-such-pod_default")
    assert result.returncode == 3, result
    assert "no-such-pod_default" in result.stderr
