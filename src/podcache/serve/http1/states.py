"""The connection's states and the transitions between them: the package docstring's tables
as data, which ``HTTPConnection._enter`` checks (tests/serve/test_http1_states.py holds the two
to each other). Deliberately not here: what makes a connection change state.
"""

from __future__ import annotations

import enum

__all__ = ["TRANSITIONS", "State", "UnlistedTransitionError"]


class State(enum.Enum):
    """A connection's state: see the package's tables."""

    IDLE = "idle"
    HEAD = "head"
    ANSWERING = "answering"
    BLOCKED = "blocked"
    STREAMING = "streaming"
    ENDING = "ending"
    CLOSED = "closed"

    successors: tuple[State, ...]
    """The states this one may be followed by (from ``TRANSITIONS``): a tuple, see below."""


IDLE, HEAD, ANSWERING, BLOCKED = State.IDLE, State.HEAD, State.ANSWERING, State.BLOCKED
STREAMING, ENDING, CLOSED = State.STREAMING, State.ENDING, State.CLOSED
# Tuples, not sets: membership compares identity first, while hashing an Enum member runs
# Python code.
_WAITING_FOR_INPUT = (IDLE, HEAD)  # a completed head is answered at once
_OVER = (ENDING, CLOSED)  # nothing more is answered
_OPEN = (IDLE, HEAD, ANSWERING, BLOCKED, STREAMING)  # "any open" in the event table

TRANSITIONS: frozenset[tuple[State, State]] = frozenset(
    # ``_next()`` chooses any open state, or ends, from any open state (IDLE to HEAD, when a
    # target begins to arrive, is one of these).
    {(before, after) for before in _OPEN for after in (*_OPEN, ENDING)}
    # A reset, or ``connection_lost``, from any state (lost again after a reset included).
    | {(before, CLOSED) for before in State}
)
"""(from, to): every change of state the event table of the package docstring allows; a state
entered again (IDLE to IDLE after a keep-alive answer) is a transition too. Nothing leaves
``ENDING`` but a reset or the loss of the connection, and nothing leaves ``CLOSED``."""

# In the order of the class (IDLE first: a keep-alive answer re-enters it, and tuple membership
# stops at the first match).
for _state in State:
    _state.successors = tuple(after for after in State if (_state, after) in TRANSITIONS)
del _state


class UnlistedTransitionError(AssertionError):
    """A connection was asked to change state in a way ``TRANSITIONS`` does not list: a bug."""
