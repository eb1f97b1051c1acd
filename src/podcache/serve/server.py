"""Listen addresses, granian in this process's event loop, SIGTERM; no routing, no token policy.

``--listen`` is ``HOST:PORT`` (an IP literal or ``localhost``; ``[::1]:PORT`` for IPv6) or
``unix:PATH``. The HTTP server is granian (Rust, RSGI interface) embedded in this process's
uvloop event loop, so the cache, the app and the server share one loop and one process; it
listens on TCP and on unix sockets alike. A unix socket is created with mode 0600 (umask held
during bind, then checked), a stale one is replaced, a live one is an error. SIGTERM and
SIGINT stop accepting, finish, remove the socket and return normally. The token policy
(which addresses need one) is the command's; routing is the app's.
"""

# ruff: noqa: PLC0415 -- granian and uvloop are imported when serving starts: the CLI stays fast

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from podcache.serve.app import App

__all__ = ["DEFAULT_LISTEN", "ListenAddress", "ServeError", "parse_listen", "run"]

log = logging.getLogger("podcache.serve")

DEFAULT_LISTEN = "127.0.0.1:10260"

_SOCKET_MODE = 0o600
_BACKLOG = 1024
_MAX_BUFFER = 64 * 1024  # granian's own cap on a request head; ours (query.py) is lower


class ServeError(Exception):
    """The server cannot start (address in use, bad socket path...); the message says why."""


@dataclass(frozen=True)
class ListenAddress:
    """Where to listen: ``host`` and ``port``, or a unix socket ``path`` (absolute)."""

    host: str = ""
    port: int = 0
    path: str | None = None

    @property
    def unix(self) -> bool:
        """A unix socket."""
        return self.path is not None

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


def _socket_in_use(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return False
        return True


def _prepare(address: ListenAddress) -> None:
    """Fail early and clearly when the address cannot be ours; replace a stale socket."""
    if address.path is not None:
        path = address.path
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            raise ServeError(f"cannot listen on {path}: directory {directory} does not exist")
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise ServeError(f"cannot listen on {path}: a file that is not a socket is there")
        if _socket_in_use(path):
            raise ServeError(f"cannot listen on {path}: another server is listening there")
        os.unlink(path)  # stale: left by a process that died
        return
    # granian binds with SO_REUSEPORT, which would silently share the port with another
    # server doing the same: bind once without it to find out whether the port is free.
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address.host, address.port))
        except OSError as exc:
            raise ServeError(f"cannot listen on {address}: {exc.strerror}") from None


def _granian_logging() -> dict[str, object]:
    return {
        "handlers": {
            "console": {
                "formatter": "generic",
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
            },
            "access": {
                "formatter": "access",
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
            },
        },
        "formatters": {
            "generic": {"()": "logging.Formatter", "fmt": "podcache serve: granian: %(message)s"},
            "access": {"()": "logging.Formatter", "fmt": "%(message)s"},
        },
    }


async def serve(
    app: App,
    address: ListenAddress,
    *,
    on_listening: Callable[[], None] | None = None,
) -> None:
    """Serve ``app`` on ``address`` until SIGTERM or SIGINT.

    The unix socket, if any, is removed on the way out. Raises ServeError when the server
    cannot start.
    """
    from granian.constants import HTTPModes, Interfaces, TaskImpl
    from granian.http import HTTP1Settings
    from granian.log import LogLevels
    from granian.server.embed import Server

    _prepare(address)
    server = Server(
        app,
        address=address.host or "127.0.0.1",
        port=address.port or 0,
        uds=Path(address.path) if address.path is not None else None,
        interface=Interfaces.RSGI,
        # granian's Rust task wrapper: measured /pods 0.85x nginx against 0.67x with asyncio
        # tasks, /containers/{id} 0.74x against 0.70x (bench_serve.py --quick, same run).
        task_impl=TaskImpl.rust,
        http=HTTPModes.http1,
        websockets=False,
        backlog=_BACKLOG,
        http1_settings=HTTP1Settings(header_read_timeout=10_000, max_buffer_size=_MAX_BUFFER),
        log_level=LogLevels.error,
        log_dictconfig=_granian_logging(),
    )
    server.uds_permissions = _SOCKET_MODE
    bound = asyncio.Event()
    old_umask: int | None = None

    def on_startup() -> None:
        # Called by granian right after it bound the socket, before it accepts.
        nonlocal old_umask
        if old_umask is not None:
            os.umask(old_umask)
            old_umask = None
        bound.set()

    server.on_startup(on_startup)
    stopping = False

    def on_signal() -> None:
        nonlocal stopping
        stopping = True
        server.stop()  # type: ignore[no-untyped-call]

    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    for signum in signals:
        loop.add_signal_handler(signum, on_signal)
    if address.path is not None:
        old_umask = os.umask(0o177)  # the socket is born 0600: no window for other users
    task = loop.create_task(server.serve(), name="podcache-serve")
    try:
        waiter = loop.create_task(bound.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not bound.is_set():
            await _startup_failed(task, address)
        if address.path is not None:
            _check_socket(address.path)
        await _until_accepting(address, task, lambda: stopping)
        if on_listening is not None and not stopping:
            on_listening()
        await task
    finally:
        if old_umask is not None:
            os.umask(old_umask)
        for signum in signals:
            loop.remove_signal_handler(signum)
        if not task.done():
            server.stop()  # type: ignore[no-untyped-call]
            with contextlib.suppress(Exception):
                await task
        if bound.is_set() and address.path is not None:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.lstat(address.path).st_mode):
                    os.unlink(address.path)


async def _startup_failed(task: asyncio.Task[None], address: ListenAddress) -> None:
    try:
        await task
    except Exception as exc:  # granian reports bind failures as RuntimeError
        reason = str(exc).split("\n", 1)[0]
        raise ServeError(f"cannot listen on {address}: {reason}") from None
    raise ServeError(f"the server on {address} stopped before it listened")


def _check_socket(path: str) -> None:
    mode = os.lstat(path).st_mode
    if stat.S_IMODE(mode) & 0o077:
        os.chmod(path, _SOCKET_MODE)


async def _until_accepting(
    address: ListenAddress, task: asyncio.Task[None], stopping: Callable[[], bool]
) -> None:
    """Return once a connection to ``address`` succeeds (granian's worker starts a moment
    after it binds), or once a signal asked the server to stop."""
    for _ in range(200):
        if stopping():
            return
        if task.done():
            await _startup_failed(task, address)
        try:
            if address.path is not None:
                _, writer = await asyncio.open_unix_connection(address.path)
            else:
                _, writer = await asyncio.open_connection(address.host, address.port)
        except OSError:
            await asyncio.sleep(0.01)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return
    raise ServeError(f"the server did not accept connections on {address} within 2 s")


def run(
    make_app: Callable[[], App],
    address: ListenAddress,
    *,
    on_listening: Callable[[App], None] | None = None,
    on_warm: Callable[[BaseException | None], None] | None = None,
    cleanup: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Build the app in a fresh uvloop event loop and serve it until SIGTERM/SIGINT.

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
            await serve(app, address, on_listening=listening)
        finally:
            if warm_task is not None:
                warm_task.cancel()
            await app.aclose()
            if cleanup is not None:
                await cleanup()

    if sys.platform == "win32":  # pragma: no cover - podcache runs on Linux nodes
        raise ServeError("podcache serve needs a POSIX system")
    # Not uvloop.run / asyncio.Runner: their close() lists every task of the loop, and
    # granian's Rust tasks (task_impl=rust) sit in asyncio's task registry without being
    # asyncio futures, so that listing raises. main() cancels and awaits what it started.
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main())
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
