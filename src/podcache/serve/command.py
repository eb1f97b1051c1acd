"""The ``podcache serve`` click command: options, the token rule, wiring; no HTTP, no event loop.

It decides what may listen where (loopback or a unix socket without a token; anything else only
with ``--token-file``) and owns the simulated runtime of ``--sim``. Heavy imports (gRPC, uvloop,
httptools) wait until the command runs, so ``podcache --help`` stays fast.
"""

# ruff: noqa: PLC0415 -- imports inside the command are deliberate: start-up stays fast

from __future__ import annotations

import functools
import gc
import logging
import re
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from podcache.defaults import DEFAULT_SIM_PODS, EVENTS_MODES, LOG_LEVELS
from podcache.duration import Duration, duration_option, parse_duration
from podcache.serve.routes import routes_help
from podcache.serve.server import (
    DEFAULT_LISTEN,
    ConnectionLimits,
    ListenAddress,
    Listener,
    allowed_hosts,
    parse_listen,
)

if TYPE_CHECKING:
    from podcache.serve.auth import BearerAuth

__all__ = [
    "MAX_CRI_LISTEN",
    "SWITCH_INTERVAL",
    "Duration",
    "parse_duration",
    "parse_size",
    "serve_command",
]

SWITCH_INTERVAL = 0.001
"""Seconds a thread holding the GIL keeps it while the event loop waits for it (see _run)."""
MAX_CRI_LISTEN = 64
"""``--cri-listen`` paths at most: the C relay's listening sockets (``MAX_LISTENERS``)."""


class _Listen(click.ParamType[ListenAddress, Any]):
    name = "address"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> ListenAddress:
        if isinstance(value, ListenAddress):
            return value
        try:
            return parse_listen(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


_SIZE = re.compile(r"([0-9]+)\s*(B|KB|MB|GB|KiB|MiB|GiB|Ki|Mi|Gi)?")
_SIZE_UNITS = {
    None: 1,
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
}


def parse_size(text: str) -> int:
    """Bytes in ``1048576``, ``256MiB``, ``64Mi`` (powers of 1024) or ``100MB`` (of 1000); a
    ValueError quotes anything else."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a size: use e.g. 256MiB, 64Mi, 100MB or bytes")
    return int(match[1]) * _SIZE_UNITS[match[2]]


class _Size(click.ParamType[int, Any]):
    name = "bytes"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            size = parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if size <= 0:
            self.fail(f"{value!r}: the size must be above 0", param, ctx)
        return size


class _AppSettings(NamedTuple):
    """What ``podcache serve``'s App is made with: the cache options (seconds; refresh_ahead
    None: period / 4), the bearer auth (None: none), where ``/proc`` is, the events mode and
    the watches' bookmark interval."""

    cache_period: float
    min_refresh_interval: float
    max_stale: float
    refresh_ahead: float | None
    auth: BearerAuth | None
    proc_root: str
    events: str
    bookmark_interval: float

    def checked(self) -> _AppSettings:
        """These settings; a usage error when ``--refresh-ahead`` passes the period."""
        if self.refresh_ahead is not None and self.refresh_ahead > self.cache_period:
            raise click.BadParameter(
                f"{self.refresh_ahead:g}s is longer than --cache-period ({self.cache_period:g}s)",
                param_hint="--refresh-ahead",
            )
        return self

    def app_factory(self, getter: Any, wait: float) -> Callable[[], Any]:
        """What makes the App over ``getter`` (``wait``: seconds a request waits for pods)."""
        from podcache.serve.app import App

        return functools.partial(
            App,
            getter,
            self.cache_period,
            auth=self.auth,
            wait=wait,
            proc_root=self.proc_root,
            min_refresh_interval=self.min_refresh_interval,
            max_stale=self.max_stale,
            refresh_ahead=self.refresh_ahead,
            events=self.events != "off",
            bookmark_interval=self.bookmark_interval,
        )


