"""How a request will be answered: a ``Plan``, one of three kinds (docs/architecture.md §5,
item 3), made by the route handlers.

A handler returns a plan with only its own part (the response, ``build`` or ``run``); ``App``
completes it with what the request's checks found (``route``, the memo ``target``, the
freshness ``need``, the headers) before it is answered. ``Plan`` is the closed union of the
three, so a ``match`` over it is checked for every kind (mypy, ``assert_never``). Plans are
made per request and never kept (slotted, not frozen: the constructor is on the hot path,
where a frozen one costs more).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from podcache.serve.response import Response
from podcache.serve.snapshot import Answer, SnapshotView

__all__ = ["FromSnapshot", "Later", "Now", "Plan"]


@dataclass(slots=True)
class Now:
    """Answer with ``response`` as it is."""

    response: Response


@dataclass(slots=True)
class FromSnapshot:
    """Answer with ``build(view)`` from a snapshot at least as new as ``need``."""

    build: Callable[[SnapshotView], Answer]
    """The answer from a snapshot (its route filled in by ``App``)."""
    route: str = ""
    target: str | None = None
    """The memo's key for the answer, None when it must not be kept (freshness parameters:
    the answer is for a snapshot newer than the request, never a replay)."""
    need: float | None = None
    """The snapshot must have been read at or after this unix time (read-your-writes)."""
    headers: dict[str, str] = field(default_factory=dict)
    """The request's headers, as ``collect_headers`` read them (If-None-Match, for one)."""


@dataclass(slots=True)
class Later:
    """Answer with what ``run(need)`` gives, awaited (in ``respond``, or the coroutine
    ``respond_now`` returns)."""

    run: Callable[[float | None], Awaitable[Response]]
    route: str = ""
    need: float | None = None


Plan = Now | FromSnapshot | Later
"""A handler's and ``App._begin``'s result: how the request will be answered."""
