"""Forwarded calls (``forward.Forwarder``, docs/architecture.md §10 rule 4): Version kept by
nothing in the request and answered through an outage; podcache's own failures in its words.

Real parts: a grpcio server on a unix socket stands for the runtime (it counts its calls).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from podcache.cri.endpoint import parse_endpoint
from podcache.cri.proto import api_pb2 as pb
from podcache.serve.crisock.forward import Currency, Forwarder, UpstreamError

VERSION = "/runtime.v1.RuntimeService/Version"
STATUS = "/runtime.v1.RuntimeService/Status"


class CountingRuntime:
    """A runtime that answers Version and Status and counts the calls it was asked."""

    def __init__(self, path: str, name: str = "fake-runtime") -> None:
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()
        self._name = name
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        self.server.add_generic_rpc_handlers([self])  # type: ignore[list-item]
        self.server.add_insecure_port(f"unix:{path}")
        self.server.start()

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        method: str = details.method

        def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
            with self._lock:
                self.calls[method] = self.calls.get(method, 0) + 1
            if method == VERSION:
                return pb.VersionResponse(runtime_name=self._name).SerializeToString()
            return pb.StatusResponse().SerializeToString()

        return grpc.unary_unary_rpc_method_handler(answer)

    def stop(self) -> None:
        self.server.stop(0).wait()


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "runtime.sock")


@pytest.fixture
def runtime(path: str) -> Iterator[CountingRuntime]:
    served = CountingRuntime(path)
    yield served
    served.stop()


@pytest.fixture
def forwarder(path: str) -> Iterator[Forwarder]:
    made = Forwarder(parse_endpoint(f"unix://{path}"), timeout=5.0)
    yield made
    made.close()


def call(forwarder: Forwarder, path: str, request: bytes, remaining: float, *, keep: bool) -> bytes:
    """One forwarded call, on a loop of its own (the forwarder runs on the socket's)."""
    return asyncio.run(forwarder.call(path, request, remaining, keep=keep))


def version(forwarder: Forwarder, request: bytes) -> str:
    answer = call(forwarder, VERSION, request, 5.0, keep=True)
    return pb.VersionResponse.FromString(answer).runtime_name


def test_distinct_version_requests_make_one_runtime_call_and_keep_one_answer(
    runtime: CountingRuntime, forwarder: Forwarder
) -> None:
    for index in range(1000):
        request = pb.VersionRequest(version=f"v{index}" * 50).SerializeToString()
        assert version(forwarder, request) == "fake-runtime"
    assert runtime.calls == {VERSION: 1}
    assert len(forwarder._kept) == 1
    assert forwarder.saved == {VERSION: 999}


@pytest.mark.parametrize(
    ("reported", "current"),
    [
        (("IDLE", "CONNECTING"), True),  # the first connection's states, reported late
        (("IDLE", "CONNECTING", "READY"), True),
        (("READY", "IDLE"), False),  # a connection that was READY went away
        (("READY", "TRANSIENT_FAILURE", "CONNECTING", "READY"), False),
        (("READY", "SHUTDOWN"), False),
    ],
)
def test_only_a_ready_connection_going_away_ends_the_kept_answers_currency(
    reported: tuple[str, ...], current: bool
) -> None:
    """grpcio reports states on a thread of its own, late: the first connection's IDLE and
    CONNECTING can come after an answer was kept."""
    currency = Currency()
    currency.paths.add(VERSION)
    for state in reported:
        currency.reported(grpc.ChannelConnectivity[state])
    assert (VERSION in currency.paths) is current


def reconnected(forwarder: Forwarder) -> None:
    """Wait (a safety net of 120 s, not a bound) until the runtime answers again."""
    deadline = time.monotonic() + 120
    while True:
        try:
            call(forwarder, STATUS, b"", 5.0, keep=False)
            return
        except UpstreamError:
            assert time.monotonic() < deadline, "the runtime was not reached again"
            time.sleep(0.05)


def test_version_is_answered_through_an_outage_and_asked_again_after_it(
    path: str, runtime: CountingRuntime, forwarder: Forwarder
) -> None:
    assert version(forwarder, b"") == "fake-runtime"
    runtime.stop()
    with pytest.raises(UpstreamError) as caught:  # the outage, as a status call sees it
        call(forwarder, STATUS, b"", 5.0, keep=False)
    assert caught.value.code is grpc.StatusCode.UNAVAILABLE
    assert caught.value.details.startswith(f"podcache: the runtime at unix://{path} cannot")
    assert "Status was not answered" in caught.value.details
    assert version(forwarder, b"") == "fake-runtime"  # what it last said
    upgraded = CountingRuntime(path, name="upgraded-runtime")
    try:
        reconnected(forwarder)
        assert version(forwarder, b"") == "upgraded-runtime"
        assert upgraded.calls[VERSION] == 1
    finally:
        upgraded.stop()


def test_without_a_kept_answer_an_outage_is_podcaches_error_naming_the_runtime(
    path: str, forwarder: Forwarder
) -> None:
    with pytest.raises(UpstreamError) as caught:
        call(forwarder, VERSION, b"", 5.0, keep=True)
    assert caught.value.code is grpc.StatusCode.UNAVAILABLE
    assert f"podcache: the runtime at unix://{path} cannot be reached" in caught.value.details
    assert "failed to connect to all addresses" not in caught.value.details