def _log_to_stderr(level: str) -> str:
    """``--log-level``: log records at ``level`` and above to stderr, as
    ``podcache serve: WARNING: ...``."""
    logging.basicConfig(
        stream=sys.stderr, level=level.upper(), format="podcache serve: %(levelname)s: %(message)s"
    )
    return level


def _say(message: str) -> None:
    click.echo(f"podcache serve: {message}", err=True)


@click.command(
    "serve",
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
    help=(
        "Serve the node's pods over HTTP (JSON), read-only (GET, HEAD). Listens on loopback or "
        "a unix socket (mode 0600) unless --token-file is given. Stops cleanly on SIGTERM.\n\n"
        + routes_help()
    ),
)
@click.option(
    "-r",
    "--runtime-endpoint",
    envvar="CONTAINER_RUNTIME_ENDPOINT",
    metavar="ENDPOINT",
    help="CRI endpoint (unix:///run/containerd/containerd.sock); default as crictl finds it.",
)
@click.option("--sim", is_flag=True, help="Serve a simulated runtime started in this process.")
@click.option(
    "--sim-pods",
    type=click.IntRange(min=0),
    default=DEFAULT_SIM_PODS,
    metavar="N",
    help="Pods in the simulated runtime.",
)
@click.option(
    "--sim-churn",
    type=click.FloatRange(min=0),
    default=0.0,
    metavar="R",
    help="Pods the simulated runtime replaces per second.",
)
@click.option(
    "--listen",
    type=_Listen(),
    multiple=True,
    default=(DEFAULT_LISTEN,),
    help="HOST:PORT (an IP or localhost) or unix:PATH; repeat to listen on several (e.g. a "
    "unix socket for node agents and a TCP port for Prometheus), one server behind them all.",
)
@duration_option(
    "--cache-period",
    "2s",
    "How stale a snapshot may be (2s, 500ms, 1m, 1.5); 0 asks the runtime every time.",
)
@duration_option(
    "--min-refresh-interval",
    "100ms",
    "Least time between two refreshes forced by requests (?fresh=1, newer_than): a request "
    "arriving sooner waits for the next one (still data fetched after it arrived).",
)
@duration_option(
    "--max-stale",
    "30s",
    "While the runtime fails, serve the last good snapshot this long past its period, marked "
    "'X-Podcache-Stale: true' (/readyz answers 503 meanwhile; 0 turns it off).",
)
@duration_option(
    "--refresh-ahead",
    None,
    "Refresh this long before the snapshot expires, so readers do not wait for routine "
    "refreshes (at most the cache period).  [default: a quarter of the cache period]",
    metavar="DURATION",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Require 'Authorization: Bearer <token in FILE>' (needed to listen beyond loopback). "
    "The file is followed: a replaced file's token is accepted within 2 s, the old one no "
    "longer; an unreadable, empty or invalid file refuses every token (401) until fixed.",
)
@duration_option("--timeout", "2s", "Deadline of each runtime call.", positive=True)
@click.option(
    "--events",
    type=click.Choice(EVENTS_MODES),
    default="auto",
    help=(
        "Subscribe to the runtime's container events so changes show at once (auto: when it "
        "has them; on: require them; off: poll by the cache period only)."
    ),
)
@duration_option(
    "--idle-timeout",
    "75s",
    "Close a connection after this long without progress: no request, or an answer left unread.",
    positive=True,
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=1024,
    metavar="N",
    help="Open connections at most; one more is answered 503 and closed.",
)
@click.option(
    "--max-buffered",
    type=_Size(),
    default="256MiB",
    help="Unsent answer bytes at most, all connections together (256MiB, 64Mi, 100MB); "
    "past it the connections holding the most are dropped first.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Also serve requests whose Host header is NAME (with or without the port); "
    "repeatable. Without a token a TCP listener serves only Host values naming itself "
    "(localhost, 127.0.0.1, [::1], the listen address): others get 421, against DNS "
    "rebinding.",
)
@click.option(
    "--proc-root",
    type=click.Path(file_okay=False),
    default="/proc",
    metavar="PATH",
    help="Where /pids/{pid} reads the node's processes (the host's /proc, mounted read-only).",
)
@duration_option(
    "--bookmark-interval",
    "15s",
    "Most time between two BOOKMARK lines of a watch stream (GET /pods?watch=1).",
    positive=True,
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="warning",
    expose_value=False,
    callback=lambda ctx, param, value: _log_to_stderr(value),
    help="Least severity of the log lines written to stderr: warning says each change of the "
    "runtime's event subscription (lost, back, unsupported) with its cause, and every failure "
    "inside the server; info adds the subscription's start and close; debug every failed "
    "attempt.",
)
@click.option(
    "--cri-listen",
    "cri_listen",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="PATH",
    help="Also serve a read-only CRI socket (runtime.v1) at PATH, answered from the cache: "
    "point crictl, Falco or any CRI client at unix://PATH instead of the runtime's socket. "
    "Repeatable, at most 64 times. Writes, exec and attach are denied (PERMISSION_DENIED).",
)
@click.option(
    "--cri-socket-mode",
    default="0600",
    metavar="OCTAL",
    help="File mode of the --cri-listen sockets (0660 with --cri-socket-group opens them to a "
    "group).",
)
@click.option(
    "--cri-socket-group",
    default=None,
    metavar="GROUP",
    help="Group (name or number) of the --cri-listen sockets.",
)
@click.option(
    "--cri-event-buffer",
    default="10000,16MiB",
    metavar="EVENTS,SIZE",
    help="Events and bytes a CRI socket's GetContainerEvents subscriber may fall behind by; "
    "past either it is ended with RESOURCE_EXHAUSTED.",
)
@click.option(
    "--cri-redact-env",
    is_flag=True,
    help="In the CRI socket's verbose ContainerStatus answers (crictl inspect), replace the "
    "value of each environment variable with <redacted> (NAME=<redacted>), for agents that "
    "do not need them: without it the socket shows every container's environment.",
)
@duration_option(
    "--cri-keep-departed",
    "0",
    metavar="DURATION",
    help="For this long after the runtime deleted a container or sandbox, the CRI socket "
    "answers its ContainerStatus / PodSandboxStatus with the last status podcache knew "
    "(trailing metadata podcache-departed: the RFC 3339 time it left) instead of NotFound: "
    "for agents that ask on the DELETED event (Falco). 0: off, NotFound as the runtime says.",
)
@click.pass_context
def serve_command(
    ctx: click.Context,
    /,
    *,
    runtime_endpoint: str | None,
    sim: bool,
    sim_pods: int,
    sim_churn: float,
    listen: tuple[ListenAddress, ...],
    cache_period: float,
    min_refresh_interval: float,
    max_stale: float,
    refresh_ahead: float | None,
    token_file: str | None,
    timeout: float,
    idle_timeout: float,
    max_connections: int,
    max_buffered: int,
    allow_hosts: tuple[str, ...],
    events: str,
    proc_root: str,
    bookmark_interval: float,
    **cri: Any,
) -> None:
    """Serve the node's pods over HTTP until SIGTERM or SIGINT (``cri``: the --cri-* options)."""
    endpoint = _endpoint(ctx, runtime_endpoint, sim=sim)
    auth = _bearer(token_file)
    _check_listeners(listen, token=auth is not None)
    app = _AppSettings(
        cache_period,
        min_refresh_interval,
        max_stale,
        refresh_ahead,
        auth,
        proc_root,
        events,
        bookmark_interval,
    ).checked()
    _run(
        endpoint=endpoint,
        simulated=(sim_pods, sim_churn) if sim else None,
        app=app,
        timeout=timeout,
        limits=ConnectionLimits(idle_timeout, max_connections, max_buffered),
        listeners=[
            Listener(address, allowed_hosts(address, allow_hosts, token=auth is not None))
            for address in listen
        ],
        cri=_cri_options(**cri),
    )


