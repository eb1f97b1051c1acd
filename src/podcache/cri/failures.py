"""Error mapping: a failed call's status, or what a deadline's probe saw, as a podcache error.

Holds the mapping of a call's status code and details (``_rpc_error``: UNIMPLEMENTED and
undecodable answers are protocol errors, UNAVAILABLE says what the socket file shows), of a
failed event stream (``_events_error``), of a deadline given what the probe saw
(``_deadline_error``), and the messages of a closed getter and of an answer that is not CRI.
Every error names the endpoint. Deliberately not here: looking at the socket (``diagnosis``)
and deciding when to raise (the getters).
"""

from __future__ import annotations

import re
from typing import TypeVar

import grpc

from podcache.cri.channels import _EVENTS_METHOD
from podcache.cri.diagnosis import _H2_SETTINGS, _os_reason, _Probe, _unix_problem
from podcache.cri.endpoint import Endpoint
from podcache.errors import (
    CRIError,
    EventsUnsupportedError,
    RuntimeDeadlineError,
    RuntimeProtocolError,
    RuntimeUnavailableError,
)


def _describe_reply(reply: bytes) -> str:
    if reply.startswith(b"HTTP/"):
        first_line = reply.split(b"\r\n", 1)[0].decode("ascii", "replace")
        return f"an HTTP/1 server answered {first_line!r}"
    head = reply.lstrip()[:16].lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "an HTTP/1 server answered with an HTML page"
    return f"it answered {reply[:16]!r}, which is not HTTP/2"


def _deadline_error(
    url: str, method: str, timeout: float, probe: _Probe, took: float | None = None
) -> CRIError:
    """The error to raise for a call that reached its deadline, given what the probe saw;
    ``took``: how long the call really took, when it is known (said when it differs)."""
    waited = f"{method} got no answer within {timeout:g} s"
    if took is not None:
        waited += f" (the call took {took:.2f} s)"
    if probe.error is not None:
        return RuntimeUnavailableError(url, f"{_os_reason(probe.error)} ({waited})")
    reply = probe.reply
    if reply is None:
        return RuntimeDeadlineError(
            url, f"{waited}; it accepts connections but sends nothing (hung?)"
        )
    if not reply:
        return RuntimeUnavailableError(
            url, f"it accepts connections and closes them without answering ({waited})"
        )
    if len(reply) > 3 and reply[3] == _H2_SETTINGS:
        return RuntimeDeadlineError(url, f"{waited} (deadline exceeded; the runtime is up)")
    return RuntimeProtocolError(
        url, f"{_describe_reply(reply)}: not a gRPC server ({waited}); wrong socket?"
    )


_UNAVAILABLE_REASONS = (
    ("no such file", "socket does not exist"),
    ("connection refused", "connection refused: nothing is listening (is the runtime running?)"),
    ("permission denied", "permission denied on the socket (run as root?)"),
)
"""UNAVAILABLE details (lowercased substring) -> what to tell the user, first match wins."""


def _calling(method: str, reason: str) -> str:
    """``reason`` naming the call it stopped: every failure's message names its method."""
    return f"{reason} (calling {method})"


_NOT_GRPC = re.compile(r"http status|http2 header with status|:status|content-type", re.I)
"""Details of a call answered at the HTTP level (a 404, an HTML page, another content type):
this client's (``http2``) and grpcio's words for an HTTP/2 server that is not gRPC."""


def _unavailable_reason(endpoint: Endpoint, method: str, details: str) -> str:
    """Why an UNAVAILABLE call failed: gRPC's details, else what the socket file says."""
    lowered = details.lower()
    for words, reason in _UNAVAILABLE_REASONS:
        if words in lowered:
            return _calling(method, reason)
    reason = f"the connection failed or was closed during {method} ({details})"
    problem = _unix_problem(endpoint.path) if endpoint.path is not None else None
    return reason if problem is None else f"{problem} ({reason})"


def _status_error(
    endpoint: Endpoint, method: str, code: grpc.StatusCode | None, details: str
) -> CRIError | None:
    """The error for a call that ended with ``code`` and ``details``, or None for
    DEADLINE_EXCEEDED (the caller probes first).

    For UNAVAILABLE (the connection failed or dropped mid-call) it looks at the socket file:
    "socket does not exist" says more than gRPC's "Broken pipe".
    """
    url = endpoint.url
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return None
    if _NOT_GRPC.search(details):
        return RuntimeProtocolError(
            url, f"{method}: {details}: an HTTP/2 server, but not gRPC (wrong socket?)"
        )
    return _code_error(endpoint, method, code, details)


def _code_error(
    endpoint: Endpoint, method: str, code: grpc.StatusCode | None, details: str
) -> CRIError:
    """``_status_error`` of a gRPC answer, by its status code."""
    url = endpoint.url
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return RuntimeProtocolError(
            url,
            f"{method} is UNIMPLEMENTED (a gRPC server, but not a CRI runtime, "
            "or one older than CRI v1?)",
        )
    if code == grpc.StatusCode.UNAVAILABLE:
        return RuntimeUnavailableError(url, _unavailable_reason(endpoint, method, details))
    if code == grpc.StatusCode.INTERNAL and "deserializ" in details.lower():
        return RuntimeProtocolError(url, _not_cri_message(method))
    if code == grpc.StatusCode.CANCELLED:
        return CRIError(url, f"{method} was cancelled by the runtime or the connection ({details})")
    name = code.name if code is not None else "UNKNOWN"
    return CRIError(url, f"{method} failed with {name}: {details}")


def _not_cri_message(method: str) -> str:
    return f"its {method} answer is not a valid CRI message"


def _closed_error(kind: str, url: str) -> RuntimeError:
    return RuntimeError(f"{kind} for {url} is closed")


def _events_error(
    endpoint: Endpoint, line_retired: bool, code: grpc.StatusCode | None, details: str
) -> CRIError:
    """The error for a GetContainerEvents stream that failed (UNIMPLEMENTED: no events; an
    answer that is not gRPC, such as an HTML 404, is not that)."""
    if code == grpc.StatusCode.UNIMPLEMENTED and not _NOT_GRPC.search(details):
        return EventsUnsupportedError(
            endpoint.url,
            f"{_EVENTS_METHOD} is UNIMPLEMENTED (containerd before 1.7 has no container events)",
        )
    if code == grpc.StatusCode.CANCELLED and line_retired:
        return RuntimeUnavailableError(
            endpoint.url,
            f"the connection of the {_EVENTS_METHOD} stream was closed (client closed, "
            "or the runtime restarted and the channel was replaced)",
        )
    mapped = _status_error(endpoint, _EVENTS_METHOD, code, details)
    if mapped is None:  # no deadline is set on a stream; a proxy or server may impose one
        return RuntimeDeadlineError(endpoint.url, f"{_EVENTS_METHOD} reached a deadline")
    return mapped


_R = TypeVar("_R")


def _answer(url: str, method: str, result: object, response: type[_R]) -> _R:
    """``result``, the answer of ``method``, when it is a ``response``; else the protocol error
    of an answer that is not CRI."""
    if not isinstance(result, response):
        raise RuntimeProtocolError(url, _not_cri_message(method))
    return result
