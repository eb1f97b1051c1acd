"""containerd's own events as the CRI socket reads them (``serve/crisock/taskevents.py``):
an envelope of a followed topic gives the container it names, another topic nothing, and any
bytes at all give a name, nothing, or ``ProtobufError`` (the runtime's bytes are hostile)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podcache.serve.crisock.taskevents import (
    MAX_ID_CHARS,
    TOPICS,
    ProtobufError,
    named_container,
    subscribe_request,
)
from podcache.sim.taskevents import envelope

ids = st.text(alphabet="0123456789abcdef", min_size=1, max_size=MAX_ID_CHARS)


@given(st.sampled_from(TOPICS), ids)
def test_a_followed_topic_names_its_container(topic: str, ident: str) -> None:
    assert named_container(envelope(topic, ident)) == ident


@given(st.sampled_from(["/tasks/exit", "/tasks/exec-added", "/images/update", ""]), ids)
def test_another_topic_names_none(topic: str, ident: str) -> None:
    assert named_container(envelope(topic, ident)) is None


@pytest.mark.parametrize("ident", ["", "a" * (MAX_ID_CHARS + 1)])
def test_a_followed_topic_without_a_usable_id_is_unreadable(ident: str) -> None:
    with pytest.raises(ProtobufError):
        named_container(envelope("/tasks/oom", ident))


@given(st.binary(max_size=300))
def test_any_bytes_read_to_a_name_nothing_or_protobuf_error(data: bytes) -> None:
    with contextlib.suppress(ProtobufError):
        named = named_container(data)
        assert named is None or 0 < len(named) <= MAX_ID_CHARS


def test_the_subscription_asks_for_the_followed_topics_only() -> None:
    request = subscribe_request()
    for topic in TOPICS:
        assert f'topic=="{topic}"'.encode() in request
    assert request.count(b"topic==") == len(TOPICS)
