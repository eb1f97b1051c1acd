"""``podcache which PID...``: processes in a fixture ``/proc`` whose cgroups name containers of
the simulated runtime; the table and JSON are compared with the runtime's own pods."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podcache.cri import CRIRuntime
from podcache.model import Pod
from podcache.sim import CONTAINERD, CRIO, Flavor, SimRuntime
from podcache.sim.flavor import CgroupDriver
from tests.cli.conftest import Runner, container_json, parse, paused, pod_json, table
from tests.unit.procs.tree import ProcTree, cid, hybrid

UPTIME = 5000.0
LONG_AGO = int((UPTIME - 60) * 100)


def pick(pods: list[Pod]) -> Pod:
    return next(p for p in pods if p.containers and p.sandboxes)


def tree_for(root: Path, p: Pod) -> ProcTree:
    """100: p's first container; 101: its sandbox; 102: a host process; 103: a container the
    runtime does not know; no 104."""
    tree = ProcTree(root, uptime=UPTIME)
    tree.add(
        100, hybrid(f"/kubepods/burstable/pod{p.id}/{p.containers[0].id.id}"), start_ticks=LONG_AGO
    )
    tree.add(
        101, hybrid(f"/kubepods/burstable/pod{p.id}/{p.sandboxes[0].id.id}"), start_ticks=LONG_AGO
    )
    tree.add(102, hybrid("/system.slice/containerd.service"), start_ticks=LONG_AGO)
    tree.add(103, hybrid(f"/kubepods/pod{p.id}/{cid(12345)}"), start_ticks=LONG_AGO)
    return tree


def test_table_rows_for_found_processes(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime, tmp_path: Path
) -> None:
    with paused(sim, runtime, False) as pods:
        p = pick(list(pods))
        tree = tree_for(tmp_path, p)
        result = run("which", "100", "101", "-r", sim.endpoint, "--proc-root", tree.path)
    assert result.returncode == 0, result
    header, rows = table(result)
    assert header == ["PID", "CONTAINER", "POD", "NAMESPACE", "STATE"]
    c, s = p.containers[0], p.sandboxes[0]
    assert rows == [
        ["100", c.id.id[:13], p.name, p.namespace, c.state.value.capitalize()],
        ["101", s.id.id[:13], p.name, p.namespace, s.state.value.capitalize()],
    ]


def test_json_has_the_api_shapes(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime, tmp_path: Path
) -> None:
    with paused(sim, runtime, False) as pods:
        p = pick(list(pods))
        tree = tree_for(tmp_path, p)
        result = run(
            "which", "100", "-o", "json", "--no-trunc", "-r", sim.endpoint, "--proc-root", tree.path
        )
    assert result.returncode == 0, result
    assert parse("json", result.stdout) == {
        "items": [
            {
                "pid": 100,
                "pod": pod_json(p),
                "container": container_json(p.containers[0]),
                "reason": None,
            }
        ]
    }


@pytest.mark.parametrize(
    ("pid", "words", "reason"),
    [
        ("102", "is in no container", "not_in_container"),
        ("103", "the runtime does not list", "container_unknown"),
        ("104", "does not exist", "no_process"),
    ],
)
def test_any_pid_not_found_is_exit_3_with_the_reason(
    run: Runner,
    sim: SimRuntime,
    runtime: CRIRuntime,
    tmp_path: Path,
    *,
    pid: str,
    words: str,
    reason: str,
) -> None:
    with paused(sim, runtime, False) as pods:
        tree = tree_for(tmp_path, pick(list(pods)))
        result = run(
            "which", "100", pid, "-r", sim.endpoint, "--proc-root", tree.path, "-o", "json"
        )
    assert result.returncode == 3, result
    assert f"process {pid} " in result.stderr and words in result.stderr
    items = parse("json", result.stdout)["items"]
    assert [i["pid"] for i in items] == [100, int(pid)]
    assert items[0]["pod"] is not None and items[0]["reason"] is None
    assert items[1] == {"pid": int(pid), "pod": None, "container": None, "reason": reason}


def test_a_real_host_process_is_exit_3(run: Runner, sim: SimRuntime) -> None:
    result = run("which", str(os.getpid()), "-r", sim.endpoint)
    assert result.returncode == 3, result
    assert "is in no container" in result.stderr


def test_runtime_errors_are_exit_1(run: Runner, scratch: str, tmp_path: Path) -> None:
    tree = ProcTree(tmp_path)
    tree.add(100, hybrid(f"/kubepods/pod{cid(1)[:32]}/{cid(1)}"))
    result = run(
        "which", "100", "-r", f"unix://{scratch}/nothing-listens.sock", "--proc-root", tree.path
    )
    assert result.returncode == 1, result
    assert "nothing-listens.sock" in result.stderr


@pytest.mark.parametrize("arg", ["0", "abc", "-5", "4194305", "1.5", "٣"])
def test_a_bad_pid_is_a_usage_error_that_says_what_which_takes(
    run: Runner, sim: SimRuntime, arg: str
) -> None:
    result = run("which", "-r", sim.endpoint, "--", arg)
    assert result.returncode == 2, result
    assert f"{arg!r} is not a PID or an IP address: which takes process IDs" in result.stderr, (
        result.stderr
    )
    assert "1 to 4,194,304" in result.stderr


def test_at_least_one_pid(run: Runner, sim: SimRuntime) -> None:
    assert run("which", "-r", sim.endpoint).returncode == 2


def test_an_ip_argument_answers_the_pod_holding_it(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime, tmp_path: Path
) -> None:
    with paused(sim, runtime, False) as pods:
        p = pick([pod for pod in pods if pod.ips])
        tree = tree_for(tmp_path, p)
        ip = p.ips[0]
        result = run("which", ip, "100", "-r", sim.endpoint, "--proc-root", tree.path)
        as_json = run("which", ip, "-o", "json", "-r", sim.endpoint)
    assert result.returncode == 0, result
    header, rows = table(result)
    assert header == ["PID/IP", "CONTAINER", "POD", "NAMESPACE", "STATE"]
    assert rows[0] == [ip, "-", p.name, p.namespace, "-"]
    assert rows[1][0] == "100" and rows[1][2] == p.name
    assert as_json.returncode == 0, as_json
    assert parse("json", as_json.stdout) == {
        "items": [{"ip": ip, "pod": pod_json(p), "container": None, "reason": None}]
    }


def test_an_ip_no_pod_holds_is_exit_3_naming_it(run: Runner, sim: SimRuntime) -> None:
    result = run("which", "192.0.2.77", "-o", "json", "-r", sim.endpoint)
    assert result.returncode == 3, result
    assert "IP 192.0.2.77 is held by no pod the runtime lists" in result.stderr
    assert parse("json", result.stdout) == {
        "items": [{"ip": "192.0.2.77", "pod": None, "container": None, "reason": "no_pod"}]
    }
    header, _ = table(run("which", "2001:DB8::0:1", "-r", sim.endpoint))
    assert header[0] == "IP"


def test_an_ipv4_mapped_ip_answers_as_its_ipv4_address(
    run: Runner, sim: SimRuntime, runtime: CRIRuntime
) -> None:
    """``podcache which ::ffff:10.204.155.2`` finds the pod holding 10.204.155.2."""
    with paused(sim, runtime, False) as pods:
        p = pick([pod for pod in pods if any("." in ip for ip in pod.ips)])
        ip = next(ip for ip in p.ips if "." in ip)
        result = run("which", f"::ffff:{ip}", "-o", "json", "-r", sim.endpoint)
    assert result.returncode == 0, result
    assert parse("json", result.stdout) == {
        "items": [{"ip": ip, "pod": pod_json(p), "container": None, "reason": None}]
    }


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
@pytest.mark.parametrize("flavor", [CONTAINERD, CRIO], ids=lambda f: f.name)
def test_each_runtimes_cgroup_names_find_the_container_and_conmon_only_the_pod(
    run: Runner, tmp_path: Path, flavor: Flavor, driver: CgroupDriver
) -> None:
    """The cgroups each runtime makes under each driver (``podcache.sim.flavor``, from CRI-O's
    ``internal/config/cgmgr``): CRI-O's cgroupfs ``crio-<id>`` has no ``.scope``; its conmon
    (``crio-conmon-<id>``) is in the pod but in no container."""
    with SimRuntime(6, seed=3, flavor=flavor) as sim, CRIRuntime(sim.endpoint) as runtime:
        p = pick(list(runtime.get_pods()))
        tree = ProcTree(tmp_path, uptime=UPTIME)
        container, sandbox = p.containers[0], p.sandboxes[0]
        tree.add(100, [f"0::{flavor.cgroup_path(p.id, container.id.id, driver)}"], start_ticks=1)
        tree.add(101, hybrid(flavor.cgroup_path(p.id, sandbox.id.id, driver)), start_ticks=1)
        pids = ["100", "101"]
        conmon = flavor.monitor_cgroup_path(p.id, container.id.id, driver)
        if conmon is not None:
            tree.add(102, [f"0::{conmon}"], start_ticks=1)
            pids.append("102")
        result = run("which", *pids, "-o", "json", "-r", sim.endpoint, "--proc-root", tree.path)
    items = parse("json", result.stdout)["items"]
    assert [(i["pod"]["id"], i["container"]["id"]) for i in items[:2]] == [
        (p.id, container_json(container)["id"]),
        (p.id, container_json(sandbox)["id"]),
    ]
    if conmon is not None:
        assert items[2]["pod"]["id"] == p.id and items[2]["container"] is None
