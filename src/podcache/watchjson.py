"""The watch stream's lines (NDJSON), shared by ``GET /pods?watch=1`` and
``podcache events -o json`` so both print the very same bytes; encoding only, no I/O.

Each line is one JSON object and a newline::

    {"type":"ADDED|MODIFIED|DELETED","revision":7,"object":{...the pod as in /pods...}}
    {"type":"BOOKMARK","revision":7}        # every change up to revision 7 has been sent
    {"type":"ERROR","code":410,"message":"..."}   # the last line of a stream that must resync
"""

from __future__ import annotations

from typing import Any

import msgspec

from podcache.cache.changes import PodChange
from podcache.jsonview import pod_to_json

__all__ = [
    "CONTENT_TYPE",
    "bookmark_line",
    "change_document",
    "change_line",
    "error_line",
]

CONTENT_TYPE = "application/x-ndjson"

_encode = msgspec.json.Encoder().encode


def change_document(change: PodChange) -> dict[str, Any]:
    """A change as its JSON object: type, revision, and the pod as ``object``."""
    return {
        "type": change.type.value,
        "revision": change.revision,
        "object": pod_to_json(change.pod),
    }


def change_line(change: PodChange) -> bytes:
    """One change's line."""
    return _encode(change_document(change)) + b"\n"


def bookmark_line(revision: int) -> bytes:
    """A bookmark: the stream has sent every change up to ``revision``."""
    return b'{"type":"BOOKMARK","revision":%d}\n' % revision


def error_line(code: int, message: str) -> bytes:
    """The line that ends a stream on an error (410: list again, then watch)."""
    return _encode({"type": "ERROR", "code": code, "message": message}) + b"\n"
