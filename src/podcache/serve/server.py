"""Listen addresses, the listening sockets, the serving loop, signals (docs/architecture.md §5,
item 1); no HTTP, no token policy.

This module binds the sockets itself: a unix socket is created with mode 0600 (umask held
during bind, then checked), a stale one is replaced, a live one is an error; a TCP port already
in use is an error (no SO_REUSEPORT: two servers never share a port silently). On a stopping
signal, requests in progress get at most ``SHUTDOWN_GRACE`` to finish, idle connections are
closed, the sockets removed, and ``run`` returns normally. The token policy (which addresses
need one) is the command's; routing is the app's; HTTP is ``http1``'s.
"""

# ruff: noqa: PLC0415 -- uvloop and the HTTP server are imported when serving starts: the CLI stays fast

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import stat
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from podcache.errors import ServeError
from podcache.serve.app import App
from podcache.unixsocket import BoundSocket, claim_socket_path

if TYPE_CHECKING:
    from podcache.serve.http1 import HTTPServer

__all__ = [
    "DEFAULT_LISTEN",
    "SHUTDOWN_GRACE",
    "ConnectionLimits",
    "ListenAddress",
    "Listener",
    "ServeError",
    "allowed_hosts",
    "parse_listen",
    "run",
]

log = logging.getLogger("podcache.serve")

DEFAULT_LISTEN = "127.0.0.1:10260"

SHUTDOWN_GRACE = 5.0
"""Seconds requests in progress get to finish after SIGTERM before their connections are reset:
a request waits for the cache at most 5 s with the default ``--timeout`` (App's ``wait``), and
it fits in the DaemonSet's 10 s termination grace period with room to spare."""

T = TypeVar("T")

_SOCKET_MODE = 0o600
_BACKLOG = 1024


@dataclass(frozen=True)
class ListenAddress:
    """Where to listen: ``host`` and ``port``, or a unix socket ``path`` (absolute)."""

    host: str = ""
    port: int = 0
    path: str | None = None

    @property
    def loopback(self) -> bool:
        """Reachable only from this host: a unix socket or a loopback IP."""
        return self.path is not None or ipaddress.ip_address(self.host).is_loopback

    def __str__(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """``http://host:port`` (or ``unix:/path``), for messages."""
        return str(self) if self.path is not None else f"http://{self}"


@dataclass(frozen=True)
class Listener:
    """One address to listen on and the Host header values it serves (``allowed_hosts``;
    None: any)."""

    address: ListenAddress
    hosts: frozenset[str] | None = None


@dataclass(frozen=True)
class ConnectionLimits:
    """The HTTP server's bounds from the command line; None keeps ``http1``'s default."""

    idle_timeout: float | None = None
    """``--idle-timeout``: seconds a connection may go without progress."""
    max_connections: int | None = None
    """``--max-connections``: open connections at most; the next one gets a 503."""
    max_buffered: int | None = None
    """``--max-buffered``: unsent answer bytes at most, all connections together."""


_OWN_NAMES = ("localhost", "127.0.0.1", "[::1]")


def allowed_hosts(
    address: ListenAddress, names: Sequence[str], *, token: bool
) -> frozenset[str] | None:
    """The Host header values served (lower case), or None for any.

    Any Host on a unix socket (only local processes with access to the file reach it; curl
    sends ``localhost``) and with a token (the token, not the name, is the check). Otherwise,
    against DNS rebinding (a web page whose name now points at 127.0.0.1 sends that name):
    ``localhost``, ``127.0.0.1``, ``[::1]``, the listen address and each of ``names``
    (``--allow-host``), each with or without the port.
    """
    if address.path is not None or token:
        return None
    host = f"[{address.host}]" if ":" in address.host else address.host
    bare = {*_OWN_NAMES, host, *(name.strip().lower() for name in names if name.strip())}
    return frozenset({*bare, *(f"{name}:{address.port}" for name in bare)})


def parse_listen(text: str) -> ListenAddress:
    """Parse ``--listen``; a ValueError says what is wrong with ``text``."""
    if text.startswith("unix:"):
        path = text[5:]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise ValueError(f"{text!r}: the unix socket path is empty (unix:/run/podcache.sock)")
        return ListenAddress(path=os.path.abspath(path))
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r} is not HOST:PORT or unix:PATH (e.g. 127.0.0.1:10260)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{text!r}: write an IPv6 address in brackets, e.g. [::1]:10260")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(
            f"{text!r}: the host must be an IP address or localhost, not a name"
        ) from None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return ListenAddress(host=str(address), port=int(port_text))


