"""The runtime's NOT_FOUND kept as an answer (``statuses.StatusStore`` invariant 6): an agent
asks ``ContainerStatus`` of a sandbox event's ID, which the runtime answers NOT_FOUND; the
next agent after the same event gets that answer from the store, until an event names the
ID, the period passes or the stream ends."""

from __future__ import annotations

import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.serve.crisock import statuses
from podcache.serve.crisock.statuses import CONTAINER, SANDBOX, StatusKey, StatusStore
from tests.unit.crisock.test_statuses import PERIOD, SANDBOX_ID, Clock, event

NOT_FOUND = 'an error occurred when try to find container "sss": not found'
KEY = StatusKey(CONTAINER, SANDBOX_ID, False)


def _store() -> tuple[StatusStore, Clock]:
    clock = Clock()
    store = StatusStore(PERIOD, clock=clock)
    store.stream_opened()
    return store, clock


def test_a_not_found_is_given_until_the_period_passes() -> None:
    store, clock = _store()
    store.keep_missing(KEY, NOT_FOUND, store.begin())
    assert store.missing(KEY) == NOT_FOUND
    assert store.missing(StatusKey(CONTAINER, SANDBOX_ID, True)) == NOT_FOUND  # either verbosity
    assert store.missing(StatusKey(SANDBOX, SANDBOX_ID, False)) is None  # its own method only
    clock.now += PERIOD
    assert store.missing(KEY) == NOT_FOUND
    clock.now += 0.001
    assert store.missing(KEY) is None


def test_an_event_naming_the_id_ends_it() -> None:
    store, _ = _store()
    store.keep_missing(KEY, NOT_FOUND, store.begin())
    # A container's event names its sandbox (pod_sandbox_status): the ID may mean more now.
    store.event(event("a" * 64, pb.CONTAINER_STARTED_EVENT, statuses=[]))
    assert store.missing(KEY) is None


def test_one_an_event_may_have_overtaken_is_not_kept() -> None:
    store, _ = _store()
    ticket = store.begin()
    store.event(event("a" * 64, pb.CONTAINER_CREATED_EVENT, statuses=[]))  # names SANDBOX_ID
    store.keep_missing(KEY, NOT_FOUND, ticket)
    assert store.missing(KEY) is None
    store.keep_missing(KEY, NOT_FOUND, store.begin())
    assert store.missing(KEY) == NOT_FOUND


def test_the_stream_ending_ends_it_and_a_prefix_is_never_kept() -> None:
    store, _ = _store()
    store.keep_missing(KEY, NOT_FOUND, store.begin())
    prefix = StatusKey(SANDBOX, SANDBOX_ID[:12], False)
    store.keep_missing(prefix, NOT_FOUND, store.begin())
    assert store.missing(prefix) is None  # an item made later may answer to a prefix
    store.stream_ended()
    assert store.missing(KEY) is None
    store.stream_opened()
    assert store.missing(KEY) is None


def test_not_founds_are_bounded_at_and_past_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statuses, "MAX_MISSING", 2)
    store, _ = _store()
    keys = [StatusKey(CONTAINER, letter * 64, False) for letter in "xyz"]
    for key in keys[:2]:
        store.keep_missing(key, NOT_FOUND, store.begin())
    assert [store.missing(k) for k in keys[:2]] == [NOT_FOUND, NOT_FOUND]
    assert store.missing_size == (2, 2 * len(NOT_FOUND))  # at the limit
    store.keep_missing(keys[2], NOT_FOUND, store.begin())
    assert [store.missing(k) for k in keys] == [None, NOT_FOUND, NOT_FOUND]
    assert store.missing_size == (2, 2 * len(NOT_FOUND))  # past it: the oldest went
