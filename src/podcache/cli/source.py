"""Where ``podcache`` reads pods from: the runtime at the crictl-resolved endpoint, or the
built-in SimRuntime (``--sim``, ``--sim-fallback``); it opens and closes them and turns their
setup errors into CLI errors. It renders nothing and never filters pods.

The commands that read once (``pods``, ``ps``, ``inspect``, ``which``, ``version``) get a
``cri.oneshot.OneShotRuntime`` (``one_shot=True``): no grpcio, protobuf or asyncio is imported
unless the runtime fails. The ones that follow it (``watch``, ``events``, ``pods -w``) get a
``CRIRuntime`` (events, reconnects). The simulated runtime (a gRPC server) is imported only
when it is used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import TYPE_CHECKING, NamedTuple, Protocol

import click

from podcache.cli.early import claim
from podcache.cli.exits import CLIError
from podcache.cli.options import DEFAULT_SIM_PODS, DEFAULT_TIMEOUT, SIM_SEED, RuntimeSettings
from podcache.cli.startup import resume_collection
from podcache.cri.endpoint import CONFIG_ENV, DEFAULT_CONFIG_PATH, load_crictl_config
from podcache.errors import EndpointNotFoundError

if TYPE_CHECKING:
    from podcache.cri.values import RuntimeVersion
    from podcache.model import PodList

__all__ = ["Source", "open_source"]

_ENDPOINT_HINT = "'-r' / '--runtime-endpoint'"
_CONFIG_HINT = "'-c' / '--config'"


class Runtime(Protocol):
    """What commands call on a source's runtime (``CRIRuntime`` and ``OneShotRuntime`` have
    it; ``follow`` needs the former's ``container_events`` too)."""

    @property
    def endpoint(self) -> str: ...
    @property
    def timeout(self) -> float: ...
    def get_pods(self, all: bool = False) -> PodList: ...
    def version(self) -> RuntimeVersion: ...
    def close(self) -> None: ...


class Source(NamedTuple):
    """An open runtime: ``runtime`` to call, ``endpoint`` to name it, ``simulated`` if built in.
    A NamedTuple: importing msgspec here would put it before a one-shot read's first send
    (docs/architecture.md §6 rule 1)."""

    runtime: Runtime
    endpoint: str
    simulated: bool


def _runtime(
    endpoint: str | None,
    timeout: float,
    config_path: str | None,
    one_shot: bool,
    ips: bool | frozenset[str],
) -> Runtime:
    """A ``OneShotRuntime`` (``one_shot``; ``ips``: ask for pod IPs, or only until these are
    found) or a ``CRIRuntime``."""
    if one_shot:
        from podcache.cri.oneshot import OneShotRuntime  # noqa: PLC0415 -- when it runs

        asks_ips, find_ips = ips is not False, ips if isinstance(ips, frozenset) else None
        begun = claim(
            endpoint, timeout=timeout, config_path=config_path, ips=asks_ips, find_ips=find_ips
        )
        if begun is not None:  # the same runtime, its read begun at start-up (``early``)
            return begun
        return OneShotRuntime(
            endpoint, timeout=timeout, config_path=config_path, ips=asks_ips, find_ips=find_ips
        )
    from podcache.cri.client import CRIRuntime  # noqa: PLC0415 -- imports grpcio: when it runs

    return CRIRuntime(endpoint, timeout=timeout, config_path=config_path)


def _config_timeout(settings: RuntimeSettings) -> float | None:
    """The crictl config file's timeout, if the file exists and sets one.

    An explicit ``--config`` that does not exist is a usage error; one named by
    CRI_CONFIG_FILE, or the default, is skipped when missing (as crictl does).
    """
    path = settings.config or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH
    try:
        config = load_crictl_config(path)
    except FileNotFoundError:
        if settings.config:
            raise click.BadParameter(f"{path}: no such file", param_hint=_CONFIG_HINT) from None
        return None
    except IsADirectoryError:
        raise CLIError(f"crictl config {path}: is a directory") from None
    except PermissionError:
        raise CLIError(f"crictl config {path}: permission denied") from None
    except ValueError as e:
        raise CLIError(str(e)) from None
    if config.timeout == 0:  # crictl's "no timeout given"
        return None
    return config.timeout


