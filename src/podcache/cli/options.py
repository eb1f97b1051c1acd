"""Options shared by ``podcache`` commands: runtime selection (crictl's -r/-c/--timeout, --sim),
filters and output flags, and durations ("2s", "500ms", "2"); it parses and merges option values
and never connects to anything (``source`` does).

Runtime options are accepted both before the command, as crictl takes them
(``podcache -r unix:///run/containerd/containerd.sock pods``), and after it
(``podcache pods -r ...``); a value given after the command wins. Environment variables and the
crictl config file are read later, by ``source``, so their errors name where the value came
from.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import click

from podcache.defaults import DEFAULT_SIM_PODS, EVENTS_MODES
from podcache.duration import Duration, duration_option, parse_duration

__all__ = [
    "DEFAULT_SIM_PODS",
    "DEFAULT_TIMEOUT",
    "DURATION",
    "OUTPUT_FORMATS",
    "SIM_SEED",
    "Duration",
    "OutputOptions",
    "PodFilter",
    "RuntimeSettings",
    "all_option",
    "duration_option",
    "events_option",
    "filter_options",
    "output_options",
    "parse_duration",
    "runtime_options",
    "sim_churn_option",
]

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_TIMEOUT = 2.0
"""Seconds per runtime call when neither --timeout nor the crictl config sets one (crictl's)."""
SIM_SEED = 0
"""The simulated runtime's seed: fixed, so IDs, names and images are the same on every run."""
OUTPUT_FORMATS = ("table", "wide", "json", "yaml")

DURATION = Duration(positive=True)


# -- runtime selection --------------------------------------------------------------------------


class RuntimeSettings(NamedTuple):
    """Where to read pods from, as given on the command line (None: not given there)."""

    endpoint: str | None = None
    config: str | None = None
    timeout: float | None = None
    sim: bool = False
    sim_fallback: bool = False
    sim_pods: int | None = None

    def merged(self, later: RuntimeSettings) -> RuntimeSettings:
        """These settings overridden by ``later`` wherever ``later`` gives a value (a flag
        given is True)."""
        pairs = zip(self, later, strict=True)
        return RuntimeSettings._make(
            mine if theirs is None or theirs is False else theirs for mine, theirs in pairs
        )


_RUNTIME_PARAMS = ("runtime_endpoint", "config", "timeout", "sim", "sim_fallback", "sim_pods")

_RUNTIME_OPTIONS = (
    click.option(
        "-r",
        "--runtime-endpoint",
        metavar="ENDPOINT",
        help=(
            "CRI endpoint: unix:///path, an absolute socket path, or loopback tcp://HOST:PORT "
            "[default: $CONTAINER_RUNTIME_ENDPOINT, else runtime-endpoint in the config file, "
            "else the first existing of crictl's default sockets]."
        ),
    ),
    click.option(
        "-c",
        "--config",
        metavar="PATH",
        help=(
            "crictl config file (keys runtime-endpoint, timeout) "
            "[default: $CRI_CONFIG_FILE, else /etc/crictl.yaml]."
        ),
    ),
    click.option(
        "--timeout",
        type=DURATION,
        help=(
            "Deadline of each runtime call: 2s, 500ms, or seconds [default: the config's, else 2s]."
        ),
    ),
    click.option(
        "--sim",
        is_flag=True,
        default=None,
        help="Read pods from a built-in simulated runtime started in this process.",
    ),
    click.option(
        "--sim-fallback",
        is_flag=True,
        default=None,
        help=(
            "Use the real runtime if one is configured or found, else the built-in simulated "
            "one (said on stderr). A configured runtime that fails is still an error."
        ),
    ),
    click.option(
        "--sim-pods",
        type=click.IntRange(min=0),
        metavar="N",
        help=f"Pods in the simulated runtime [default: {DEFAULT_SIM_PODS}].",
    ),
)


def _settings(values: dict[str, Any]) -> RuntimeSettings:
    return RuntimeSettings(
        endpoint=values["runtime_endpoint"],
        config=values["config"],
        timeout=values["timeout"],
        sim=bool(values["sim"]),
        sim_fallback=bool(values["sim_fallback"]),
        sim_pods=values["sim_pods"],
    )


def runtime_options(f: F) -> F:
    """Add the runtime options to a command; it receives them as ``runtime=``, merged over
    the ones given before the command (``group_runtime_options``)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = _settings({name: kwargs.pop(name) for name in _RUNTIME_PARAMS})
        ctx = click.get_current_context()
        before = ctx.find_object(RuntimeSettings) or RuntimeSettings()
        return f(*args, runtime=before.merged(given), **kwargs)

    return _decorated(f, wrapper, _RUNTIME_OPTIONS)


def group_runtime_options(f: F) -> F:
    """Add the runtime options to the group: they are stored in ``ctx.obj`` for its commands."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        click.get_current_context().obj = _settings({n: kwargs.pop(n) for n in _RUNTIME_PARAMS})
        return f(*args, **kwargs)

    return _decorated(f, wrapper, _RUNTIME_OPTIONS)


def _decorated(f: F, wrapper: Callable[..., Any], options: Sequence[Callable[[Any], Any]]) -> F:
    """``wrapper``, which calls ``f``, in ``f``'s name with ``options`` added (``--help`` lists
    them in this order)."""
    decorated: Any = functools.wraps(f)(wrapper)
    for option in reversed(options):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


# -- filters ------------------------------------------------------------------------------------


class PodFilter(NamedTuple):
    """Which pods to show: namespace exact, name a regular expression searched in the name, and
    every label given (``key=value``: equal; ``key``: present)."""

    namespace: str | None = None
    name: re.Pattern[str] | None = None
    labels: tuple[tuple[str, str | None], ...] = ()


def _parse_regex(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        return re.compile(value)
    except re.error as e:
        raise click.BadParameter(f"{value!r} is not a regular expression: {e}") from None


def _parse_labels(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Any:
    labels: list[tuple[str, str | None]] = []
    for value in values:
        key, sep, wanted = value.partition("=")
        if not key.strip():
            raise click.BadParameter(f"{value!r}: expected KEY=VALUE or KEY (the key is empty)")
        labels.append((key, wanted if sep else None))
    return tuple(labels)


def filter_options(*, name_help: str) -> Callable[[F], F]:
    """Add ``-n/--namespace``, ``--name`` and ``-l/--label``; the command receives ``where=``."""

    def decorate(f: F) -> F:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            where = PodFilter(kwargs.pop("namespace"), kwargs.pop("name"), kwargs.pop("labels"))
            return f(*args, where=where, **kwargs)

        return _decorated(
            f,
            wrapper,
            (
                click.option(
                    "-n",
                    "--namespace",
                    metavar="NAMESPACE",
                    help="Only pods in this namespace (exact match, as kubectl -n).",
                ),
                click.option("--name", metavar="REGEX", callback=_parse_regex, help=name_help),
                click.option(
                    "-l",
                    "--label",
                    "labels",
                    metavar="KEY=VALUE",
                    multiple=True,
                    callback=_parse_labels,
                    help="Only pods with this label (KEY=VALUE, or KEY to require the key); "
                    "repeatable, all must match.",
                ),
            ),
        )

    return decorate


# -- output -------------------------------------------------------------------------------------


class OutputOptions(NamedTuple):
    """How to print: ``format`` one of OUTPUT_FORMATS; ``quiet``: IDs only; ``no_trunc``."""

    format: str = "table"
    quiet: bool = False
    no_trunc: bool = False


def output_options(
    *, quiet: bool = True, formats: tuple[str, ...] = OUTPUT_FORMATS
) -> Callable[[F], F]:
    """Add ``-o/--output``, ``--no-trunc`` and (unless ``quiet=False``) ``-q/--quiet``;
    the command receives ``out=``. ``-q`` with an explicit ``-o`` is a usage error."""

    def decorate(f: F) -> F:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            fmt = kwargs.pop("output")
            is_quiet = bool(kwargs.pop("quiet", False))
            if is_quiet and fmt is not None:
                raise click.UsageError("-q/--quiet prints IDs only; it cannot be combined with -o")
            out = OutputOptions(fmt or formats[0], is_quiet, kwargs.pop("no_trunc"))
            return f(*args, out=out, **kwargs)

        options = [
            click.option(
                "-o",
                "--output",
                type=click.Choice(formats, case_sensitive=False),
                help=f"Output format [default: {formats[0]}].",
            ),
            click.option(
                "--no-trunc",
                is_flag=True,
                help="Show full IDs (tables cut container and sandbox IDs to 13 characters).",
            ),
        ]
        if quiet:
            options.append(
                click.option(
                    "-q", "--quiet", is_flag=True, help="Print only full IDs, one per line."
                )
            )
        return _decorated(f, wrapper, options)

    return decorate


def all_option(help: str) -> Callable[[F], F]:
    """Add ``-a/--all`` (a flag, ``help`` saying what it adds); the command receives ``all_=``."""
    return click.option("-a", "--all", "all_", is_flag=True, help=help)


def events_option(f: F) -> F:
    """Add ``--events auto|on|off`` (default auto); the command receives ``events=``."""
    option = click.option(
        "--events",
        type=click.Choice(EVENTS_MODES),
        default="auto",
        show_default=True,
        help=(
            "Subscribe to the runtime's container events so changes show at once (auto: when "
            "it has them; on: require them; off: poll by the period only)."
        ),
    )
    return option(f)


def sim_churn_option(f: F) -> F:
    """Add ``--sim-churn RATE`` (default 0, as ``serve --sim``: the simulated node changes only
    when asked) for the commands that follow a live runtime; the command receives
    ``sim_churn=``."""
    option = click.option(
        "--sim-churn",
        type=click.FloatRange(min=0),
        default=0.0,
        show_default=True,
        metavar="RATE",
        help="With --sim: pods the simulated runtime replaces per second (none by default: "
        "nothing changes).",
    )
    return option(f)
