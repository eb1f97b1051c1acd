"""``cri.wire``: the method table every client takes its paths from, held to the generated
protobuf module (each encoder's bytes, each path a method of the service, each reader
importable), and gRPC's helpers held to their references (``urllib``'s percent-decoding,
``grpc.StatusCode``'s numbers)."""

from __future__ import annotations

import importlib
from urllib.parse import unquote_to_bytes

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from podcache.cri.channels import _METHODS, _PROTOBUF_ANSWERS
from podcache.cri.liststream import STREAMED
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.queries import CRI_VERSION, _list_requests
from podcache.cri.wire import frames, grpcwire, protobuf
from podcache.cri.wire.headers import authority
from podcache.cri.wire.methods import METHODS, SERVICE, CRIMethod, request

_SERVICE = pb.DESCRIPTOR.services_by_name["RuntimeService"]

# Each row's encoder, called with these arguments, against the protobuf message it must equal.
_SAMPLES = {
    "Version": ((), pb.VersionRequest(version=CRI_VERSION)),
    "ListPodSandbox": ((False,), _list_requests(False)[0]),
    "ListContainers": ((False,), _list_requests(False)[1]),
    "PodSandboxStatus": (("a" * 64,), pb.PodSandboxStatusRequest(pod_sandbox_id="a" * 64)),
    "GetContainerEvents": ((), pb.GetEventsRequest()),
}


@pytest.mark.parametrize("row", METHODS.values(), ids=list(METHODS))
def test_each_row_is_a_method_of_the_runtime_service(row: CRIMethod) -> None:
    method = _SERVICE.methods_by_name[row.name]
    assert row.path == f"/{_SERVICE.full_name}/{row.name}"
    assert row.path.startswith(SERVICE)
    assert method.input_type.name == row.request
    assert method.server_streaming is row.streaming


@pytest.mark.parametrize("row", METHODS.values(), ids=list(METHODS))
def test_each_encoder_writes_the_generated_modules_bytes(row: CRIMethod) -> None:
    if row.encode is None:
        assert row.name not in _SAMPLES
        return
    arguments, expected = _SAMPLES[row.name]
    assert row.encode(*arguments) == expected.SerializeToString()


def test_the_listing_requests_of_all_are_the_generated_modules() -> None:
    for which in (True, False):
        sandboxes, containers = _list_requests(which)
        assert METHODS["ListPodSandbox"].encode is not None
        assert METHODS["ListPodSandbox"].encode(which) == sandboxes.SerializeToString()
        assert METHODS["ListContainers"].encode is not None
        assert METHODS["ListContainers"].encode(which) == containers.SerializeToString()


@pytest.mark.parametrize("row", [r for r in METHODS.values() if r.reader], ids=str)
def test_each_reader_is_a_function_of_the_answers_bytes(row: CRIMethod) -> None:
    assert row.reader is not None
    module, _, name = row.reader.partition(":")
    assert callable(getattr(importlib.import_module(module), name))


def test_version_fields_reads_the_generated_modules_answer() -> None:
    answer = pb.VersionResponse(
        version="0.1.0", runtime_name="containerd", runtime_version="v2", runtime_api_version="v1"
    )
    assert protobuf.version_fields(answer.SerializeToString()) == (
        "0.1.0",
        "containerd",
        "v2",
        "v1",
    )
    with pytest.raises(protobuf.ProtobufError, match="truncated"):
        protobuf.version_fields(answer.SerializeToString()[:-1])


@given(st.integers(0, 2**64 - 1))
def test_a_varint_reads_back(n: int) -> None:
    encoded = protobuf.varint(n)
    assert protobuf.read_varint(encoded + b"\x01", 0) == (n, len(encoded))


@given(st.binary(max_size=40).map(lambda b: b.replace(b"!", b"%")))
def test_percent_decoding_is_urllibs(raw: bytes) -> None:
    assert grpcwire.percent_decoded(raw) == unquote_to_bytes(raw)


def test_status_numbers_are_grpcs() -> None:
    for code in grpc.StatusCode:
        number = code.value[0]
        assert grpcwire.status_of({b"grpc-status": str(number).encode()})[0] == number
        assert getattr(grpcwire, code.name) == number
    assert grpcwire.status_of({b"grpc-status": b"17"})[0] == grpcwire.UNKNOWN
    assert grpcwire.status_of({})[0] == grpcwire.UNKNOWN


