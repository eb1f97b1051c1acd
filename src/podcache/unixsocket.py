"""Claiming a path for a listening unix socket (``podcache serve`` and the simulator).

A server that died leaves its socket file behind; binding over it fails. So before binding:
the directory must exist, a file that is not a socket is never touched, a socket someone still
listens on is an error, and a stale one (nothing accepts on it) is removed.
"""

from __future__ import annotations

import os
import socket
import stat

__all__ = ["claim_socket_path", "socket_in_use"]


def socket_in_use(path: str) -> bool:
    """Whether a server accepts connections on the unix socket at ``path`` (1 s at most)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return False
        return True


def claim_socket_path(path: str) -> None:
    """Make ``path`` free to bind, removing a stale socket; the errors name the path.

    FileNotFoundError: the directory is missing. FileExistsError: a file that is not a socket
    is there. OSError: another server listens there.
    """
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot listen on {path}: directory {directory} does not exist")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(f"cannot listen on {path}: a file that is not a socket is there")
    if socket_in_use(path):
        raise OSError(f"cannot listen on {path}: another server is listening there")
    os.unlink(path)  # stale: left by a process that died