def _endpoint(ctx: click.Context, runtime_endpoint: str | None, *, sim: bool) -> str | None:
    """The runtime endpoint to serve (None with ``--sim``); a usage error when both are given
    on the command line (an endpoint from the environment yields to ``--sim``)."""
    source = ctx.get_parameter_source("runtime_endpoint")
    if sim and runtime_endpoint and source is click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("give either --sim or -r/--runtime-endpoint, not both")
    return None if sim else runtime_endpoint


class _CRIOptions(NamedTuple):
    """The ``--cri-*`` options, checked."""

    paths: list[str]
    mode: int
    group: int | None
    buffer_events: int
    buffer_bytes: int
    redact_env: bool = False
    keep_departed: float = 0.0


def _cri_options(
    *,
    cri_listen: tuple[str, ...],
    cri_socket_mode: str,
    cri_socket_group: str | None,
    cri_event_buffer: str,
    cri_redact_env: bool = False,
    cri_keep_departed: float = 0.0,
) -> _CRIOptions | None:
    """The ``--cri-*`` options as ``CRISocketSetup`` takes them; usage errors name the option."""
    import os

    paths, mode, group, buffer = cri_listen, cri_socket_mode, cri_socket_group, cri_event_buffer
    if not paths:
        if cri_redact_env or cri_keep_departed:
            hint = "--cri-redact-env" if cri_redact_env else "--cri-keep-departed"
            raise click.BadParameter("it needs --cri-listen", param_hint=hint)
        return None
    absolute = [os.path.abspath(path) for path in paths]
    if len(set(absolute)) != len(absolute):
        raise click.BadParameter("a path is given twice", param_hint="--cri-listen")
    if len(absolute) > MAX_CRI_LISTEN:
        raise click.BadParameter(
            f"at most {MAX_CRI_LISTEN} paths (the CRI socket's relay takes no more)",
            param_hint="--cri-listen",
        )
    mode_bits = _cri_mode(mode)
    gid = None if group is None else _cri_group(group)
    from podcache.serve.crisock.server import mode_warning

    warning = mode_warning(mode_bits)
    if warning is not None:
        _say(f"warning: {warning}")
    events, size = _cri_buffer(buffer)
    return _CRIOptions(
        absolute, mode_bits, gid, events, size, cri_redact_env, float(cri_keep_departed)
    )