def _bind_unix(path: str) -> tuple[socket.socket, BoundSocket]:
    """A listening unix socket at ``path``, born 0600, and the file it bound; a stale socket
    file is replaced (``unixsocket`` rule 1)."""
    try:
        claim_socket_path(path)
    except OSError as exc:
        raise ServeError(str(exc)) from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)  # the socket is born 0600: no window for other users
    try:
        sock.bind(path)
        bound = BoundSocket.record(path)
        if stat.S_IMODE(os.lstat(path).st_mode) & 0o077:
            bound.set_access(_SOCKET_MODE, None)
        return sock, bound
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {path}: {exc.strerror or exc}") from None
    finally:
        os.umask(old_umask)


def _bind_tcp(address: ListenAddress) -> socket.socket:
    """A listening TCP socket; a port in use is a ServeError (SO_REUSEADDR, not SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((address.host, address.port))
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {address}: {exc.strerror}") from None
    return sock


def _bind(address: ListenAddress) -> tuple[socket.socket, BoundSocket | None]:
    """The listening socket for ``address`` (and the socket file it bound, for a path), or a
    ServeError that says why not."""
    if address.path is not None:
        sock, bound = _bind_unix(address.path)
    else:
        sock, bound = _bind_tcp(address), None
    try:
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        if bound is not None:
            bound.remove()
        raise ServeError(f"cannot listen on {address}: {exc.strerror}") from None
    return sock, bound


async def serve(
    app: App,
    listeners: Sequence[Listener],
    *,
    limits: ConnectionLimits = ConnectionLimits(),
    on_listening: Callable[[], None] | None = None,
) -> None:
    """Serve ``app`` on every listener until SIGTERM, SIGINT or SIGHUP.

    Every socket is bound before any is served (one that cannot be is a ServeError, and the
    others are closed again); the unix sockets are removed on the way out.
    """
    from podcache.serve import http1

    http = http1.HTTPServer(
        app.respond,
        respond_now=app.respond_now,
        idle_timeout=_given(limits.idle_timeout, http1.IDLE_TIMEOUT),
        max_connections=_given(limits.max_connections, http1.MAX_CONNECTIONS),
        max_buffered=_given(limits.max_buffered, http1.MAX_BUFFERED),
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    for signum in signals:
        loop.add_signal_handler(signum, stop.set)
    bound: list[tuple[Listener, socket.socket]] = []
    files: list[BoundSocket] = []
    servers: list[asyncio.Server] = []
    try:
        for listener in listeners:
            sock, file = _bind(listener.address)
            bound.append((listener, sock))
            files.extend([file] if file is not None else [])
        http.start()
        for listener, sock in bound:
            factory = http.listener(listener.hosts)
            if listener.address.path is not None:
                servers.append(await loop.create_unix_server(factory, sock=sock))
            else:
                servers.append(await loop.create_server(factory, sock=sock))
        if on_listening is not None:
            on_listening()
        await stop.wait()
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
        await _close(http, servers, [sock for _, sock in bound[len(servers) :]])
        for file in files:
            file.remove()


async def _close(
    http: HTTPServer, servers: list[asyncio.Server], unserved: list[socket.socket]
) -> None:
    """Stop accepting, let the connections finish (``SHUTDOWN_GRACE``), close the listeners."""
    for server in servers:
        server.close()
    for sock in unserved:
        sock.close()
    await http.shutdown(SHUTDOWN_GRACE)
    for server in servers:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 1.0)


def _given(value: T | None, default: T) -> T:
    return default if value is None else value


def run(
    make_app: Callable[[], App],
    listeners: Sequence[Listener],
    *,
    limits: ConnectionLimits = ConnectionLimits(),
    on_listening: Callable[[App], None] | None = None,
    on_warm: Callable[[BaseException | None], None] | None = None,
    cleanup: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Build the app in a fresh uvloop event loop and serve it on every listener until
    SIGTERM, SIGINT or SIGHUP.

    ``on_listening`` runs once connections are accepted, ``on_warm`` when the first cache fill
    ended (with its error, if any), ``cleanup`` (awaited) after serving, e.g. to close the
    runtime client.
    """
    import uvloop

    async def main() -> None:
        app = make_app()
        warm_task: asyncio.Task[None] | None = None

        def listening() -> None:
            nonlocal warm_task
            if on_listening is not None:
                on_listening(app)
            warm_task = asyncio.get_running_loop().create_task(warm())

        async def warm() -> None:
            error = await app.warm()
            if on_warm is not None:
                on_warm(error)

        try:
            await serve(app, listeners, limits=limits, on_listening=listening)
        finally:
            if warm_task is not None:
                warm_task.cancel()
            await app.aclose()
            if cleanup is not None:
                await cleanup()

    if sys.platform == "win32":  # pragma: no cover - podcache runs on Linux nodes
        raise ServeError("podcache serve needs a POSIX system")
    uvloop.run(main())
