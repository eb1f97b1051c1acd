"""Defaults that more than one command states, so they are stated once.

Shared by the ``podcache`` commands and ``podcache serve`` (which must not import the CLI); it
imports nothing, so reading it costs no start-up time. Values only; the options live with their
commands.
"""

from __future__ import annotations

__all__ = ["DEFAULT_SIM_PODS", "EVENTS_MODES", "LOG_LEVELS"]

DEFAULT_SIM_PODS = 12
"""Pods in the built-in simulated runtime of ``--sim`` / ``--sim-fallback``, for every command
that starts one (``podcache pods``, ``ps``, ``inspect``, ``watch``, ``serve``): a table that fits
a terminal. ``podcache sim --pods`` (a standalone simulator for load) has its own default."""

EVENTS_MODES = ("auto", "on", "off")
"""``--events`` of ``serve`` and ``watch`` (default ``auto``): auto subscribes to the runtime's
container events when it has them and polls by the cache period when it has not; on does the
same, but a runtime without them at start-up is an error; off polls by the period only."""

LOG_LEVELS = ("debug", "info", "warning", "error")
"""``--log-level`` of ``serve`` and of the CLI's long-running commands (``watch``, ``events``,
``pods -w``), default ``warning``: the least severity written to stderr. warning shows what an
operator must know (each change of the event subscription's state, with its cause); info adds
the subscription's start and close; debug every failed attempt of an outage."""
