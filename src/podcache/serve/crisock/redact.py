"""``serve --cri-redact-env``: environment values taken out of ContainerStatus answers; pure
(docs/architecture.md §10 rule 4). Rules:

1. **Values, not names.** In each ``info`` value that is a JSON object, at any depth: every
   string ``NAME=value`` of a list under ``env`` becomes ``NAME=<redacted>``, and every
   ``{"key": NAME, "value": ...}`` of a list under ``envs`` gets the value ``<redacted>``, an
   empty or missing one too. A string without ``=`` is a name alone and stays.
2. **Nothing else changes.** Only the ``info`` map (field 2) is decoded; every other field,
   and an ``info`` value with nothing to redact, keeps the runtime's bytes in its order; one
   that changed is the same JSON encoded again (compact, keys in their order).
3. **An ``info`` value that is not a JSON object is passed as it is.**
4. **An answer that cannot be read is refused** (``ValueError`` naming what was malformed).

Not redacted: ``PodSandboxStatus``'s info (the pause container's spec, no environment of the
pod's).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from podcache.cri.wire.methods import path
from podcache.cri.wire.protobuf import ProtobufError, read_varint, varint

__all__ = ["CONTAINER_STATUS", "REDACTED", "answer_rewrites", "redact_container_status"]

CONTAINER_STATUS = path("ContainerStatus")

REDACTED = "<redacted>"
"""What stands for each value taken out."""

_INFO_FIELD = 2  # ContainerStatusResponse.info: map<string, string>
_KEY_FIELD, _VALUE_FIELD = 1, 2  # a map entry's fields
_LEN, _VARINT, _I64, _I32 = 2, 0, 1, 5  # wire types


def answer_rewrites(*, redact_env: bool) -> Mapping[str, Callable[[bytes], bytes]]:
    """The forwarded answers rewritten before they are sent, by method path."""
    return {CONTAINER_STATUS: redact_container_status} if redact_env else {}


def redact_container_status(answer: bytes) -> bytes:
    """``answer`` (a ContainerStatusResponse's bytes) with its environment values redacted
    (the rules above); ``answer`` itself when nothing was to redact."""
    parts: list[bytes] = []
    changed = False
    for start, end, field, body in _fields(answer):
        if field == _INFO_FIELD and body is not None:
            entry = _redacted_entry(answer[body:end])
            if entry is not None:
                parts.append(_string_field(_INFO_FIELD, entry))
                changed = True
                continue
        parts.append(answer[start:end])
    return b"".join(parts) if changed else answer


def _redacted_entry(entry: bytes) -> bytes | None:
    """A map entry's bytes with its value redacted; None when its value is unchanged."""
    key = value = b""
    for _, end, field, body in _fields(entry):
        if body is None:
            continue
        if field == _KEY_FIELD:
            key = entry[body:end]
        elif field == _VALUE_FIELD:
            value = entry[body:end]
    redacted = _redacted_json(value)
    if redacted is None:
        return None
    return _string_field(_KEY_FIELD, key) + _string_field(_VALUE_FIELD, redacted)


def _redacted_json(value: bytes) -> bytes | None:
    try:
        document = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None  # rule 3
    if not isinstance(document, dict) or not _redact(document):
        return None
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def _redact(node: Any) -> bool:
    """Redacts the environment lists below ``node`` in place; whether any value changed."""
    changed = False
    if isinstance(node, dict):
        for key, child in node.items():
            if key == "env" and isinstance(child, list):
                changed |= _redact_assignments(child)
            elif key == "envs" and isinstance(child, list):
                changed |= _redact_pairs(child)
            else:
                changed |= _redact(child)
    elif isinstance(node, list):
        for child in node:
            changed |= _redact(child)
    return changed


def _redact_assignments(env: list[Any]) -> bool:
    """``NAME=value`` strings (the OCI spec's ``process.env``)."""
    changed = False
    for i, item in enumerate(env):
        if isinstance(item, str) and "=" in item:
            name = item.partition("=")[0]
            env[i] = f"{name}={REDACTED}"
            changed = True
    return changed


def _redact_pairs(envs: list[Any]) -> bool:
    """``{"key": NAME, "value": value}`` objects (the CRI ``KeyValue``; a value containerd left
    out as empty gets one too: an answer does not tell which values were empty)."""
    changed = False
    for item in envs:
        if isinstance(item, dict) and "key" in item:
            item["value"] = REDACTED
            changed = True
    return changed


# -- the protobuf wire, as far as this needs it -----------------------------------------------


def _fields(data: bytes) -> list[tuple[int, int, int, int | None]]:
    """Each field of one message: (start, end, number, where a length-delimited body starts,
    else None). Raises ``ValueError`` on a truncated or unknown encoding (rule 4)."""
    found = []
    pos = 0
    while pos < len(data):
        start = pos
        tag, pos = _read_varint(data, pos)
        field, wire_type = tag >> 3, tag & 7
        body: int | None = None
        if wire_type == _VARINT:
            _, pos = _read_varint(data, pos)
        elif wire_type == _LEN:
            length, body = _read_varint(data, pos)
            pos = body + length
        elif wire_type in (_I64, _I32):
            pos += 8 if wire_type == _I64 else 4
        else:
            raise ValueError(f"ContainerStatus answer: wire type {wire_type} at byte {start}")
        if pos > len(data) or field == 0:
            raise ValueError(f"ContainerStatus answer: field at byte {start} is malformed")
        found.append((start, pos, field, body))
    return found


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    try:
        return read_varint(data, pos)
    except ProtobufError:
        stopped = min(len(data), pos + 10)  # where a varint's reading ends, at most 10 bytes
        raise ValueError(f"ContainerStatus answer: varint truncated at byte {stopped}") from None


def _tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def _string_field(field: int, value: bytes) -> bytes:
    return _tag(field, _LEN) + varint(len(value)) + value
