"""``podcache pods``: every output format read back and compared with the runtime's own pods."""

from __future__ import annotations

import json

import pytest

from podcache.cri import CRIRuntime
from podcache.sim import SimRuntime
from podcache.sim.population import PodShape
from tests.cli.conftest import (
    TRUNC,
    Runner,
    assert_age,
    newest_sandbox_id,
    parse,
    paused,
    pod_json,
    pod_state,
    table,
)


@pytest.mark.parametrize("all_", [False, True], ids=["running", "all"])
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_document_is_exactly_the_runtimes_pods(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime, fmt: str, all_: bool
) -> None:
    flags = ["-a"] if all_ else []
    with paused(sim, runtime, all_) as pods:
        result = run("pods", "-r", sim.endpoint, "-o", fmt, *flags)
    assert result.returncode == 0, result
    assert parse(fmt, result.stdout) == {"items": [pod_json(p) for p in pods]}


def test_table_rows_are_the_pods_newest_first(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with paused(sim, runtime, False) as pods:
        result = run("pods", "-r", sim.endpoint)
    assert result.returncode == 0, result
    header, rows = table(result)
    assert header == [
        "POD ID",
        "CREATED",
        "STATE",
        "NAME",
        "NAMESPACE",
        "ATTEMPT",
        "CONTAINERS",
    ]
    assert len(rows) == len(pods)
    for row, pod in zip(rows, pods, strict=True):
        pod_id, created, state, name, namespace, attempt, containers = row
        assert pod_id == newest_sandbox_id(pod)[:TRUNC]
        assert_age(created, pod.created_at)
        assert (state, name, namespace) == (pod_state(pod), pod.name, pod.namespace)
        assert attempt == (str(pod.sandboxes[0].attempt) if pod.sandboxes else "-")
        assert containers == str(len(pod.containers))


def test_attempt_is_the_newest_sandboxs_as_crictl_shows_it(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with sim.pause_churn():
        sim.population.create_pod(PodShape.RESTARTED_SANDBOX)
        with paused(sim, runtime, True) as pods:
            result = run("pods", "-r", sim.endpoint, "-a", "--no-trunc")
    assert result.returncode == 0, result
    _, rows = table(result)
    attempts = {row[0]: row[5] for row in rows}
    restarted = [p for p in pods if len(p.sandboxes) == 2]
    assert restarted
    for pod in restarted:  # attempt 1 READY beside attempt 0 NOTREADY: the newest is shown
        assert attempts[newest_sandbox_id(pod)] == "1"


def test_wide_table_adds_ip_uid_sandboxes_names_and_labels(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with paused(sim, runtime, True) as pods:
        result = run("pods", "-r", sim.endpoint, "-a", "-o", "wide", "--no-trunc")
    assert result.returncode == 0, result
    header, rows = table(result)
    assert header[7:] == ["IP", "UID", "SANDBOXES", "CONTAINER NAMES", "LABELS"]
    assert len(rows) == len(pods)
    for row, pod in zip(rows, pods, strict=True):
        assert row[0] == newest_sandbox_id(pod)
        assert row[2] == pod_state(pod)
        assert row[7] == ("host" if pod.host_network else pod.ips[0] if pod.ips else "-")
        assert row[8] == pod.id
        assert row[9] == str(len(pod.sandboxes))
        assert row[10] == (",".join(c.name for c in pod.containers) or "-")
        labels = ",".join(f"{k}={v}" for k, v in pod.label_map().items())
        assert row[11] == (labels or "-")
    assert {row[2] for row in rows} == {"Ready", "NotReady"}  # -a shows not-ready pods too
    ips = [row[7] for row in rows if row[2] == "Ready"]
    assert sum(ip.startswith("10.244.") for ip in ips) > len(ips) // 2  # ready pods have IPs


def test_quiet_prints_full_ids_inspect_accepts(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    with paused(sim, runtime, True) as pods:
        result = run("pods", "-r", sim.endpoint, "-a", "-q")
    assert result.returncode == 0, result
    assert result.lines() == [newest_sandbox_id(p) for p in pods]
    assert all(len(line) == 64 for line in result.lines())


@pytest.mark.parametrize(
    ("flags", "keep"),
    [
        (["-n", "payments"], lambda p: p.namespace == "payments"),
        (["--namespace", "pay"], lambda p: False),  # exact, not a substring
        (["--name", "^web-"], lambda p: p.name.startswith("web-")),
        (["--name", "api"], lambda p: "api" in p.name),  # searched: a substring matches
        (["-l", "tier=backend"], lambda p: p.label("tier") == "backend"),
        (["--label", "app"], lambda p: p.label("app") is not None),
        (
            ["-l", "tier=data", "-l", "app=web", "-n", "default"],
            lambda p: (p.label("tier"), p.label("app"), p.namespace) == ("data", "web", "default"),
        ),
        (["-l", "tier=nope"], lambda p: False),
    ],
    ids=[
        "namespace",
        "namespace-exact",
        "name-regex",
        "name-substring",
        "label",
        "label-key",
        "all-must-match",
        "label-none",
    ],
)
def test_filters_select_pods(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime, flags: list[str], keep: object
) -> None:
    assert callable(keep)
    with paused(sim, runtime, True) as pods:
        result = run("pods", "-r", sim.endpoint, "-a", "-q", *flags)
    assert result.returncode == 0, result
    assert result.lines() == [newest_sandbox_id(p) for p in pods if keep(p)]


def test_empty_selection_prints_only_the_header(run: Runner, sim: SimRuntime) -> None:
    result = run("pods", "-r", sim.endpoint, "-n", "no-such-namespace")
    assert result.returncode == 0, result
    assert result.lines() == ["POD ID   CREATED   STATE   NAME   NAMESPACE   ATTEMPT   CONTAINERS"]
    empty = run("pods", "-r", sim.endpoint, "-n", "no-such-namespace", "-o", "json")
    assert json.loads(empty.stdout) == {"items": []}
