"""Channels: one gRPC channel to the runtime, its methods, its state, the Version asked on it.

Holds the channel options (the kubelet's: 16 MiB receive limit, reconnect backoff, a
subchannel of its own; but a streamed list message up to ``MAX_STREAMED_MESSAGE_BYTES``), the
methods and how each answer is decoded (list answers read by ``convert``'s reader, or left as
bytes for the asyncio getter) and ``_Line`` (a sync channel and its state reader).
Deliberately not here: when a channel is replaced and how calls on it fail (the callers and
``failures``).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import grpc
from google.protobuf.message import Message

from podcache.cri.endpoint import Endpoint
from podcache.cri.liststream import MAX_STREAMED_MESSAGE_BYTES, STREAMED
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.values import RuntimeVersion
from podcache.cri.wire.methods import METHODS, SERVICE, path

__all__ = ["MAX_RECEIVE_MESSAGE_BYTES", "channel_options"]


MAX_RECEIVE_MESSAGE_BYTES = 16 * 1024 * 1024
"""The largest answer of a unary call (and of one GetContainerEvents message): gRPC's default
and the kubelet's."""


def _message_limits() -> str:
    """The channel's service config: every RuntimeService method receives at most
    ``MAX_RECEIVE_MESSAGE_BYTES`` a message, the two streaming list calls
    ``MAX_STREAMED_MESSAGE_BYTES`` (gRPC takes the smaller of this and the channel's limit,
    which is so the larger one; a method's own entry wins over its service's)."""
    service = SERVICE.strip("/")
    streamed = [{"service": service, "method": twin} for twin, _, _ in STREAMED.values()]
    return json.dumps(
        {
            "methodConfig": [
                {
                    "name": [{"service": service}],
                    "maxResponseMessageBytes": MAX_RECEIVE_MESSAGE_BYTES,
                },
                {"name": streamed, "maxResponseMessageBytes": MAX_STREAMED_MESSAGE_BYTES},
            ]
        }
    )


