"""The CRI client's wire as bytes: HTTP/2 frames (``frames``), HPACK (``headers``), gRPC's
framing and status codes (``grpcwire``), protobuf's varints and the few messages written by
hand (``protobuf``), and the one table of the CRI methods the client calls (``methods``).

Rules: no I/O, no state but an HPACK decoder's table, no grpc or protobuf import, nothing of
podcache imported (docs/architecture.md §2): one connection core (``cri.h2core``) drives it
for the pooled connection (``cri.http2``) and the one-shot read (``cri.oneshot``), and grpcio's
channels (``cri.channels``) take their paths from its table. A status code here is gRPC's
number (``grpcwire``); ``grpc.StatusCode`` is mapped only in ``h2core.status_code``. Every
malformed input is a ``ValueError`` that names what was wrong (``frames.FrameError``,
``headers.HPACKError``, ``protobuf.ProtobufError``).
"""
