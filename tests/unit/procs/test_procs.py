"""``podcache.procs``: container and pod from ``/proc/<pid>/cgroup`` in every format the module
documents, the process's identity from ``stat``, PID reuse while reading, hostile contents."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podcache import procs
from podcache.procs import (
    MAX_CGROUP_BYTES,
    MAX_STAT_BYTES,
    CgroupOwner,
    ProcessIdentity,
    ProcFormatError,
    cgroup_owner,
    container_of_pid,
    owner_from_cgroup,
    read_identity,
)
from podcache.sim.flavor import CONTAINERD, CRIO
from tests.unit.procs.tree import ProcTree, cid, hybrid, stat_line, uid

C = cid(0xABCDEF01)
C2 = cid(2)
NODE = cid(3)
U = uid(7)
U_ = U.replace("-", "_")
STATIC = "6a5d4b1c2e3f40718293a4b5c6d7e8f9"  # a static pod's UID: 32 hex digits

# (name, cgroup file lines, expected container, expected pod UID)
FORMATS: list[tuple[str, list[str], str | None, str | None]] = [
    ("v1 cgroupfs", hybrid(f"/kubepods/burstable/pod{U}/{C}"), C, U),
    ("v2 cgroupfs", [f"0::/kubepods/besteffort/pod{U}/{C}"], C, U),
    ("v2 guaranteed qos", [f"0::/kubepods/pod{U}/{C}"], C, U),
    ("deep cgroup_parent", [f"0::/a/b.c/d/e/kubepods/burstable/pod{U}/{C}"], C, U),
    ("test harness parent", hybrid(f"/podcachetest/pod{U}/{C}"), C, U),
    (
        "v2 systemd containerd",
        [
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{U_}.slice/cri-containerd-{C}.scope"
        ],
        C,
        U,
    ),
    (
        "v1 systemd guaranteed",
        hybrid(f"/kubepods.slice/kubepods-pod{U_}.slice/cri-containerd-{C}.scope"),
        C,
        U,
    ),
    (
        "systemd crio",
        [
            f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{U_}.slice/crio-{C}.scope"
        ],
        C,
        U,
    ),
    (
        "systemd docker",
        [
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U_}.slice/docker-{C}.scope"
        ],
        C,
        U,
    ),
    ("cgroupfs crio (no .scope)", [f"0::{CRIO.cgroup_path(U, C, 'cgroupfs')}"], C, U),
    (
        "v1 cgroupfs crio, besteffort",
        hybrid(CRIO.cgroup_path(U, C, "cgroupfs", "besteffort")),
        C,
        U,
    ),
    ("systemd crio, as the simulator makes it", [f"0::{CRIO.cgroup_path(U, C, 'systemd')}"], C, U),
    (
        "crio under crun (a child of its scope)",
        [f"0::{CRIO.cgroup_path(U, C, 'systemd')}/container"],
        C,
        U,
    ),
    (
        "cgroupfs crio conmon: the pod only",
        [f"0::{CRIO.monitor_cgroup_path(U, C, 'cgroupfs')}"],
        None,
        U,
    ),
    (
        "systemd crio conmon: the pod only",
        [f"0::{CRIO.monitor_cgroup_path(U, C, 'systemd')}"],
        None,
        U,
    ),
    (
        "cgroupfs containerd, as the simulator makes it",
        [f"0::{CONTAINERD.cgroup_path(U, C)}"],
        C,
        U,
    ),
    ("docker without pods", [f"0::/system.slice/docker-{C}.scope"], C, None),
    ("docker cgroupfs without pods", hybrid(f"/docker/{C}"), C, None),
    (
        "crio conmon: the pod only",
        [f"0::/kubepods.slice/kubepods-pod{U_}.slice/crio-conmon-{C}.scope"],
        None,
        U,
    ),
    ("pod cgroup itself", [f"0::/kubepods/burstable/pod{U}"], None, U),
    ("sub-cgroup init.scope", [f"0::/kubepods/burstable/pod{U}/{C}/init.scope"], C, U),
    (
        "nested systemd in a systemd-driver container",
        [
            f"0::/kubepods.slice/kubepods-pod{U_}.slice/cri-containerd-{C}.scope/"
            "system.slice/nginx.service"
        ],
        C,
        U,
    ),
    ("nested runtime below the container", [f"0::/kubepods/pod{U}/{C}/docker/{C2}"], C, U),
    (
        "a container's own fake pod below it",
        [f"0::/kubepods/pod{U}/{C}/kubepods/pod{uid(9)}/{C2}"],
        C,
        U,
    ),
    ("kind node above the pod", [f"0::/docker/{NODE}/kubepods/burstable/pod{U}/{C}"], C, U),
    (
        "kind node, systemd",
        [f"0::/system.slice/docker-{NODE}.scope/kubepods/burstable/pod{U}/{C}"],
        C,
        U,
    ),
    ("cgroup namespace (relative path)", [f"0::/../../kubepods/burstable/pod{U}/{C}"], C, U),
    ("static pod UID", [f"0::/kubepods/burstable/pod{STATIC}/{C}"], C, STATIC),
    (
        "systemd static pod UID",
        [f"0::/kubepods.slice/kubepods-pod{STATIC}.slice/crio-{C}.scope"],
        C,
        STATIC,
    ),
    ("removed cgroup (v2)", [f"0::/kubepods/pod{U}/{C} (deleted)"], C, U),
    (
        "first line naming a container wins",
        [f"4:memory:/kubepods/pod{U}", f"3:cpu:/kubepods/pod{U}/{C}", f"0::/kubepods/pod{U}/{C2}"],
        C,
        U,
    ),
    ("host root", hybrid("/"), None, None),
    ("host service", ["0::/system.slice/containerd.service"], None, None),
    ("host user session", ["0::/user.slice/user-0.slice/session-3.scope"], None, None),
    (
        "32 hex is no container",
        ["4:memory:/process_api/12416ec9abdf2faaa7ae48b2c9d0a2f4", "0::/"],
        None,
        None,
    ),
    ("upper-case hex is no container", [f"0::/docker/{C.upper()}"], None, None),
    ("63 hex digits", [f"0::/docker/{C[:63]}"], None, None),
    ("65 hex digits", [f"0::/docker/{C}0"], None, None),
    ("malformed UID", [f"0::/kubepods/pod{U[:-1]}x/{C}"], C, None),
    ("empty file", [], None, None),
]


@pytest.mark.parametrize(
    ("lines", "container", "pod"), [f[1:] for f in FORMATS], ids=[f[0] for f in FORMATS]
)
def test_every_documented_format(
    tmp_path: Path, lines: list[str], container: str | None, pod: str | None
) -> None:
    tree = ProcTree(tmp_path)
    tree.add(42, lines)
    owner = cgroup_owner(42, proc_root=tree.path)
    assert (owner.container_id, owner.pod_uid) == (container, pod)
    assert container_of_pid(42, proc_root=tree.path) == container


@pytest.mark.parametrize(
    ("path", "outer"),
    [
        (f"/docker/{NODE}/kubepods/burstable/pod{U}/{C}", NODE),
        (f"/system.slice/docker-{NODE}.scope/kubepods/pod{U}/{C}", NODE),
        (f"/kubepods/pod{U}/{C}", None),
        (f"/mine/{C}/pod{uid(9)}/{C2}", C),  # a container's own pod-like sub-cgroup
    ],
)
def test_the_container_above_the_pod_is_kept(tmp_path: Path, path: str, outer: str | None) -> None:
    tree = ProcTree(tmp_path)
    tree.add(42, path)
    assert cgroup_owner(42, proc_root=tree.path).outer_id == outer


def test_a_sandbox_is_found_like_a_container(tmp_path: Path) -> None:
    """The pause process's cgroup names the sandbox ID (the runtime lists it as the sandbox)."""
    sandbox = cid(11)
    tree = ProcTree(tmp_path)
    tree.add(7, hybrid(f"/kubepods/besteffort/pod{U}/{sandbox}"), comm="pause")
    assert container_of_pid(7, proc_root=tree.path) == sandbox


