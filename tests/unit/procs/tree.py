"""A fixture ``/proc`` tree on disk for ``proc_root=``: per process a ``stat`` and a ``cgroup``
file as the kernel writes them, and ``uptime``. Tests build the expected answers themselves."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

HEX = "0123456789abcdef"


def cid(seed: int) -> str:
    """A deterministic 64-hex container ID."""
    return (f"{seed:08x}" * 8)[:64]


def uid(seed: int) -> str:
    """A deterministic pod UID (UUID form)."""
    h = f"{seed:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def stat_line(pid: int, start_ticks: int, comm: str = "sleep") -> str:
    """``/proc/<pid>/stat``: fields 4-21 filler, field 22 the start time, then more."""
    middle = "1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0"
    tail = "1000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0"
    return f"{pid} ({comm}) S {middle} {start_ticks} {tail}\n"


def hybrid(path: str) -> list[str]:
    """A cgroup v1 hybrid file: every controller at ``path``, then the unified line."""
    controllers = ["pids", "blkio", "freezer", "devices", "memory", "cpuset", "cpu,cpuacct"]
    lines = [f"{12 - i}:{c}:{path}" for i, c in enumerate(controllers)]
    return [*lines, f"1:name=systemd:{path}", f"0::{path}"]


class ProcTree:
    """``root`` holds ``<pid>/stat``, ``<pid>/cgroup`` and ``uptime`` (seconds since boot)."""

    def __init__(self, root: Path, uptime: float = 1000.0) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.set_uptime(uptime)

    @property
    def path(self) -> str:
        return str(self.root)

    def set_uptime(self, seconds: float) -> None:
        (self.root / "uptime").write_text(f"{seconds:.2f} 12.34\n")

    def add(
        self,
        pid: int,
        cgroup: str | Sequence[str],
        *,
        start_ticks: int = 100,
        comm: str = "sleep",
    ) -> None:
        """A process; ``cgroup`` a v2 path (``0::`` is added) or the file's lines."""
        lines = [f"0::{cgroup}"] if isinstance(cgroup, str) else list(cgroup)
        directory = self.root / str(pid)
        directory.mkdir(exist_ok=True)
        (directory / "cgroup").write_text("".join(f"{line}\n" for line in lines))
        (directory / "stat").write_text(stat_line(pid, start_ticks, comm))

    def write_raw(self, pid: int, name: str, data: bytes) -> None:
        directory = self.root / str(pid)
        directory.mkdir(exist_ok=True)
        (directory / name).write_bytes(data)

    def remove(self, pid: int) -> None:
        shutil.rmtree(self.root / str(pid), ignore_errors=True)
