"""Container events as the runtime streams them (CRI ``GetContainerEvents``): values, no I/O.

A ``ContainerEvent`` says that something happened to one container or sandbox: it was created,
started, stopped or deleted. podcache uses events only as a hint that the pod list changed (the
cache then refreshes); the list itself always comes from a listing, never from replaying
events, so a lost, repeated or reordered event can delay a change by at most the cache period
but never make the cache wrong.
"""

from __future__ import annotations

import enum

import msgspec

__all__ = ["MAX_ID_LENGTH", "ContainerEvent", "ContainerEventType"]

MAX_ID_LENGTH = 256
"""Longest container or sandbox ID an event may carry (containerd's are 64 hex digits)."""


class ContainerEventType(enum.StrEnum):
    """What happened: the CRI ``ContainerEventType`` values, in lower case."""

    CREATED = "created"
    STARTED = "started"
    STOPPED = "stopped"
    DELETED = "deleted"


class ContainerEvent(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One change the runtime reported.

    ``container_id``: the container's bare ID, or the sandbox's for a sandbox event (as
    containerd reports them). ``pod_sandbox_id``: the sandbox it belongs to ("" when the runtime
    sent no sandbox status). ``created_at``: when the runtime made the event, in nanoseconds
    since the epoch.
    """

    type: ContainerEventType
    container_id: str
    pod_sandbox_id: str = ""
    created_at: int = 0