def _cri_mode(mode: str) -> int:
    """``--cri-socket-mode`` as a file mode's bits (usage errors)."""
    try:
        mode_bits = int(mode, 8)
    except ValueError:
        raise click.BadParameter(
            f"{mode!r} is not an octal mode", param_hint="--cri-socket-mode"
        ) from None
    if not 0 <= mode_bits <= 0o777:
        raise click.BadParameter(f"{mode!r} is not a file mode", param_hint="--cri-socket-mode")
    return mode_bits


def _cri_buffer(buffer: str) -> tuple[int, int]:
    """``--cri-event-buffer`` as (events, bytes), both above 0 (usage errors)."""
    events_text, _, size_text = buffer.partition(",")
    try:
        events, size = int(events_text), parse_size(size_text or "16MiB")
    except ValueError as exc:
        raise click.BadParameter(
            f"{buffer!r}: give EVENTS,SIZE (10000,16MiB): {exc}", param_hint="--cri-event-buffer"
        ) from None
    if events <= 0 or size <= 0:
        raise click.BadParameter(
            f"{buffer!r}: both must be above 0", param_hint="--cri-event-buffer"
        )
    return events, size


def _cri_group(group: str) -> int:
    """``--cri-socket-group`` as a gid this process can give its socket (usage errors)."""
    from podcache.serve.crisock.server import group_id, group_refusal

    try:
        gid = group_id(group)
    except KeyError as exc:
        raise click.BadParameter(str(exc.args[0]), param_hint="--cri-socket-group") from None
    refusal = group_refusal(gid)
    if refusal is not None:
        raise click.BadParameter(f"{group}: {refusal}", param_hint="--cri-socket-group")
    return gid


