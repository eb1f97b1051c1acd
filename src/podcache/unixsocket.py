"""Claiming, owning and releasing the path of a listening unix socket (``podcache serve``, its
CRI socket and the simulator).

Rules:

1. **Claim.** A server that died leaves its socket file behind; binding over it fails. So
   before binding: the directory must exist and must not be writable by every user unless it
   is sticky (anyone could swap the socket for their own), a file that is not a socket is
   never touched, a socket someone still listens on is an error, and a stale one (nothing
   accepts on it) is removed.
2. **Own.** Right after the bind the path's device and inode are recorded (``BoundSocket``).
   Mode and group are then set through a descriptor of that very inode (``O_PATH``), never by
   a path that could have become a symlink.
3. **Release.** A path is removed only by the process that bound it, and only while it still
   holds the inode it bound: a refused or failed start removes nothing, and a socket another
   process put there since is left alone.
"""

from __future__ import annotations

import os
import socket
import stat
from dataclasses import dataclass

__all__ = ["BoundSocket", "claim_socket_path", "socket_in_use"]


def socket_in_use(path: str) -> bool:
    """Whether a server accepts connections on the unix socket at ``path`` (1 s at most)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return False
        return True


def _check_directory(path: str, directory: str) -> None:
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot listen on {path}: directory {directory} does not exist")
    mode = os.stat(directory).st_mode
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise PermissionError(
            f"cannot listen on {path}: directory {directory} is writable by every user and not "
            "sticky, so anyone could replace the socket; use a directory only root can write"
        )


def claim_socket_path(path: str) -> None:
    """Make ``path`` free to bind, removing a stale socket; the errors name the path (rule 1).

    FileNotFoundError: the directory is missing. PermissionError: the directory is writable by
    all and not sticky. FileExistsError: a file that is not a socket is there. OSError: another
    server listens there.
    """
    _check_directory(path, os.path.dirname(path) or ".")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(
            f"cannot listen on {path}: a file that is not a socket is there; it will not touch it"
        )
    if socket_in_use(path):
        raise OSError(f"cannot listen on {path}: another server is listening there")
    os.unlink(path)  # stale: left by a process that died


@dataclass(frozen=True, slots=True)
class BoundSocket:
    """The socket file this process bound at ``path``: its device and inode (rule 2)."""

    path: str
    device: int
    inode: int

    @classmethod
    def record(cls, path: str) -> BoundSocket:
        """The socket now at ``path``; call right after binding it."""
        status = os.lstat(path)
        if not stat.S_ISSOCK(status.st_mode):
            raise OSError(f"cannot listen on {path}: the bound socket was replaced")
        return cls(path, status.st_dev, status.st_ino)

    def _ours(self, status: os.stat_result) -> bool:
        return (
            stat.S_ISSOCK(status.st_mode)
            and status.st_dev == self.device
            and status.st_ino == self.inode
        )

    def set_access(self, mode: int, group: int | None) -> None:
        """Give the socket ``group`` (None: keep it), then ``mode``, through a descriptor of the
        bound inode; OSError naming the path when it is no longer there."""
        descriptor = os.open(self.path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if not self._ours(os.fstat(descriptor)):
                raise OSError(f"{self.path}: the socket podcache bound was replaced")
            inode_path = f"/proc/self/fd/{descriptor}"  # the inode itself, not the path
            if group is not None:
                os.chown(inode_path, -1, group)
            os.chmod(inode_path, mode)
        finally:
            os.close(descriptor)

    def remove(self) -> bool:
        """Unlink the path if it still holds the bound socket (rule 3); whether it did."""
        try:
            if not self._ours(os.lstat(self.path)):
                return False
            os.unlink(self.path)
        except FileNotFoundError:
            return False
        return True
