"""Durations as operators type them (``2s``, ``500ms``, ``1m30s``, ``1.5``) and their options.

Shared by the ``podcache`` commands and ``podcache serve`` (which must not import the CLI).
Parsing only: what a duration is used for, and whether 0 makes sense there, is the caller's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["Duration", "duration_option", "parse_duration"]

_F = TypeVar("_F", bound=Callable[..., Any])

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_PART = re.compile(rf"({_NUMBER})(ns|us|µs|ms|s|m|h)")
_BARE = re.compile(_NUMBER)


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration (``2s``, ``500ms``, ``1m30s``) or a bare number of seconds.

    Negative, empty, infinite and malformed values are a ValueError quoting the text.
    """
    value = text.strip()
    if _BARE.fullmatch(value):
        seconds = float(value)
    else:
        seconds, position = 0.0, 0
        for match in _PART.finditer(value):
            if match.start() != position:
                break
            seconds += float(match[1]) * _UNITS[match[2]]
            position = match.end()
        if position == 0 or position != len(value):
            raise ValueError(
                f"{text!r} is not a duration: use e.g. 2s, 500ms, 1m30s, or a number of seconds"
            )
    if not math.isfinite(seconds):
        raise ValueError(f"{text!r} is not a finite duration")
    return seconds


class Duration(click.ParamType[float, Any]):
    """A click type for ``parse_duration`` (seconds as a float); ``positive`` refuses 0."""

    name = "duration"

    def __init__(self, *, positive: bool = False) -> None:
        self.positive = positive

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        try:
            seconds = parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if self.positive and seconds <= 0:
            self.fail(f"{value!r} is not a positive duration", param, ctx)
        return seconds


def duration_option(
    flag: str, default: str | None, help: str, *, positive: bool = False, metavar: str | None = None
) -> Callable[[_F], _F]:
    """A click option ``flag`` taking a ``Duration``, its default shown when it has one."""
    kind = Duration(positive=positive)
    shown = default is not None
    return click.option(
        flag, type=kind, default=default, show_default=shown, metavar=metavar, help=help
    )