def _event_hub(runtime: Any, cri: _CRIOptions | None) -> tuple[Any, Any]:
    """The one GetContainerEvents stream every cache of serve follows, with or without
    --cri-listen (``serve.eventhub``, docs/architecture.md §7), its socket subscribers each
    within ``--cri-event-buffer``; and the caches' getter: ``runtime``, its events a follower
    of the hub's stream."""
    from podcache.serve.eventhub import EventBuffer, EventHub, HubGetter

    if cri is None:
        hub = EventHub(runtime)
    else:
        hub = EventHub(runtime, EventBuffer(cri.buffer_events, cri.buffer_bytes))
    return hub, HubGetter(runtime, hub)


def _cri_setup(runtime: Any, hub: Any, cri: _CRIOptions, timeout: float, wait: float) -> Any:
    """``CRISocketSetup`` for ``--cri-listen``, its subscribers ``hub``'s clients."""
    from podcache.serve.crisock import CRISocketSetup, SocketAccess

    return CRISocketSetup(
        runtime,
        hub,
        cri.paths,
        timeout=timeout,
        wait=wait,
        access=SocketAccess(cri.mode, cri.group),
        redact_env=cri.redact_env,
        keep_departed=cri.keep_departed,
    )


def _bearer(token_file: str | None) -> Any:
    """``--token-file`` as a ``BearerAuth`` that follows the file; None without one."""
    from podcache.serve.auth import BearerAuth, TokenFileError

    if token_file is None:
        return None
    try:
        auth, warning = BearerAuth.following(token_file)
    except TokenFileError as exc:
        raise click.BadParameter(str(exc), param_hint="--token-file") from None
    if warning:
        _say(f"warning: {warning}")
    return auth


def _check_listeners(addresses: tuple[ListenAddress, ...], *, token: bool) -> None:
    """Each address once; one reachable from other hosts only with a token (usage errors)."""
    seen: set[ListenAddress] = set()
    for address in addresses:
        if address in seen:
            raise click.BadParameter(f"{address} is given twice", param_hint="--listen")
        seen.add(address)
        if not address.loopback and not token:
            raise click.UsageError(
                f"refusing to listen on {address} without a token: it is reachable from other "
                "hosts. Pass --token-file FILE (clients then send 'Authorization: Bearer "
                "<token>'), or listen on loopback (127.0.0.1:PORT) or a unix socket "
                "(unix:/run/podcache.sock)."
            )


def _simulation(sim_pods: int, sim_churn: float) -> Any:
    """``--sim``: a simulated runtime started in this process (a ``SimRuntime``)."""
    from podcache.sim import SimRuntime

    simulation = SimRuntime(sim_pods, churn=sim_churn)
    try:
        simulation.start()
    except OSError as exc:
        raise click.ClickException(f"cannot start the simulated runtime: {exc}") from exc
    churn = f"churn {sim_churn:g}/s"
    if not sim_churn:  # a watch of the demo would show nothing at all
        churn += ": nothing changes; --sim-churn R replaces R pods a second"
    _say(
        f"serving a SIMULATED runtime ({sim_pods} pods, {churn}) at {simulation.endpoint}, "
        "not this node's"
    )
    return simulation


def _warn_if_slow_decoder() -> None:
    """Say once, at start-up, when this install reads listings without the C list reader."""
    from podcache.cri import DECODER

    if DECODER != "c":
        _say(
            "warning: the C list reader (podcache.cri._wire) is not built in this install, so "
            f"listings are read with the {DECODER} decoder, about 1.5x slower per refresh "
            "(reinstall with a C compiler and the Python headers: gcc, python3-dev)"
        )


