"""A one-shot read begun before click is imported (docs/architecture.md §6 rule 1).

``podcache which IP...`` spends most of its time in two waits: importing click and the
commands, and the runtime answering a PodSandboxStatus per pod. ``begin(argv)`` (the console
script's ``main()``, first) makes them overlap: when ``argv`` is in the narrow form below, it
makes the ``OneShotRuntime`` the command will make and begins its read
(``OneShotRuntime.begin``: the listing sent, statuses asked ahead), then click is imported and
parses ``argv`` as ever. ``claim(...)`` (``source.open_source``) hands that runtime over only
when the command asks for one made with exactly the same arguments; otherwise it is closed and
the command reads as if nothing had begun. So what a command does and prints never depends on
this module: only when its calls are sent.

Rules:

- **The form read here** (anything else begins nothing): ``which``, then one or more
  arguments that are IP addresses (``ipaddr.normalise_ip`` takes them and they are not all
  digits, which would be PIDs), and at most one ``-r ENDPOINT`` / ``--runtime-endpoint
  ENDPOINT`` / ``--runtime-endpoint=ENDPOINT``, in any order. No other option, no ``--``.
  A hypothesis test holds this reading to click's for every argument list it accepts.
- **Claimed once, by equal arguments**: endpoint as given (None: resolved as crictl does, the
  same environment), config path, ``ips`` and ``find_ips``; the timeout, known only once the
  crictl config is read, is then set (``retime``).
- **Never an error**: a form not recognised, an endpoint that does not resolve, a runtime that
  refuses: nothing begun, and the command meets (and reports) the same cause itself.

Deliberately not here: ``pods``, ``ps`` and ``inspect``. Without IPs, their listing already
goes out before the model is imported, and its answer comes before that import ends.
"""

# ruff: noqa: PLC0415 -- the one-shot runtime is imported only when a read begins

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from podcache.cri.oneshot import OneShotRuntime

__all__ = ["PID_MAX", "EarlyRead", "begin", "claim", "read_form", "which_argument"]

PID_MAX = 4_194_304  # podcache.procs.PID_MAX, repeated so that start-up imports nothing more
_ENDPOINT_FLAGS = ("-r", "--runtime-endpoint")
_INITIAL_TIMEOUT = 2.0
"""Seconds per call until ``claim`` sets the command's own (``options.DEFAULT_TIMEOUT``'s
value; a test holds them equal)."""


class EarlyRead(NamedTuple):
    """What ``which`` will ask the runtime for, read from its arguments."""

    endpoint: str | None
    find_ips: frozenset[str]


_begun: OneShotRuntime | None = None  # the process's one begun read, until claimed


def read_form(argv: Sequence[str]) -> EarlyRead | None:
    """The read ``argv`` will make, when it is in the form of the module rules; else None."""
    if not argv or argv[0] != "which":
        return None
    endpoints, ips = _which_arguments(argv[1:])
    endpoint = _one_endpoint(endpoints)
    if endpoint is None or not ips:
        return None
    return EarlyRead(endpoint or None, frozenset(ips))


def _which_arguments(arguments: Sequence[str]) -> tuple[list[str | None], list[str] | None]:
    """``which``'s arguments as the endpoints given (None: a flag without its value) and the
    IPs asked (None when any other argument is a PID, an option, or anything but an IP)."""
    endpoints: list[str | None] = []
    ips: list[str] = []
    every_ip = True
    rest = list(arguments)
    while rest:
        token = rest.pop(0)
        if token in _ENDPOINT_FLAGS:
            endpoints.append(rest.pop(0) if rest else None)
        elif token.startswith("--runtime-endpoint="):
            endpoints.append(token.partition("=")[2])
        elif (ip := None if token.startswith("-") else _ip(token)) is not None:
            ips.append(ip)
        else:
            every_ip = False
    return endpoints, ips if every_ip else None


def _one_endpoint(endpoints: list[str | None]) -> str | None:
    """The endpoint given ("" for none); None when a flag lacks its value (or has an option
    for one) or several are given."""
    given = [e for e in endpoints if e and not e.startswith("-")]
    if len(given) != len(endpoints) or len(given) > 1:
        return None
    return given[0] if given else ""


def which_argument(text: str) -> int | str | None:
    """A ``which`` argument, as its click type (``which._PIDOrIP``) reads it: a PID (ASCII
    digits, 1 to ``PID_MAX``), an IP address in ``ipaddr.normalise_ip``'s canonical text, or
    None for anything else. ``text`` is stripped first."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        return int(text) if 1 <= int(text) <= PID_MAX else None
    from podcache.ipaddr import normalise_ip

    try:
        return normalise_ip(text)
    except ValueError:
        return None


def _ip(token: str) -> str | None:
    """The canonical text of an IP argument; None for a PID or anything else."""
    value = which_argument(token)
    return value if isinstance(value, str) else None


def begin(argv: Sequence[str]) -> None:
    """Begin the read ``argv``'s command will make, if it is in the form (module rules).
    Never raises."""
    global _begun  # the process's one begun read
    try:
        form = read_form(argv)
        if form is None:
            return
        from podcache.cri.oneshot import OneShotRuntime

        runtime = OneShotRuntime(form.endpoint, timeout=_INITIAL_TIMEOUT, find_ips=form.find_ips)
    except Exception:  # not resolved, not readable: the command meets the cause itself
        return
    if runtime.begin():
        _begun = runtime


def claim(
    endpoint: str | None,
    *,
    timeout: float,
    config_path: str | None,
    ips: bool,
    find_ips: frozenset[str] | None,
) -> OneShotRuntime | None:
    """The begun read, if it was made with these arguments (its timeout then set to
    ``timeout``); else None, and a begun read is closed. At most once per process."""
    global _begun  # the process's one begun read
    runtime, _begun = _begun, None
    if runtime is None:
        return None
    if (endpoint, config_path, ips, find_ips) != runtime.arguments:
        runtime.close()
        return None
    runtime.retime(timeout)
    return runtime