def test_no_such_process(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path)
    with pytest.raises(ProcessLookupError):
        container_of_pid(4242, proc_root=tree.path)


def test_stat_without_cgroup_is_a_vanished_process(tmp_path: Path) -> None:
    """The process exited between the two reads (its directory went with it)."""
    tree = ProcTree(tmp_path)
    tree.write_raw(5, "stat", stat_line(5, 10).encode())
    with pytest.raises(ProcessLookupError):
        container_of_pid(5, proc_root=tree.path)


@pytest.mark.parametrize("pid", [0, -1, procs.PID_MAX + 1])
def test_pid_out_of_range(tmp_path: Path, pid: int) -> None:
    with pytest.raises(ValueError, match="pid must be from 1"):
        container_of_pid(pid, proc_root=str(tmp_path))


@pytest.mark.parametrize("pid", [True, "12", 1.0, None])
def test_pid_not_an_int(tmp_path: Path, pid: object) -> None:
    with pytest.raises(TypeError, match="pid must be an int"):
        container_of_pid(pid, proc_root=str(tmp_path))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "comm", ["sleep", "a b c", "x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99 (y", "((", ")"]
)
def test_start_time_read_past_any_comm(tmp_path: Path, comm: str) -> None:
    tree = ProcTree(tmp_path)
    tree.add(9, "/", start_ticks=123456, comm=comm)
    assert read_identity(9, tree.path) == ProcessIdentity(9, 123456)


