"""``inspect --departed``: a pod the runtime no longer lists, from a running ``podcache serve``.

A one-shot command lists the runtime once and remembers nothing; the pods that left are
remembered by a long-running cache (docs/architecture.md §3 rule 12), so the command asks the
node's ``podcache serve`` for them: ``GET /containers/{id}?departed=1`` for something that
looks like a container or sandbox ID or a prefix of one (at least 4 characters, as crictl's
12), else ``GET /pods/{uid}?departed=1``. The answer is the
pod's JSON with ``departed_at``. No I/O beyond that one HTTP exchange (at most two requests),
bounded by ``MAX_ANSWER`` bytes and by the command's ``--timeout``, which is the whole
exchange's: every connect, send and receive of both requests waits at most what is left of it
(``_DeadlineSocket``), so a server that trickles bytes cannot stretch it.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
from typing import Any
from urllib.parse import quote, urlsplit

from podcache.cli.exits import AmbiguousIDError, CLIError

__all__ = ["DEFAULT_SERVER", "MAX_ANSWER", "ask_departed"]

DEFAULT_SERVER = "http://127.0.0.1:10260"
"""Where ``podcache serve`` listens by default (its ``--listen`` default)."""
MAX_ANSWER = 16 * 1024 * 1024
"""Most bytes of one answer read (a pod's JSON is kilobytes)."""

_ID_LIKE = re.compile(r"(?:[a-z0-9]+://)?[0-9a-f]{4,}")


class _DeadlineSocket(socket.socket):
    """A socket whose every send and receive waits at most until ``deadline`` (monotonic
    seconds), however many of them an answer takes; past it, ``TimeoutError``."""

    deadline = 0.0

    def _left(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self.settimeout(left)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._left()
        return super().recv_into(buffer, nbytes, flags)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self._left()
        return super().recv(bufsize, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._left()
        super().sendall(data, flags)

    def send(self, data: Any, flags: int = 0) -> int:
        self._left()
        return super().send(data, flags)


def _deadline_socket(sock: socket.socket, deadline: float) -> _DeadlineSocket:
    """``sock`` (connected) as a ``_DeadlineSocket`` bound by ``deadline``."""
    bound = _DeadlineSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
    bound.deadline = deadline
    return bound


class _Connection(http.client.HTTPConnection):
    """HTTP over TCP or a unix socket (``--server unix:PATH``), every step of it (connect,
    send, each receive) within one ``deadline`` (monotonic seconds)."""

    def __init__(self, host: str, port: int | None, path: str | None, deadline: float) -> None:
        super().__init__(host, port, timeout=max(0.001, deadline - time.monotonic()))
        self._path = path
        self._deadline = deadline

    def connect(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        if self._path is None:
            sock = socket.create_connection((self.host, self.port), left)
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(left)
                sock.connect(self._path)
            except OSError:
                sock.close()
                raise
        self.sock = _deadline_socket(sock, self._deadline)


def _connection(server: str, deadline: float) -> http.client.HTTPConnection:
    if server.startswith("unix:"):
        return _Connection("localhost", None, server[5:], deadline)
    parts = urlsplit(server if "://" in server else f"http://{server}")
    if parts.scheme != "http" or not parts.hostname:
        raise CLIError(f"--server must be http://HOST:PORT or unix:PATH, not {server!r}")
    return _Connection(parts.hostname, parts.port or 80, None, deadline)


def _get(
    server: str, target: str, token: str | None, deadline: float, timeout: float
) -> tuple[int, Any]:
    connection = _connection(server, deadline)
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        connection.request("GET", target, headers=headers)
        response = connection.getresponse()
        body = response.read(MAX_ANSWER + 1)
    except TimeoutError:
        raise CLIError(
            f"podcache serve at {server} did not answer within {timeout:g} s (--timeout, "
            "the whole command's)"
        ) from None
    except (OSError, http.client.HTTPException) as exc:
        raise CLIError(
            f"cannot ask podcache serve at {server} about departed pods: {exc}",
            hints=[
                "--departed needs the node's podcache serve (it remembers the pods that "
                "left); give its address with --server"
            ],
        ) from None
    finally:
        connection.close()
    if len(body) > MAX_ANSWER:
        raise CLIError(f"podcache serve at {server} answered more than {MAX_ANSWER} bytes")
    try:
        return response.status, json.loads(body)
    except ValueError:
        raise CLIError(
            f"podcache serve at {server} answered {response.status} without JSON"
        ) from None


def _ambiguous(ident: str, document: Any) -> AmbiguousIDError:
    """The 409 of a prefix several listed or released IDs share, as the CLI says it (exit 2,
    the candidates listed)."""
    matches = document.get("matches") if isinstance(document, dict) else None
    candidates = [str(m) for m in matches] if isinstance(matches, list) else []
    return AmbiguousIDError(
        f"ID prefix {ident!r} is ambiguous: it matches {len(candidates) or 'several'} "
        "containers or sandboxes, listed or departed; give more characters",
        candidates,
    )


def ask_departed(
    server: str, ident: str, token: str | None, timeout: float, *, since: float | None = None
) -> dict[str, Any] | None:
    """The pod ``ident`` names that left (its JSON with ``departed_at``), asked of ``podcache
    serve`` at ``server``; None when it knows of none. AmbiguousIDError (exit 2) for a prefix
    several IDs share; CLIError (exit 1) naming the server when it cannot be asked, refuses
    (401: a token is needed), or has not answered within ``timeout`` seconds of ``since``
    (``time.monotonic()``: the command's start; default now), both requests together."""
    kinds = ("containers", "pods") if _ID_LIKE.fullmatch(ident) else ("pods", "containers")
    deadline = (time.monotonic() if since is None else since) + timeout  # both requests
    for kind in kinds:
        status, document = _get(
            server, f"/{kind}/{quote(ident, safe='')}?departed=1", token, deadline, timeout
        )
        found = _departed_answer(server, ident, kind, status, document)
        if found is not None:
            return found
    return None


def _departed_answer(
    server: str, ident: str, kind: str, status: int, document: object
) -> dict[str, Any] | None:
    """One answer of ``ask_departed``'s: the pod found, None when that kind of ID names none
    (400, 404), or the error it is (401, an ambiguous container prefix, any other status)."""
    if status == 200 and isinstance(document, dict) and isinstance(document.get("pod"), dict):
        return document
    if status == 401:
        raise CLIError(f"podcache serve at {server} wants a token (--token-file)")
    if status == 409 and kind == "containers":
        raise _ambiguous(ident, document)
    if status not in (400, 404):
        message = document.get("error") if isinstance(document, dict) else None
        raise CLIError(f"podcache serve at {server} answered {status}: {message}")
    return None