def channel_options(endpoint: Endpoint) -> list[tuple[str, Any]]:
    """gRPC channel options matching the kubelet's CRI client, but for one streamed list
    message, which may be as large as a whole streamed answer (``liststream``)."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", MAX_STREAMED_MESSAGE_BYTES),
        ("grpc.service_config", _message_limits()),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 3_000),
        # In gRPC core this is the minimum connect timeout (Go: MinConnectTimeout 5 s).
        ("grpc.min_reconnect_backoff_ms", 5_000),
        ("grpc.enable_http_proxy", 0),
        # A subchannel of its own: gRPC otherwise shares one (with its reconnect backoff) among
        # every channel to the same target in the process, so a fresh channel would inherit the
        # backoff it is meant to escape (see ``_usable``).
        ("grpc.use_local_subchannel_pool", 1),
    ]
    if endpoint.path is not None:
        options.append(("grpc.default_authority", "localhost"))
    return options


_READY = grpc.ChannelConnectivity.READY


_BACKING_OFF = grpc.ChannelConnectivity.TRANSIENT_FAILURE


# The same states as gRPC core's numbers, which is what the sync channel's state reader gives.
_CORE_IDLE: int = grpc.ChannelConnectivity.IDLE.value[0]


_CORE_READY: int = _READY.value[0]


_CORE_BACKING_OFF: int = _BACKING_OFF.value[0]


# Each method's request type and how its answer is decoded, from the wire's table
# (``cri.wire.methods``): the list answers are read straight from their bytes (convert's C
# reader), and a PodSandboxStatus by eventwire (labels skipped unread), in gRPC's
# deserializer: bytes that are not a valid message fail the call as any decoding failure does.
# Version and Status are read by protobuf (``CRIRuntime`` gives their every field).
_Methods = Mapping[str, tuple[type[Message], Callable[[bytes], object] | None]]
"""Each method's request type and its answer's decoder (None: the answer's bytes)."""

_PROTOBUF_ANSWERS: dict[str, Callable[[bytes], object]] = {
    "Version": pb.VersionResponse.FromString,
    "Status": pb.StatusResponse.FromString,
}


def _request_type(method: str) -> type[Message]:
    request: type[Message] = getattr(pb, METHODS[method].request)
    return request


def _reader(method: str) -> Callable[[bytes], object]:
    """The decoder of ``method``'s answer: protobuf's, or the table's reader (imported)."""
    if method in _PROTOBUF_ANSWERS:
        return _PROTOBUF_ANSWERS[method]
    named = METHODS[method].reader
    assert named is not None, f"the table names no reader of {method}"
    module, _, function = named.partition(":")
    reader: Callable[[bytes], object] = getattr(importlib.import_module(module), function)
    return reader


_METHODS: dict[str, tuple[type[Message], Callable[[bytes], object]]] = {
    method: (_request_type(method), _reader(method))
    for method in ("Version", "Status", "ListPodSandbox", "ListContainers", "PodSandboxStatus")
}


# AsyncCRIRuntime receives the list answers as bytes: they are read in the converter's thread.
_ASYNC_METHODS: dict[str, tuple[type[Message], Callable[[bytes], object] | None]] = {
    **_METHODS,
    "ListPodSandbox": (pb.ListPodSandboxRequest, None),
    "ListContainers": (pb.ListContainersRequest, None),
}


_EVENTS_METHOD = "GetContainerEvents"


def _state_reader(channel: grpc.Channel) -> Callable[[bool], int]:
    """The sync channel's connectivity reader: ``read(False)`` is gRPC core's state number.

    grpc.aio channels have ``get_state()``; sync channels only have ``subscribe()``, whose
    polling thread (one per channel) makes ``close()`` wait up to 0.2 s for it, races it (a
    thread traceback "Cannot monitor channel state: Channel closed!") and delivers each change
    from a new thread. So this asks the core channel under the sync one directly, as
    ``get_state()`` and that thread do: one C call. Should a gRPC
    release move it, every state reads IDLE: each call then checks the endpoint first (correct,
    a little slower), but a channel in backoff is no longer replaced; a test pins the reader.
    """
    read = getattr(getattr(channel, "_channel", None), "check_connectivity_state", None)
    if read is None:
        return lambda try_to_connect: _CORE_IDLE
    return read  # type: ignore[no-any-return]


class _Line:
    """A sync channel, its methods, its state reader and what was asked on it: the Version,
    and whether the runtime streams lists (``streaming``: None until a streaming list call
    answered, then True, or False once one was UNIMPLEMENTED).

    ``streams``: the streaming list calls (``liststream.STREAMED``), their messages as bytes.
    ``retired``: replaced by a fresh channel, or closed.
    """

    __slots__ = ("channel", "retired", "rpcs", "state", "streaming", "streams", "version")

    def __init__(self, endpoint: Endpoint, methods: _Methods | None = None) -> None:
        self.channel = grpc.insecure_channel(endpoint.target, options=channel_options(endpoint))
        self.rpcs: dict[str, grpc.UnaryUnaryMultiCallable[Any, Any]] = {
            method: self.channel.unary_unary(
                path(method),
                request_serializer=request.SerializeToString,
                response_deserializer=decode,
            )
            for method, (request, decode) in (methods or _METHODS).items()
        }
        self.streams: dict[str, grpc.UnaryStreamMultiCallable[Any, Any]] = {
            twin: self.channel.unary_stream(
                path(twin),
                request_serializer=request.SerializeToString,
                response_deserializer=None,  # each message's bytes, read by the getter
            )
            for twin, request, _ in STREAMED.values()
        }
        self.state = _state_reader(self.channel)
        self.version: RuntimeVersion | None = None
        self.streaming: bool | None = None
        self.retired = False

    def close(self) -> None:
        """Close the channel: calls still waiting on it end with CANCELLED."""
        self.retired = True
        self.channel.close()
