"""The connection's state table: the package docstring's event table and ``TRANSITIONS`` agree,
every listed transition is accepted by ``_enter`` and an unlisted one raises.

The docstring stays the documentation; these tests read its event table as written (columns
from its ``====`` rule, a row continued on the lines whose "in state" column is blank) and
replay it against a connection that has no transport, so ``_enter`` changes nothing else.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest

from podcache.serve import http1
from podcache.serve.http1 import HTTPConnection, HTTPServer, State
from podcache.serve.http1.states import TRANSITIONS, UnlistedTransitionError
from podcache.serve.response import Response

_OPEN = {State.IDLE, State.HEAD, State.ANSWERING, State.BLOCKED, State.STREAMING}


def _event_rows(doc: str) -> list[tuple[str, str, str]]:
    """``(event, in state, next state)`` of each row of the docstring's event table."""
    lines = doc.split("\nevent ", 1)[1].splitlines()
    rule = lines[1]  # the rule under the header gives the columns
    starts = [match.start() for match in re.finditer(r"=+", rule)]
    rows: list[list[str]] = []
    for line in lines[2:]:
        if line.startswith("="):  # the closing rule
            break
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        if cells[1]:
            rows.append(cells)
        else:  # a continuation of the row above
            for column, text in enumerate(cells):
                rows[-1][column] = f"{rows[-1][column]} {text}".strip()
    return [(event, before, after) for event, before, after in rows]


def _states_named(text: str) -> list[State]:
    return [State[name] for name in re.findall(r"``([A-Z]+)``", text)]


def _from_states(cell: str, others: set[State]) -> set[State]:
    """The states an "in state" cell names: listed ones, "any open", "any", "any other"."""
    named = set(_states_named(cell))
    if named:
        return named
    if cell == "any open":
        return _OPEN
    if cell == "any":
        return set(State)
    assert cell in ("any other", "others"), f"an 'in state' cell not understood: {cell!r}"
    return set(State) - others


def documented_transitions(doc: str) -> set[tuple[State, State]]:
    """Every (from, to) the event table lists: each state its "next state" cell names, from
    each state its "in state" cell covers ("unchanged" and "``_next()`` decides" name none)."""
    pairs: set[tuple[State, State]] = set()
    listed_for: dict[str, set[State]] = {}  # event -> the states named in its earlier rows
    for event, before, after in _event_rows(doc):
        froms = _from_states(before, listed_for.get(event, set()))
        listed_for.setdefault(event, set()).update(_states_named(before))
        pairs.update((source, target) for source in froms for target in _states_named(after))
    return pairs


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _connection(loop: asyncio.AbstractEventLoop, state: State) -> HTTPConnection:
    async def respond(*_: object) -> Response:
        raise AssertionError("never asked")

    made = HTTPConnection(HTTPServer(respond), loop, None)  # no transport: nothing else changes
    made.state = state
    return made


def test_the_event_table_is_read_as_written() -> None:
    rows = _event_rows(http1.__doc__ or "")
    assert rows[0] == ("a request target begins to arrive", "``IDLE``", "``HEAD``")
    assert (
        "``_next()``: a refusal, an answer that closes, the end of input (client EOF), "
        "the server's shutdown",
        "any open",
        "``ENDING``",
    ) in rows
    assert rows[-1] == ("``connection_lost``", "any", "``CLOSED``")


def test_the_data_is_the_documented_table() -> None:
    documented = documented_transitions(http1.__doc__ or "")
    assert documented == TRANSITIONS
    for state in State:
        assert set(state.successors) == {after for before, after in TRANSITIONS if before is state}


def test_every_documented_transition_is_accepted(loop: asyncio.AbstractEventLoop) -> None:
    for before, after in sorted(
        documented_transitions(http1.__doc__ or ""), key=lambda p: (p[0].name, p[1].name)
    ):
        connection = _connection(loop, before)
        connection._enter(after)
        assert connection.state is after


def test_every_unlisted_transition_raises_and_leaves_the_state(
    loop: asyncio.AbstractEventLoop,
) -> None:
    unlisted = {(a, b) for a in State for b in State} - documented_transitions(http1.__doc__ or "")
    assert (State.ENDING, State.IDLE) in unlisted and (State.CLOSED, State.HEAD) in unlisted
    for before, after in unlisted:
        connection = _connection(loop, before)
        with pytest.raises(UnlistedTransitionError, match=f"{before.name} -> {after.name}"):
            connection._enter(after)
        assert connection.state is before
