"""Reading a streamed list answer (KEP-5825) message by message is reading the unary answer.

Each message of StreamPodSandboxes/StreamContainers is read on its own by the list reader and
the rows are joined in order (``converter._read_messages``, and ``_Converter.read_all`` in
``AsyncCRIRuntime``'s thread). Differential, against the one-call read of the same items as
one unary answer, for every cut of the items into messages; a message that is not a list
answer on its own fails the listing, naming the streaming call, even where the messages
joined would read (a truncated item must not swallow the next message). Also ``collect``'s
bound and the reasons a unary answer past gRPC's limit is given.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podcache.cri import converter, liststream
from podcache.cri.client import _read_answer
from podcache.cri.convert import Listing, MalformedListingError
from podcache.cri.converter import _READERS, _Converter, _read_messages
from podcache.cri.liststream import (
    FRAME_BYTES,
    ListStreamTooLongError,
    collect,
    over_limit_reason,
)
from podcache.cri.proto import api_pb2 as pb
from podcache.errors import RuntimeProtocolError
from podcache.model import PodList
from tests.unit.cri.test_split_items import pods_of, whole
from tests.unit.cri.test_wire import (
    containers,
    encodings,
    length_delimited,
    listing_bytes,
    sandboxes,
)

URL = "unix:///x.sock"
TWINS = {"ListPodSandbox": "StreamPodSandboxes", "ListContainers": "StreamContainers"}


def thread_read(method: str, parts: list[bytes]) -> Listing:
    """As ``CRIRuntime`` reads a streamed answer."""
    twin = TWINS[method]
    read = _READERS[twin]
    return _read_messages(lambda data: _read_answer(URL, twin, read, data), parts)


def async_read(method: str, parts: list[bytes]) -> Listing:
    """As ``AsyncCRIRuntime``'s converter reads one (in pieces of 64 bytes, to cut them too)."""
    return _Converter(URL).read_all(TWINS[method], parts)


def streamed(method: str, parts: list[bytes], read_in: str) -> PodList:
    listing = thread_read(method, parts) if read_in == "thread" else async_read(method, parts)
    return pods_of(method, listing)


def cut(items: list[bytes], sizes: list[int]) -> list[bytes]:
    """``items`` (encoded items) as messages of the given sizes in items (the last takes the
    rest; a size of 0 makes an empty message)."""
    messages, start = [], 0
    for size in sizes:
        messages.append(listing_bytes(items[start : start + size]))
        start += size
    messages.append(listing_bytes(items[start:]))
    return messages


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(["ListPodSandbox", "ListContainers"]),
    st.sampled_from(["thread", "asyncio"]),
    st.data(),
)
def test_a_streamed_answer_reads_as_the_unary_answer_for_every_cut(
    monkeypatch: pytest.MonkeyPatch, method: str, read_in: str, data: st.DataObject
) -> None:
    monkeypatch.setattr(converter, "READ_PIECE_BYTES", 64)
    items = sandboxes() if method == "ListPodSandbox" else containers()
    encoded = data.draw(st.lists(encodings(items), max_size=10))
    sizes = data.draw(st.lists(st.integers(0, 4), max_size=6))
    messages = cut(encoded, sizes)
    expected = whole(method, listing_bytes(encoded))
    if expected is None:  # an item the reader rejects: the streamed answer fails alike
        with pytest.raises(RuntimeProtocolError, match=f"its {TWINS[method]} answer is not"):
            streamed(method, messages, read_in)
    else:
        assert streamed(method, messages, read_in) == expected


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["ListPodSandbox", "ListContainers"]), st.data())
def test_a_corrupted_message_fails_the_listing_or_reads_as_its_own_items(
    method: str, data: st.DataObject
) -> None:
    """Reference: each message read alone; any message the reader rejects fails the whole."""
    items = sandboxes() if method == "ListPodSandbox" else containers()
    encoded = data.draw(st.lists(encodings(items), min_size=1, max_size=6))
    messages = cut(encoded, data.draw(st.lists(st.integers(0, 3), max_size=4)))
    hit = data.draw(st.integers(0, len(messages) - 1))
    if messages[hit]:
        broken = bytearray(messages[hit])
        broken[data.draw(st.integers(0, len(broken) - 1))] ^= 1 << data.draw(st.integers(0, 7))
        messages[hit] = bytes(broken)
    alone = [whole(method, message) for message in messages]
    if any(pods is None for pods in alone):
        with pytest.raises(RuntimeProtocolError, match=TWINS[method]):
            streamed(method, messages, "thread")
    else:
        read = _READERS[method]
        rows = Listing.joined([read(message) for message in messages])
        assert streamed(method, messages, "thread") == pods_of(method, rows)


