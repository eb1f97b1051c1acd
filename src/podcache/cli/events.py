"""``--events auto|on|off`` for the commands that keep a cache (``serve``, ``watch``).

- ``auto`` (default): subscribe to the runtime's container events when it has them; a runtime
  without them (containerd 1.6) is polled by the cache period, as with ``off``.
- ``on``: the same, but a runtime that answers GetContainerEvents with UNIMPLEMENTED at start-up
  is an error (exit status 1). A runtime that cannot be reached yet is not: the subscription
  keeps trying.
- ``off``: no subscription; the cache period alone bounds staleness.
"""

# ruff: noqa: PLC0415 -- gRPC is imported only when a check runs: start-up stays fast

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["EVENTS_MODES", "events_option", "require_events"]

EVENTS_MODES = ("auto", "on", "off")

F = TypeVar("F", bound=Callable[..., Any])


def events_option(f: F) -> F:
    """The ``--events`` option (value: one of ``EVENTS_MODES``)."""
    return click.option(
        "--events",
        "events",
        type=click.Choice(EVENTS_MODES),
        default="auto",
        show_default=True,
        help=(
            "Subscribe to the runtime's container events so changes show at once (auto: when "
            "it has them; on: require them; off: poll by the cache period only)."
        ),
    )(f)


def require_events(endpoint: str, timeout: float) -> None:
    """For ``--events on``: fail (ClickException) if the runtime has no container events."""
    from podcache.cri import CRIRuntime
    from podcache.errors import EventsUnsupportedError, PodcacheError

    try:
        with CRIRuntime(endpoint, timeout=timeout) as runtime, runtime.container_events() as s:
            s.open()
    except EventsUnsupportedError as exc:
        raise click.ClickException(f"--events on: {exc}") from exc
    except PodcacheError:
        return  # not reachable yet: the subscription keeps trying
