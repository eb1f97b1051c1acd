"""``inspect --departed``: a pod the runtime no longer lists, from a running ``podcache serve``.

A one-shot command lists the runtime once and remembers nothing; the pods that left are
remembered by a long-running cache (docs/architecture.md §3 rule 12), so the command asks the
node's ``podcache serve`` for them: ``GET /containers/{id}?departed=1`` for something that
looks like a container or sandbox ID or a prefix of one (at least 4 characters, as crictl's
12), else ``GET /pods/{uid}?departed=1``. The answer is the
pod's JSON with ``departed_at``. No I/O beyond that one HTTP exchange (at most two requests),
bounded by the command's ``--timeout`` and ``MAX_ANSWER`` bytes.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
from typing import Any
from urllib.parse import quote, urlsplit

from podcache.cli.exits import AmbiguousIDError, CLIError

__all__ = ["DEFAULT_SERVER", "MAX_ANSWER", "ask_departed"]

DEFAULT_SERVER = "http://127.0.0.1:10260"
"""Where ``podcache serve`` listens by default (its ``--listen`` default)."""
MAX_ANSWER = 16 * 1024 * 1024
"""Most bytes of one answer read (a pod's JSON is kilobytes)."""

_ID_LIKE = re.compile(r"(?:[a-z0-9]+://)?[0-9a-f]{4,}")


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix socket (``--server unix:PATH``)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def _connection(server: str, timeout: float) -> http.client.HTTPConnection:
    if server.startswith("unix:"):
        return _UnixConnection(server[5:], timeout)
    parts = urlsplit(server if "://" in server else f"http://{server}")
    if parts.scheme != "http" or not parts.hostname:
        raise CLIError(f"--server must be http://HOST:PORT or unix:PATH, not {server!r}")
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)


def _get(server: str, target: str, token: str | None, timeout: float) -> tuple[int, Any]:
    connection = _connection(server, timeout)
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        connection.request("GET", target, headers=headers)
        response = connection.getresponse()
        body = response.read(MAX_ANSWER + 1)
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
    server: str, ident: str, token: str | None, timeout: float
) -> dict[str, Any] | None:
    """The pod ``ident`` names that left (its JSON with ``departed_at``), asked of ``podcache
    serve`` at ``server``; None when it knows of none. AmbiguousIDError (exit 2) for a prefix
    several IDs share; CLIError (exit 1) naming the server when it cannot be asked, or refuses
    (401: a token is needed)."""
    kinds = ("containers", "pods") if _ID_LIKE.fullmatch(ident) else ("pods", "containers")
    for kind in kinds:
        status, document = _get(
            server, f"/{kind}/{quote(ident, safe='')}?departed=1", token, timeout
        )
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