def _start_sim(pods: int, churn: float | None, stack: ExitStack, why: str = "") -> str:
    """Start the simulated runtime and say so on stderr; ``churn``: None for a command that
    reads once (its line names no rate), else pods replaced a second (said, as serve says it:
    a command that follows a node where nothing changes would show nothing more)."""
    from podcache.sim import SimRuntime  # noqa: PLC0415 (a gRPC server: imported only when used)

    sim = SimRuntime(pods, seed=SIM_SEED, churn=churn or 0.0)
    try:
        sim.start()
    except OSError as e:
        raise CLIError(f"cannot start the simulated runtime: {e}") from None
    stack.callback(sim.stop, 0.0)
    details = f"{pods} pods, seed {SIM_SEED}"
    if churn is not None:
        details += f", churn {churn:g}/s"
    idle = ": nothing changes; --sim-churn R replaces R pods a second" if churn == 0 else ""
    click.echo(
        f"podcache: {why}using the built-in simulated runtime ({details}) at {sim.endpoint}{idle}",
        err=True,
    )
    return sim.endpoint


def _runtime_or_fallback(
    settings: RuntimeSettings,
    endpoint: str | None,
    runtime_at: Callable[..., Runtime],
    start_fallback: Callable[[], str],
) -> tuple[Runtime, bool]:
    """The runtime at ``endpoint`` (the simulated one with ``--sim``), made by
    ``runtime_at(endpoint, config_path=...)``, and whether it is simulated. None found: with
    ``--sim-fallback``, the simulated runtime ``start_fallback`` starts (its endpoint), else
    the error naming the places tried; a bad endpoint or config is a usage error naming it."""
    try:
        return runtime_at(endpoint, config_path=settings.config), settings.sim
    except EndpointNotFoundError as e:
        if not settings.sim_fallback:
            raise CLIError(
                str(e),
                hints=["pass --sim to read pods from the built-in simulated runtime"],
            ) from None
        return runtime_at(start_fallback(), config_path=None), True
    except FileNotFoundError as e:  # an explicit --config that vanished since we read it
        raise click.BadParameter(f"{e.filename}: no such file", param_hint=_CONFIG_HINT) from None
    except ValueError as e:
        if settings.endpoint is not None and not settings.sim:
            raise click.BadParameter(str(e), param_hint=_ENDPOINT_HINT) from None
        raise CLIError(str(e)) from None


@contextmanager
def open_source(
    settings: RuntimeSettings,
    *,
    sim_churn: float | None = None,
    one_shot: bool = False,
    ips: bool | frozenset[str] = True,
) -> Iterator[Source]:
    """Open the runtime the settings name; closes it (and stops a simulated one) on exit.

    A simulated runtime replaces ``sim_churn`` pods a second: a command that follows the
    runtime passes its ``--sim-churn`` (0 by default); None, a command that reads once (a
    listing is reproducible; the notice names no rate). ``one_shot``: for a command that reads
    once (module docstring);
    ``ips=False`` for one that shows no pod IPs (its pods' ``ips`` are then empty); a set of
    canonical IPs for one that only looks those up (``OneShotRuntime``'s ``find_ips``).

    Order: ``--sim``; else the endpoint resolved as crictl does (``-r``,
    CONTAINER_RUNTIME_ENDPOINT, the config file, the default sockets); else, with
    ``--sim-fallback``, the simulated runtime; else an error naming the places tried.
    """
    if not one_shot:
        resume_collection()  # a command that follows the runtime keeps running (cli.startup)
    if settings.sim and settings.endpoint is not None:
        raise click.UsageError("--sim and -r/--runtime-endpoint are mutually exclusive")
    config_timeout = _config_timeout(settings)
    timeout = settings.timeout or config_timeout or DEFAULT_TIMEOUT
    pods = DEFAULT_SIM_PODS if settings.sim_pods is None else settings.sim_pods
    with ExitStack() as stack:
        endpoint = _start_sim(pods, sim_churn, stack) if settings.sim else settings.endpoint
        runtime, simulated = _runtime_or_fallback(
            settings,
            endpoint,
            partial(_runtime, timeout=timeout, one_shot=one_shot, ips=ips),
            lambda: _start_sim(
                pods, sim_churn, stack, "no container runtime configured or found; "
            ),
        )
        stack.callback(runtime.close)
        yield Source(runtime, runtime.endpoint, simulated)