def _runtime(endpoint: str | None, timeout: float, events: str) -> Any:
    """The ``AsyncCRIRuntime`` to serve; with ``--events on``, one that has container events."""
    from podcache.cri import AsyncCRIRuntime
    from podcache.errors import PodcacheError

    try:
        runtime = AsyncCRIRuntime(endpoint, timeout=timeout)
    except PodcacheError as exc:
        raise click.ClickException(str(exc)) from exc
    except ValueError as exc:  # a malformed endpoint: the option's, as the other commands say
        raise click.BadParameter(str(exc), param_hint="'-r' / '--runtime-endpoint'") from None
    if events == "on":
        from podcache.cri.support import events_unsupported

        unsupported = events_unsupported(runtime.endpoint, timeout)
        if unsupported is not None:
            raise click.ClickException(f"--events on: {unsupported}")
    return runtime


def _listening(
    listeners: list[Listener], endpoint: str, cache_period: float, events: str, token: bool
) -> str:
    """What is said once the server accepts connections."""
    where = ", ".join(each.address.url for each in listeners)
    required = "bearer token required" if token else "no token"
    return (
        f"listening on {where} (runtime {endpoint}, cache period {cache_period:g}s, "
        f"events {events}, {required})"
    )


def _warmed(error: BaseException | None) -> None:
    """Said once the first fill ended, when it failed (the server answers 503 meanwhile)."""
    if error is not None:
        _say(f"warning: the runtime did not answer yet ({error}); 503 until it does")


def _lifecycle(
    runtime: Any, hub: Any, cri_setup: Any, started: str
) -> tuple[Callable[[Any], None], Callable[[], Awaitable[None]]]:
    """What runs once serve listens (the CRI socket starts, then it says so) and after it
    stopped (the CRI socket, the event hub, then the runtime client)."""

    def listening(app: Any) -> None:
        # Start-up's objects (modules, classes, the in-process simulator's population) live as
        # long as the process: out of the cyclic collector's sight, a full collection walks
        # only what came later (docs/architecture.md §5, "Threads beside the loop", rule 5).
        gc.freeze()
        if cri_setup is not None:
            cri_setup.start(app)
            _say(f"CRI socket (read-only) on {', '.join(cri_setup.paths)}")
        _say(started)

    async def cleanup() -> None:
        if cri_setup is not None:
            await cri_setup.stop()
        await hub.aclose()
        await runtime.close()

    return listening, cleanup


def _run(
    *,
    endpoint: str | None,
    simulated: tuple[int, float] | None,
    app: _AppSettings,
    listeners: list[Listener],
    timeout: float,
    limits: ConnectionLimits,
    cri: _CRIOptions | None = None,
) -> None:
    """Serve until stopped: the runtime at ``endpoint``, or a simulated one of ``simulated``
    (pods, churn a second) run in this process and stopped after."""
    from podcache.serve.server import ServeError, run

    _warn_if_slow_decoder()
    # Refreshes run in worker threads that hold the GIL while they convert; the event loop
    # gets it back after at most this long (CPython's default is 5 ms per hand-over).
    sys.setswitchinterval(SWITCH_INTERVAL)
    simulation = None if simulated is None else _simulation(*simulated)
    if simulation is not None:
        endpoint = simulation.endpoint
    try:
        runtime = _runtime(endpoint, timeout, app.events)
        wait = 2 * timeout + 1.0  # a refresh in flight, then the request's own
        hub, getter = _event_hub(runtime, cri)
        cri_setup = None if cri is None else _cri_setup(runtime, hub, cri, timeout, wait)
        make_app = app.app_factory(getter, wait)
        started = _listening(
            listeners, runtime.endpoint, app.cache_period, app.events, app.auth is not None
        )
        listening, cleanup = _lifecycle(runtime, hub, cri_setup, started)
        try:
            run(make_app, listeners, limits=limits, on_listening=listening, on_warm=_warmed,
                cleanup=cleanup)  # fmt: skip
        except ServeError as exc:
            raise click.ClickException(str(exc)) from exc
        _say("stopped")
    finally:
        if simulation is not None:
            simulation.stop()
