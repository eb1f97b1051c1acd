"""Questions about what a runtime supports, asked once (at a command's start-up)."""

from __future__ import annotations

from podcache.cri.client import CRIRuntime
from podcache.errors import EventsUnsupportedError, PodcacheError

__all__ = ["events_unsupported"]


def events_unsupported(endpoint: str, timeout: float) -> EventsUnsupportedError | None:
    """The error when the runtime answers GetContainerEvents UNIMPLEMENTED, else None.

    A runtime that cannot be reached yet is not an answer: None (a subscription keeps trying).
    """
    try:
        with CRIRuntime(endpoint, timeout=timeout) as runtime, runtime.container_events() as s:
            s.open()
    except EventsUnsupportedError as exc:
        return exc
    except PodcacheError:
        return None
    return None
