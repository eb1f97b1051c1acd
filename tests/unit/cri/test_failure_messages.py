"""Every failure message names the method and the endpoint, table-driven over
the mappings of ``cri/failures.py`` (every status code, the details runtimes and grpcio give,
every probe outcome after a deadline), and over the own HTTP/2 client's failures as the caller
maps them, over a real socket: a connection lost before an answer names both calls of a pod,
and a 404 HTML page is "not gRPC", never "a gRPC server, but not a CRI runtime"."""

from __future__ import annotations

import socket

import grpc
import pytest

from podcache.cri.caller import SyncCaller
from podcache.cri.channels import _EVENTS_METHOD
from podcache.cri.diagnosis import _Probe
from podcache.cri.endpoint import parse_endpoint
from podcache.cri.failures import _deadline_error, _events_error, _status_error
from podcache.cri.proto import api_pb2 as pb
from podcache.errors import CRIError, RuntimeProtocolError
from tests.unit.cri.h2fake import SETTINGS, FakePeer, fake_runtime, frame

ENDPOINT = parse_endpoint("unix:///run/nosuch/runtime.sock")
METHOD = "ListPodSandbox"
DETAILS = [
    "",
    "connection refused",
    "No such file or directory",
    "permission denied",
    "Broken pipe",
    "connection lost: the runtime closed the connection",
    "failed to deserialize response message",
    "the runtime answered HTTP status '404'",
    "Received http2 header with status: 404",
    "the runtime answered content-type 'text/html', not gRPC",
    "container events subscription closed by server",
]
PROBES = [
    _Probe(error=ConnectionRefusedError(111, "Connection refused")),
    _Probe(reply=None),
    _Probe(reply=b""),
    _Probe(reply=b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"),  # SETTINGS: HTTP/2 is there
    _Probe(reply=b"HTTP/1.1 400 Bad Request\r\n\r\n"),
    _Probe(reply=b"<!DOCTYPE html>"),
]


def named(error: CRIError | None, method: str) -> None:
    assert error is not None
    assert method in str(error) and ENDPOINT.url in str(error), str(error)
    assert "during  " not in str(error) and "  (" not in str(error), str(error)


@pytest.mark.parametrize("code", list(grpc.StatusCode), ids=lambda c: c.name)
@pytest.mark.parametrize("details", DETAILS)
def test_a_call_that_ended_with_any_status_names_its_method(
    code: grpc.StatusCode, details: str
) -> None:
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        assert _status_error(ENDPOINT, METHOD, code, details) is None  # probed, then below
        return
    named(_status_error(ENDPOINT, METHOD, code, details), METHOD)


@pytest.mark.parametrize("code", list(grpc.StatusCode), ids=lambda c: c.name)
@pytest.mark.parametrize("details", DETAILS)
def test_an_event_stream_that_ended_with_any_status_names_its_method(
    code: grpc.StatusCode, details: str
) -> None:
    named(_events_error(ENDPOINT, False, code, details), _EVENTS_METHOD)


@pytest.mark.parametrize("probe", PROBES)
def test_a_deadline_names_its_method_whatever_the_probe_saw(probe: _Probe) -> None:
    named(_deadline_error(ENDPOINT.url, METHOD, 2.0, probe), METHOD)


@pytest.mark.parametrize(
    "details", ["the runtime answered HTTP status '404'", "Received http2 header with status: 404"]
)
def test_a_404_is_not_grpc_never_a_grpc_server_that_is_not_cri(details: str) -> None:
    for error in (
        _status_error(ENDPOINT, METHOD, grpc.StatusCode.UNIMPLEMENTED, details),
        _events_error(ENDPOINT, False, grpc.StatusCode.UNIMPLEMENTED, details),
    ):
        assert type(error) is RuntimeProtocolError, repr(error)
        assert "not gRPC" in str(error) and "not a CRI runtime" not in str(error)


# -- the own HTTP/2 client's failures, as the caller maps them, over a real socket -------------
def _pod_calls(where: list[str]) -> CRIError:
    caller = SyncCaller(parse_endpoint(where[0]), 5.0, "CRIRuntime")
    try:
        caller.pod_calls(
            [
                ("ListPodSandbox", pb.ListPodSandboxRequest()),
                ("ListContainers", pb.ListContainersRequest()),
            ]
        )
    except CRIError as error:
        return error
    finally:
        caller.close()
    raise AssertionError("the calls did not fail")


def test_a_connection_lost_before_any_answer_names_both_calls(sock_dir: str) -> None:
    """The runtime stops reading, then sends a SETTINGS frame: the client's acknowledgement
    fails to be written (EPIPE: a unix socket whose reader shut down), a write that belongs to
    neither call. The message names a method of the pod's calls (the client charges the
    connection's failure to the first call still waiting, or names both when none is), never
    "during  (" with no method."""

    def script(peer: FakePeer) -> None:
        peer.preface()
        peer.request()
        peer.request()
        peer.sock.shutdown(socket.SHUT_RD)
        peer.send(frame(SETTINGS, 0, 0))
        peer.sock.recv(1)  # held open until the client hangs up

    with fake_runtime(sock_dir, script) as where:
        error = _pod_calls(where)
    message = str(error)
    assert "during ListPodSandbox" in message and where[0] in message, message
    assert "during  " not in message and "  (" not in message, message


def test_a_404_html_page_is_not_grpc(sock_dir: str) -> None:
    def script(peer: FakePeer) -> None:
        peer.preface()
        for _ in range(2):  # both calls of the pod
            stream, _, _ = peer.request()
            peer.headers(stream, [(":status", "404"), ("content-type", "text/html")], end=True)
        peer.frame()

    with fake_runtime(sock_dir, script) as where:
        error = _pod_calls(where)
    assert type(error) is RuntimeProtocolError, repr(error)
    assert "not gRPC" in str(error) and "not a CRI runtime" not in str(error), str(error)
    assert "ListPodSandbox" in str(error)