def test_a_frames_padding_must_fit_it() -> None:
    assert frames.unpadded(frames.DATA, frames.PADDED, b"\x02abc\x00\x00") == b"abc"
    with pytest.raises(frames.FrameError, match="a padded DATA frame of 3 bytes"):
        frames.unpadded(frames.DATA, frames.PADDED, b"\x03ab")
    flags = frames.PRIORITY_FLAG
    with pytest.raises(frames.FrameError, match="too short for its priority"):
        frames.unpadded(frames.HEADERS, flags, b"\x00\x00\x00")


def test_grpcios_methods_are_rows_of_the_table() -> None:
    """grpcio's channels call only methods of the table, with its request types; the list
    answers and statuses are read by its readers."""
    for method, (request_type, reader) in _METHODS.items():
        row = METHODS[method]
        assert request_type.DESCRIPTOR.name == row.request
        if method not in _PROTOBUF_ANSWERS:  # Version and Status: protobuf's, every field
            assert row.reader is not None
            module, _, name = row.reader.partition(":")
            assert reader is getattr(importlib.import_module(module), name)
    for twin, request_type, _ in STREAMED.values():
        assert METHODS[twin].streaming
        assert request_type.DESCRIPTOR.name == METHODS[twin].request


def test_a_call_goes_through_its_row() -> None:
    """``request`` writes a call with its row's encoder; a method only grpcio sends, or one
    not in the table, has none."""
    for name, (arguments, expected) in _SAMPLES.items():
        assert request(name, *arguments) == (name, expected.SerializeToString())
    with pytest.raises(ValueError, match="Status has no encoder"):
        request("Status")
    with pytest.raises(KeyError):
        request("RunPodSandbox")


@given(
    st.integers(0, 2**24 - 1),
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 2**32 - 1),
    st.binary(max_size=4),
)
def test_a_frames_head_reads_back(
    length: int, kind: int, flags: int, stream: int, pad: bytes
) -> None:
    """The head of a frame ``frame`` wrote (at any offset) reads back, the reserved bit
    dropped."""
    data = pad + length.to_bytes(3) + bytes((kind, flags)) + stream.to_bytes(4)
    assert frames.head(data, len(pad)) == (length, kind, flags, stream & 0x7FFFFFFF)
    written = frames.frame(kind, flags, stream & 0x7FFFFFFF, b"x" * (length % 50))
    assert frames.head(written, 0) == (length % 50, kind, flags, stream & 0x7FFFFFFF)


@given(st.lists(st.tuples(st.integers(0, 2**16 - 1), st.integers(0, 2**32 - 1)), max_size=8))
def test_settings_pairs_read_back(pairs: list[tuple[int, int]]) -> None:
    payload = frames.settings(*pairs)
    assert frames.setting_pairs(payload) == pairs
    if payload:
        with pytest.raises(
            frames.FrameError, match=f"malformed SETTINGS frame \\({len(payload) - 1} bytes"
        ):
            frames.setting_pairs(payload[:-1])


def test_a_clients_preface_settings_and_window() -> None:
    preface = frames.client_preface(1000, 70_000, 4096)
    assert preface.startswith(frames.PREFACE)
    rest = preface[len(frames.PREFACE) :]
    length, kind, flags, stream = frames.head(rest, 0)
    assert (kind, flags, stream) == (frames.SETTINGS, 0, 0)
    assert frames.setting_pairs(rest[9 : 9 + length]) == [
        (frames.SETTING_ENABLE_PUSH, 0),
        (frames.SETTING_WINDOW, 1000),
        (frames.SETTING_MAX_HEADER_LIST, 4096),
    ]
    update = rest[9 + length :]
    assert frames.head(update, 0) == (4, frames.WINDOW_UPDATE, 0, 0)
    assert int.from_bytes(update[9:]) == 70_000 - frames.DEFAULT_WINDOW


@pytest.mark.parametrize(
    ("address", "expected"),
    [(None, "localhost"), (("127.0.0.1", 80), "127.0.0.1:80"), (("::1", 443), "[::1]:443")],
)
def test_a_calls_authority(address: tuple[str, int] | None, expected: str) -> None:
    assert authority(address) == expected
