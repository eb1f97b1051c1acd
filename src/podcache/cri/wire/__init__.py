"""The CRI client's wire as bytes: HTTP/2 frames (``frames``), HPACK (``headers``), gRPC's
framing and status codes (``grpcwire``), protobuf's varints and the few messages written by
hand (``protobuf``), and the one table of the CRI methods the client calls (``methods``).

Rules (docs/architecture.md §2, §4 "One wire, two drivers"): no I/O, no state but an HPACK
decoder's table, no grpc or protobuf import, nothing of podcache imported; a status code here
is gRPC's number (``grpcwire``). Every malformed input is a ``ValueError`` that names what
was wrong (``frames.FrameError``, ``headers.HPACKError``, ``protobuf.ProtobufError``).
"""
