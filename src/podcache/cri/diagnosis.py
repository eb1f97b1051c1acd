"""Socket diagnosis: what a plain connection to the endpoint shows.

Holds the checks made before a call on a channel that is not READY (``_unreachable``: no
socket, refused, denied, in tens of microseconds), the probe made after a deadline
(``_probe``: connect, send the HTTP/2 preface, read the first frame header, within
``min(0.5, timeout)`` seconds), and the words for an ``OSError``. Deliberately not here: the
error raised from what they show (``failures``).
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import time
from dataclasses import dataclass

from podcache.cri.endpoint import Endpoint

_PROBE_BUDGET = 0.5


# The HTTP/2 client connection preface and an empty SETTINGS frame: what gRPC sends first.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


_H2_FRAME_HEADER = 9


_H2_SETTINGS = 0x04


def _os_reason(error: OSError) -> str:
    if error.errno in (errno.ENOENT, errno.ENOTDIR):
        return "socket does not exist"
    if error.errno == errno.ECONNREFUSED:
        return "connection refused: nothing is listening (is the runtime running?)"
    if error.errno in (errno.EACCES, errno.EPERM):
        return "permission denied on the socket (run as root?)"
    return f"cannot connect: {error.strerror or error}"


@dataclass(frozen=True, slots=True)
class _Probe:
    """What a plain connection to the endpoint showed after a deadline.

    ``error``: connecting failed. Else ``reply``: the first bytes the server sent after our
    HTTP/2 preface; ``b""`` when it closed the connection; None when it sent nothing in time.
    """

    error: OSError | None = None
    reply: bytes | None = None


def _socket_problem(path: str) -> str | None:
    """Why connecting to this unix socket path cannot work, or None when it looks usable."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "socket does not exist"
    except PermissionError:
        return "permission denied: cannot reach the socket (run as root?)"
    except OSError as e:
        return f"cannot stat the socket: {e.strerror}"
    if not stat.S_ISSOCK(st.st_mode):
        return "the path exists but is not a socket"
    if not os.access(path, os.W_OK):
        return "permission denied on the socket (run as root, or as a user allowed to write to it)"
    return None


def _unix_problem(path: str) -> str | None:
    """Why a connection to this unix socket fails right now, or None when one is accepted.

    A non-blocking connect, closed at once (tens of microseconds): it never waits, so the event
    loop may call it too. A full backlog (EAGAIN) counts as accepted: something listens, and the
    call's deadline will tell whether it answers.
    """
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.setblocking(False)
            code = sock.connect_ex(path)
    except OSError as e:
        return _socket_problem(path) or _os_reason(e)
    if code in (0, errno.EAGAIN, errno.EINPROGRESS):
        return None
    return _socket_problem(path) or _os_reason(OSError(code, os.strerror(code)))


def _unreachable(endpoint: Endpoint, budget: float) -> str | None:
    """Why the endpoint takes no connection now (no socket, refused, denied), or None.

    Loopback TCP waits at most ``budget`` seconds for the connect; one that is neither accepted
    nor refused by then is None too (the call goes ahead and its deadline decides).
    """
    if endpoint.path is not None:
        return _unix_problem(endpoint.path)
    assert endpoint.address is not None
    try:
        socket.create_connection(endpoint.address, timeout=budget).close()
    except TimeoutError:
        return None
    except OSError as e:
        return _os_reason(e)
    return None


def _probe_budget(timeout: float) -> float:
    return min(_PROBE_BUDGET, timeout)


def _connect(endpoint: Endpoint, timeout: float | None) -> socket.socket:
    """A socket connected to the endpoint within ``timeout`` seconds (None: no limit), left
    with that timeout; OSError (TimeoutError too) when it takes none."""
    if endpoint.path is None:
        assert endpoint.address is not None
        return socket.create_connection(endpoint.address, timeout=timeout)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(endpoint.path)
    except BaseException:
        sock.close()
        raise
    return sock


def _probe(endpoint: Endpoint, budget: float) -> _Probe:
    """Connect, send the HTTP/2 preface, read the first frame header (blocking, <= budget)."""
    deadline = time.monotonic() + budget
    try:
        sock = _connect(endpoint, budget)
    except TimeoutError:
        return _Probe()
    except OSError as e:
        return _Probe(error=e)
    reply = b""
    with sock:
        try:
            sock.sendall(_H2_PREFACE)
            while len(reply) < _H2_FRAME_HEADER:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                chunk = sock.recv(64)
                if not chunk:
                    break
                reply += chunk
        except TimeoutError:
            return _Probe(reply=reply or None)
        except OSError:
            pass  # reset by the peer: it closed on us
    return _Probe(reply=reply)
