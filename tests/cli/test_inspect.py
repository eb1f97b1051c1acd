"""``podcache inspect ID``: one pod by UID, name_namespace, full, bare or prefix container or
sandbox ID; not found is exit 3, an ambiguous or too short prefix exit 2."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from podcache.cri import CRIRuntime
from podcache.model import Container, Pod, PodList
from podcache.sim import SimRuntime
from tests.cli.conftest import Runner, parse, paused, pod_json


def pick(pods: PodList) -> Pod:
    """A pod with an exited container and a sandbox: something only -a listings show."""
    return next(
        p for p in pods if p.sandboxes and any(c.state.value == "exited" for c in p.containers)
    )


REFS: dict[str, tuple[Callable[[Pod], str], Callable[[Pod], Container | None]]] = {
    "uid": (lambda p: p.id, lambda p: None),
    "full-name": (lambda p: p.full_name, lambda p: None),
    "container-full": (lambda p: p.containers[0].id.qualified, lambda p: p.containers[0]),
    "container-bare": (lambda p: p.containers[0].id.id, lambda p: p.containers[0]),
    "container-prefix": (lambda p: p.containers[-1].id.id[:10], lambda p: p.containers[-1]),
    "sandbox-full": (lambda p: p.sandboxes[0].id.qualified, lambda p: p.sandboxes[0]),
    "sandbox-prefix": (lambda p: p.sandboxes[-1].id.id[:8], lambda p: p.sandboxes[-1]),
}
"""How the pod is named, and the container or sandbox that names (None: the pod itself)."""


def matched_json(pod: Pod, item: Container | None) -> dict[str, object] | None:
    if item is None:
        return None
    kind = "sandbox" if any(item is s for s in pod.sandboxes) else "container"
    return {"kind": kind, "id": item.id.qualified, "name": item.name, "attempt": item.attempt}


@pytest.mark.parametrize("by", list(REFS))
def test_finds_the_pod_and_says_what_matched_as_json(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime, by: str
) -> None:
    ref, named = REFS[by]
    with paused(sim, runtime, True) as pods:
        pod = pick(pods)
        result = run("inspect", ref(pod), "-r", sim.endpoint)
    assert result.returncode == 0, result
    assert parse("json", result.stdout) == pod_json(pod) | {
        "matched": matched_json(pod, named(pod))
    }


def test_table_says_which_container_matched(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with paused(sim, runtime, True) as pods:
        pod = pick(pods)
        container = pod.containers[-1]
        result = run("inspect", container.id.id[:12], "-r", sim.endpoint, "-o", "table")
    assert result.returncode == 0, result
    lines = result.lines()
    assert f"Matched:     container {container.name} ({container.id.id[:13]})" in lines
    marked = [line.split()[:3] for line in lines if line.startswith(("sandbox *", "container *"))]
    assert marked == [["container", "*", container.id.id[:13]]]


def test_yaml_and_table_outputs(run: Runner, sim: SimRuntime, runtime: CRIRuntime) -> None:
    with paused(sim, runtime, True) as pods:
        pod = pick(pods)
        as_yaml = run("inspect", pod.id, "-r", sim.endpoint, "-o", "yaml")
        as_table = run("inspect", pod.id, "-r", sim.endpoint, "-o", "table")
    assert as_yaml.returncode == 0, as_yaml
    assert parse("yaml", as_yaml.stdout) == pod_json(pod) | {"matched": None}
    assert as_table.returncode == 0, as_table
    lines = as_table.lines()
    assert f"UID:         {pod.id}" in lines
    assert f"Name:        {pod.name}" in lines
    members = [line.split()[:2] for line in lines if line.startswith(("sandbox ", "container "))]
    assert members == [["sandbox", s.id.id[:13]] for s in pod.sandboxes] + [
        ["container", c.id.id[:13]] for c in pod.containers
    ]


def test_wrong_runtime_type_in_a_full_id_is_not_found(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with paused(sim, runtime, True) as pods:
        bare = pods[0].sandboxes[0].id.id
    result = run("inspect", f"containerd://{bare}", "-r", sim.endpoint)
    assert result.returncode == 3, result
    assert f"containerd://{bare}" in result.stderr


def test_nothing_matching_is_exit_3_without_traceback(run: Runner, sim: SimRuntime) -> None:
    result = run("inspect", "ffffffffffffffffffff-not-an-id", "-r", sim.endpoint)
    assert result.returncode == 3, result
    assert result.stderr.startswith("podcache: error: nothing matches 'ffffffffffffffffffff")
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_prefix_shorter_than_four_characters_is_a_usage_error(run: Runner, sim: SimRuntime) -> None:
    result = run("inspect", "abc", "-r", sim.endpoint)
    assert result.returncode == 2, result
    assert "'abc'" in result.stderr and "at least 4 characters" in result.stderr


def test_ambiguous_prefix_is_exit_2_and_lists_the_candidates(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with sim.pause_churn():
        for _ in range(400):  # add pods until two IDs share their first 4 characters
            pods = runtime.get_pods(True)
            ids = sorted(c.id.id for p in pods for c in (*p.containers, *p.sandboxes))
            shared = [a[:4] for a, b in itertools.pairwise(ids) if a[:4] == b[:4]]
            if shared:
                break
            sim.population.create_pod()
        else:
            pytest.fail("no two IDs share a 4-character prefix")
        prefix = shared[0]
        result = run("inspect", prefix, "-r", sim.endpoint)
    assert result.returncode == 2, result
    assert f"ID prefix '{prefix}' is ambiguous" in result.stderr
    candidates = [line.split()[0] for line in result.stderr.splitlines() if line.startswith("  ")]
    assert candidates == [i for i in ids if i.startswith(prefix)]
    assert len(candidates) >= 2
