"""The CRI socket's closed sets and bounds (docs/architecture.md §10 rules 3 and 7): metric
labels from the proto's methods plus ``other``, bounded quotes of a client's path, the answer
memo keyed by a request's known fields, the duration histogram, the connections gauge."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podcache.cri.proto import api_pb2 as pb
from podcache.model import PodList
from podcache.serve.crisock.calls import DURATION_BUCKETS, Answered, CallStats, connections
from podcache.serve.crisock.lists import ANSWER_MEMO, ANSWER_MEMO_BYTES, AnswerMemo, normal_form
from podcache.serve.crisock.routes import (
    METHODS,
    OTHER,
    QUOTE_BYTES,
    READ_ONLY,
    denial,
    method_label,
)
from tests.unit.crisock.test_routes import _all_methods

RUNTIME = "/runtime.v1.RuntimeService/"


def test_every_method_of_the_api_and_the_proto_is_a_label_of_its_own() -> None:
    assert set(READ_ONLY) <= METHODS
    assert set(_all_methods()) <= METHODS
    assert RUNTIME + "RunPodSandbox" in METHODS  # denied, but still a method: its own label


@given(st.text(max_size=300))
def test_a_label_is_a_proto_method_name_or_other(name: str) -> None:
    for path in (name, RUNTIME + name, "/" + name):
        label = method_label(path)
        assert (
            label == OTHER
            or RUNTIME + label in METHODS
            or f"/runtime.v1.ImageService/{label}" in METHODS
        )


def test_five_thousand_distinct_names_make_one_series() -> None:
    stats = CallStats()
    for index in range(5000):
        stats.record(RUNTIME + "x" * 60_000 + str(index), "PERMISSION_DENIED", 0.001)
    assert list(stats.requests) == [(OTHER, "PERMISSION_DENIED")]
    assert stats.requests[(OTHER, "PERMISSION_DENIED")] == 5000


def test_a_denial_quotes_a_bounded_prefix_of_the_path() -> None:
    message = denial(RUNTIME + "x" * 60_000)
    assert len(message) < QUOTE_BYTES + 200
    assert "(60026 characters)" in message  # the path without its leading slash
    short = denial(RUNTIME + "RunPodSandbox")
    assert short.startswith("runtime.v1.RuntimeService/RunPodSandbox is denied")


def test_the_histogram_counts_each_call_in_its_bucket_cumulatively() -> None:
    stats = CallStats()
    for seconds in (0.0004, 0.0005, 0.003, 99.0):
        stats.record(RUNTIME + "ListContainers", "OK", seconds)
    stats.record(RUNTIME + "GetContainerEvents", "CANCELLED", None)  # untimed
    (family,) = [stats.durations()]
    buckets = {
        sample.labels["le"]: sample.value
        for sample in family.samples
        if sample.name.endswith("_bucket")
    }
    assert buckets[str(DURATION_BUCKETS[0])] == 2  # 0.0004 and 0.0005 (le is inclusive)
    assert buckets["0.005"] == 3
    assert buckets["+Inf"] == 4
    assert {sample.labels["method"] for sample in family.samples} == {"ListContainers"}


def test_the_histogram_adds_the_calls_the_c_relay_answered_to_those_of_grpc() -> None:
    stats = CallStats()
    stats.record(RUNTIME + "ContainerStatus", "OK", 0.003)
    relay = [0] * (len(DURATION_BUCKETS) + 1)
    relay[0], relay[-1] = 5, 1  # five at most 0.5 ms, one past 5 s
    only = [1] + [0] * len(DURATION_BUCKETS)
    (family,) = [
        stats.durations(
            {
                "ContainerStatus": Answered(6, 9.0, tuple(relay)),
                "PodSandboxStatus": Answered(1, 0.0002, tuple(only)),
            }
        )
    ]
    samples = {
        (sample.labels["method"], sample.name.rsplit("_", 1)[1], sample.labels.get("le")): (
            sample.value
        )
        for sample in family.samples
    }
    assert samples["ContainerStatus", "bucket", str(DURATION_BUCKETS[0])] == 5
    assert samples["ContainerStatus", "bucket", "0.005"] == 6  # gRPC's 3 ms one
    assert samples["ContainerStatus", "bucket", "+Inf"] == 7
    assert samples["ContainerStatus", "count", None] == 7
    assert samples["ContainerStatus", "sum", None] == pytest.approx(9.003)
    assert samples["PodSandboxStatus", "count", None] == 1  # answered by the relay alone
    assert stats.requests == {("ContainerStatus", "OK"): 1}  # the relay's are added at a scrape


def test_the_gauge_counts_connections_accepted_on_the_socket_and_open(tmp_path: Path) -> None:
    path = str(tmp_path / "cri.sock")
    other = str(tmp_path / "other.sock")
    held = []
    with socket.socket(socket.AF_UNIX) as listener, socket.socket(socket.AF_UNIX) as elsewhere:
        listener.bind(path)
        listener.listen()
        elsewhere.bind(other)
        elsewhere.listen()
        assert connections([path]) == 0
        for _ in range(3):
            client = socket.socket(socket.AF_UNIX)
            client.connect(path)
            held += [client, listener.accept()[0]]
        client = socket.socket(socket.AF_UNIX)
        client.connect(other)
        held += [client, elsewhere.accept()[0]]
        assert connections([path]) == 3
        held[0].close()
        held[1].close()
        assert connections([path]) == 2
        for each in held:
            each.close()


def _request(unknown: int) -> bytes:
    """An empty ListContainersRequest with field 1023 (unknown to the proto) = ``unknown``."""
    varint = bytearray()
    while True:
        varint.append((unknown & 0x7F) | (0x80 if unknown > 0x7F else 0))
        unknown >>= 7
        if not unknown:
            break
    return bytes([0xF8, 0x3F]) + bytes(varint)


def test_requests_that_differ_only_in_unknown_fields_share_one_answer() -> None:
    memo = AnswerMemo(PodList([]))
    forms = set()
    for unknown in range(1000):
        request = _request(unknown)
        parsed = pb.ListContainersRequest.FromString(request)
        forms.add(normal_form(parsed))
    assert len(forms) == 1
    (form,) = forms
    memo.keep("L", _request(0), form, b"answer")
    assert memo.formed("L", form) == b"answer"
    assert memo.sent("L", _request(0)) == b"answer"
    assert memo.sent("L", _request(1)) is None  # another spelling: decoded, then formed


def test_the_memo_keeps_at_most_its_answers_and_bytes() -> None:
    memo = AnswerMemo(PodList([]))
    for index in range(ANSWER_MEMO + 10):
        memo.keep("L", b"r%d" % index, b"f%d" % index, b"a")
    assert memo.formed("L", b"f%d" % (ANSWER_MEMO - 1)) == b"a"
    assert memo.formed("L", b"f%d" % ANSWER_MEMO) is None  # one past the bound: not kept
    assert memo.sent("L", b"r%d" % ANSWER_MEMO) is None
    big = AnswerMemo(PodList([]))
    half = b"x" * (ANSWER_MEMO_BYTES // 2)
    big.keep("L", b"1", b"1", half)
    big.keep("L", b"2", b"2", half)  # exactly the bound
    big.keep("L", b"3", b"3", b"y")  # past it
    assert big.formed("L", b"2") is half and big.formed("L", b"3") is None
