"""The simulator's list streaming (KEP-5825): how answers are cut, the annotation size, the CLI.

``StreamChunking`` cuts a list answer's encoded items into messages: every item once, in
order, each message 1..``max_items`` items and at most ``STREAM_MESSAGE_BYTES`` unless one item
alone is larger; the cuts depend on the seed only. ``annotation_bytes`` gives every sandbox
and container a ``last-applied-configuration`` annotation of exactly that size, drawing
nothing. ``podcache sim --no-streaming`` answers the streaming calls UNIMPLEMENTED.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podcache.cri.proto import api_pb2 as pb
from podcache.cri.proto import services
from podcache.sim import Population
from podcache.sim.population import LAST_APPLIED_ANNOTATION
from podcache.sim.server import STREAM_MESSAGE_BYTES, StreamChunking


def entry(size: int, tag: int) -> bytes:
    """An encoded item of ``size`` bytes in all (distinct by ``tag``)."""
    return bytes([tag % 256]) * size


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 64), max_size=40),
    st.integers(1, 12),
    st.integers(0, 2**32),
)
def test_every_item_is_sent_once_in_order_in_messages_of_1_to_max_items(
    sizes: list[int], max_items: int, seed: int
) -> None:
    entries = [entry(size, n) for n, size in enumerate(sizes)]
    messages = StreamChunking(seed, max_items).messages(entries)
    assert b"".join(messages) == b"".join(entries)
    assert all(messages)  # no empty message; no items, no message
    # Each message is whole entries: walk them off the front, counting.
    rest = list(entries)
    for message in messages:
        taken, data = 0, message
        while data:
            assert data.startswith(rest[0])
            data = data[len(rest.pop(0)) :]
            taken += 1
        assert 1 <= taken <= max_items


def test_a_message_closes_before_it_passes_the_byte_cap_unless_one_item_is_larger() -> None:
    big = STREAM_MESSAGE_BYTES // 3 + 1
    entries = [entry(big, n) for n in range(5)] + [entry(STREAM_MESSAGE_BYTES + 10, 9)]
    messages = StreamChunking(0, 100).messages(entries)
    assert [len(m) // big for m in messages[:-1]] == [2, 2, 1]
    assert len(messages[-1]) == STREAM_MESSAGE_BYTES + 10


def test_the_seed_alone_fixes_the_cuts_and_another_seed_varies_them() -> None:
    entries = [entry(3, n) for n in range(200)]

    def cuts(seed: int) -> list[int]:
        return [len(m) for m in StreamChunking(seed, 20).messages(entries)]

    assert cuts(5) == cuts(5)
    assert len({tuple(cuts(seed)) for seed in range(5)}) > 1
    assert len(set(cuts(5))) > 1  # message sizes vary within one answer


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_max_items_is_a_positive_int(bad: object) -> None:
    with pytest.raises(ValueError, match="max_items must be an int >= 1"):
        StreamChunking(0, bad)  # type: ignore[arg-type]


def test_annotation_bytes_sizes_one_annotation_on_every_record_and_draws_nothing() -> None:
    plain = Population(20, seed=8).snapshot()
    heavy = Population(20, seed=8, annotation_bytes=16 * 1024).snapshot()
    assert [s.id for s in heavy.sandboxes] == [s.id for s in plain.sandboxes]
    assert [c.id for c in heavy.containers] == [c.id for c in plain.containers]
    heavy_annotations = [r.annotations for r in heavy.sandboxes] + [
        r.annotations for r in heavy.containers
    ]
    plain_annotations = [r.annotations for r in plain.sandboxes] + [
        r.annotations for r in plain.containers
    ]
    assert all(len(a[LAST_APPLIED_ANNOTATION]) == 16 * 1024 for a in heavy_annotations)
    assert all(LAST_APPLIED_ANNOTATION not in a for a in plain_annotations)
    with pytest.raises(ValueError, match="annotation_bytes must be >= 0"):
        Population(1, annotation_bytes=-1)


def test_the_command_serves_no_streaming_and_sized_annotations_on_request(
    tmp_path: Path,
) -> None:
    socket_path = tmp_path / "sim.sock"
    code = "import sys; from podcache.sim import cli_main; sys.exit(cli_main(sys.argv[1:]))"
    args = ["--socket", str(socket_path), "--pods", "3", "--annotation-bytes", "500"]
    process = subprocess.Popen(
        [sys.executable, "-c", code, *args, "--no-streaming", "--stream-items", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().strip()
        with grpc.insecure_channel(endpoint) as channel:
            stub = services.stub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                list(stub.StreamContainers(pb.StreamContainersRequest(), timeout=10))
            assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED
            sandboxes = stub.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items
            assert all(len(s.annotations[LAST_APPLIED_ANNOTATION]) == 500 for s in sandboxes)
    finally:
        process.terminate()
        process.wait(10)
    assert "no list streaming" in (process.stderr.read() if process.stderr else "")