@pytest.mark.parametrize("read_in", ["thread", "asyncio"])
def test_an_item_cut_across_two_messages_fails_though_the_two_joined_would_read(
    read_in: str,
) -> None:
    """A runtime that cut one item's bytes over two messages: joined, the bytes are a valid
    answer; read message by message (as the proto's messages are), the first is truncated."""
    sandbox = pb.PodSandbox(
        id="s1", metadata=pb.PodSandboxMetadata(name="web", uid="u1", namespace="ns")
    ).SerializeToString()
    answer = length_delimited(1, sandbox) + length_delimited(1, sandbox)
    middle = len(answer) - 3
    assert whole("ListPodSandbox", answer) is not None
    with pytest.raises(RuntimeProtocolError, match="its StreamPodSandboxes answer is not a valid"):
        streamed("ListPodSandbox", [answer[:middle], answer[middle:]], read_in)


@pytest.mark.parametrize("read_in", ["thread", "asyncio"])
def test_no_message_is_an_empty_listing(read_in: str) -> None:
    assert streamed("ListContainers", [], read_in) == whole("ListContainers", b"")


# -- collect: the bound on one streamed answer ---------------------------------------------------
class FakeStreamingCall:
    """A fake gRPC streaming call: these messages, then the end; records ``cancel``."""

    def __init__(self, messages: list[bytes]) -> None:
        self.messages = messages
        self.sent = 0
        self.cancelled = False

    def __iter__(self) -> Iterator[bytes]:
        for message in self.messages:
            self.sent += 1
            yield message

    def cancel(self) -> bool:
        self.cancelled = True
        return True


def test_collect_keeps_the_non_empty_messages_in_order_and_counts_every_frame() -> None:
    call = FakeStreamingCall([b"\x0a\x00", b"", b"\x0a\x01x"])
    answer = collect(call, "StreamContainers")
    assert answer.parts == [b"\x0a\x00", b"\x0a\x01x"]
    assert answer.messages == 3
    assert answer.received == 5 + 3 * FRAME_BYTES
    assert not call.cancelled


def test_collect_takes_an_answer_of_exactly_the_bound() -> None:
    messages = [b"a" * 10, b"b" * 20]
    bound = 30 + 2 * FRAME_BYTES
    assert collect(FakeStreamingCall(messages), "StreamContainers", bound).parts == messages


def test_collect_cancels_the_call_one_byte_past_the_bound_without_reading_further() -> None:
    call = FakeStreamingCall([b"a" * 10, b"b" * 21, b"c" * 5])
    with pytest.raises(ListStreamTooLongError) as raised:
        collect(call, "StreamContainers", 30 + 2 * FRAME_BYTES)
    assert call.cancelled
    assert call.sent == 2
    assert "its StreamContainers answer passed" in raised.value.reason()
    assert "MAX_STREAMED_LIST_BYTES" in raised.value.reason()


def test_endless_empty_messages_reach_the_bound_by_their_frames() -> None:
    call = FakeStreamingCall([b""] * 1000)
    with pytest.raises(ListStreamTooLongError):
        collect(call, "StreamPodSandboxes", 100 * FRAME_BYTES)
    assert call.cancelled
    assert call.sent == 101


def test_the_default_bound_is_read_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(liststream, "MAX_STREAMED_LIST_BYTES", 8)
    with pytest.raises(ListStreamTooLongError):
        collect(FakeStreamingCall([b"1234"]), "StreamContainers")


# -- a unary answer past gRPC's limit ------------------------------------------------------------
def test_past_the_limit_without_streaming_the_reason_says_both() -> None:
    reason = over_limit_reason(
        "ListContainers", "Received message larger than max (20 vs. 16)", 16 * 1024 * 1024, False
    )
    assert "its ListContainers answer is over gRPC's 16 MiB message limit" in reason
    assert "(Received message larger than max (20 vs. 16))" in reason
    assert "the runtime does not stream lists (StreamContainers is UNIMPLEMENTED" in reason


@pytest.mark.parametrize(
    ("streaming", "says"),
    [
        (True, "the runtime streams lists, but filtered calls are not streamed"),
        (None, "whether the runtime streams lists (StreamPodSandboxes) was not asked yet"),
    ],
)
def test_past_the_limit_otherwise_the_reason_says_what_is_known(
    streaming: bool | None, says: str
) -> None:
    reason = over_limit_reason("ListPodSandbox", "too big", 16 * 1024 * 1024, streaming)
    assert reason.startswith("its ListPodSandbox answer is over gRPC's 16 MiB message limit")
    assert says in reason


def test_the_reader_of_each_streaming_call_is_its_unary_twins() -> None:
    for unary, twin in TWINS.items():
        assert _READERS[twin] is _READERS[unary]
    with pytest.raises(MalformedListingError):
        _READERS["StreamContainers"](b"\x0a\x05ab")


def test_one_streamed_message_past_the_limit_is_the_runtimes_cut() -> None:
    reason = over_limit_reason("StreamContainers", "larger than max", 256 * 1024 * 1024, True)
    assert reason.startswith(
        "a message of its StreamContainers answer is over podcache's 256 MiB limit on one "
        "streamed message (MAX_STREAMED_MESSAGE_BYTES"
    )
    assert "more items in one message" in reason