def test_start_time_of_a_real_process() -> None:
    """Our own process: started after boot, before now (uptime in ticks)."""
    identity = read_identity(os.getpid())
    assert 0 < identity.start_ticks <= procs.uptime() * procs.CLOCK_TICKS + 1


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"9 (x)",
        b"9 (x) S 1 2",
        b"9 (x) S " + b"1 " * 18 + b"12a 0",
        b"no parens at all " * 5,
        b"9 (x) S " + b"1 " * 18 + b"9" * 21 + b" 0",
    ],
)
def test_malformed_stat(tmp_path: Path, data: bytes) -> None:
    tree = ProcTree(tmp_path)
    tree.add(9, "/")
    tree.write_raw(9, "stat", data)
    with pytest.raises(ProcFormatError, match="/9/stat"):
        read_identity(9, tree.path)


def test_stat_larger_than_the_bound(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path)
    tree.add(9, "/")
    line = stat_line(9, 5).encode()
    tree.write_raw(9, "stat", line + b" " * (MAX_STAT_BYTES + 1 - len(line)))
    with pytest.raises(ProcFormatError, match=f"larger than {MAX_STAT_BYTES} bytes"):
        read_identity(9, tree.path)
    tree.write_raw(9, "stat", line + b" " * (MAX_STAT_BYTES - len(line)))  # exactly at it
    assert read_identity(9, tree.path).start_ticks == 5


def test_cgroup_file_at_and_past_the_bound(tmp_path: Path) -> None:
    tree = ProcTree(tmp_path)
    tree.add(9, "/")
    line = f"0::/kubepods/pod{U}/{C}\n".encode()
    padding = b"9:x:/" + b"a" * (MAX_CGROUP_BYTES - len(line) - 6) + b"\n"
    tree.write_raw(9, "cgroup", padding + line)
    assert len(padding + line) == MAX_CGROUP_BYTES
    assert container_of_pid(9, proc_root=tree.path) == C
    tree.write_raw(9, "cgroup", b"x" + padding + line)
    with pytest.raises(ProcFormatError, match=f"larger than {MAX_CGROUP_BYTES} bytes"):
        container_of_pid(9, proc_root=tree.path)


def test_malformed_lines_are_skipped() -> None:
    data = b"\n".join(
        [
            b"garbage",
            b"x:y:/docker/" + C.encode(),
            b"1:cpu:relative/" + C.encode(),
            b"\xff\xfe::",
            b"0::/kubepods/pod" + U.encode() + b"/" + C2.encode(),
        ]
    )
    assert owner_from_cgroup(data) == CgroupOwner(C2, U)


# -- PID reuse ----------------------------------------------------------------------------------


def _swap_after(monkeypatch: pytest.MonkeyPatch, name: str, swap: object) -> list[str]:
    """Wrap the module's reader: right after it reads a file ending in ``name``, ``swap()``."""
    real = procs._reader
    reads: list[str] = []

    def reader(path: str, limit: int) -> bytes:
        data = real(path, limit)
        reads.append(path)
        if path.endswith(name):
            swap()  # type: ignore[operator]
        return data

    monkeypatch.setattr(procs, "_reader", reader)
    return reads


@pytest.mark.parametrize("after", ["/cgroup", "/stat"])
def test_pid_reused_while_reading_is_never_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: str
) -> None:
    """Process 50 (in container C) exits; a new process 50 (in C2) starts between the reads.
    Whichever read the swap follows, the answer is never C2's (nor C's for the new one)."""
    tree = ProcTree(tmp_path)
    tree.add(50, f"/kubepods/pod{U}/{C}", start_ticks=1000)
    swapped = [False]

    def swap() -> None:
        if not swapped[0]:
            swapped[0] = True
            tree.add(50, f"/kubepods/pod{uid(8)}/{C2}", start_ticks=2000)

    reads = _swap_after(monkeypatch, after, swap)
    with pytest.raises(ProcessLookupError, match="exited while its cgroup was read"):
        container_of_pid(50, proc_root=tree.path)
    assert [Path(p).name for p in reads] == ["stat", "cgroup", "stat"]
    # Once settled, the new process is answered (its own container).
    monkeypatch.setattr(procs, "_reader", procs._read)
    assert container_of_pid(50, proc_root=tree.path) == C2


def test_same_identity_before_and_after_is_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the start time tells processes apart: a change of comm alone is the same process."""
    tree = ProcTree(tmp_path)
    tree.add(51, f"/kubepods/pod{U}/{C}", start_ticks=1000, comm="sh")
    _swap_after(
        monkeypatch,
        "/cgroup",
        lambda: tree.add(51, f"/kubepods/pod{U}/{C}", start_ticks=1000, comm="app"),
    )
    assert container_of_pid(51, proc_root=tree.path) == C
