"""The runtime's answers as values: ``RuntimeVersion``, ``RuntimeStatus`` and its conditions.

Holds the three frozen dataclasses the getters return from Version and Status, and how each
is built from its protobuf answer (an empty Version field is a protocol error: not a CRI
runtime). Deliberately not here: making the calls (the getters) and the pods (``convert``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec

from podcache.errors import (
    RuntimeProtocolError,
)

if TYPE_CHECKING:  # the answers' types only: building a value imports no protobuf
    from podcache.cri.proto import api_pb2 as pb

__all__ = ["RuntimeCondition", "RuntimeStatus", "RuntimeVersion"]


class RuntimeVersion(msgspec.Struct, frozen=True):
    """The runtime's answer to Version (all four fields are non-empty)."""

    version: str
    runtime_name: str
    runtime_version: str
    runtime_api_version: str


class RuntimeCondition(msgspec.Struct, frozen=True):
    """One runtime condition from Status (``RuntimeReady``, ``NetworkReady``, ...)."""

    type: str
    status: bool
    reason: str = ""
    message: str = ""


class RuntimeStatus(msgspec.Struct, frozen=True):
    """The runtime's answer to Status: its conditions and (when verbose) its info map."""

    conditions: tuple[RuntimeCondition, ...]
    info: Mapping[str, str] = msgspec.field(default_factory=dict)

    def condition(self, type: str) -> RuntimeCondition | None:
        """The condition of this type, or None when the runtime did not report it."""
        for condition in self.conditions:
            if condition.type == type:
                return condition
        return None

    @property
    def ready(self) -> bool:
        """True when both RuntimeReady and NetworkReady are reported and true."""
        return all(
            (c := self.condition(t)) is not None and c.status
            for t in ("RuntimeReady", "NetworkReady")
        )


def _version_from(url: str, response: pb.VersionResponse | RuntimeVersion) -> RuntimeVersion:
    version = RuntimeVersion(
        response.version,
        response.runtime_name,
        response.runtime_version,
        response.runtime_api_version,
    )
    empty = [name for name in RuntimeVersion.__struct_fields__ if not getattr(version, name)]
    if empty:
        raise RuntimeProtocolError(
            url, f"its Version answer has an empty {', '.join(empty)} (not a CRI runtime?)"
        )
    return version


def _status_from(response: pb.StatusResponse) -> RuntimeStatus:
    return RuntimeStatus(
        tuple(
            RuntimeCondition(c.type, c.status, c.reason, c.message)
            for c in response.status.conditions
        ),
        dict(response.info),
    )
