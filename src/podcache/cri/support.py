"""Questions about what a runtime supports, asked once (at a command's start-up)."""

from __future__ import annotations

import threading

from podcache.cri.client import CRIRuntime
from podcache.cri.eventstream import ContainerEventStream
from podcache.errors import EventsUnsupportedError, PodcacheError

__all__ = ["SETTLE_SECONDS", "events_unsupported"]

SETTLE_SECONDS = 0.25
"""How long the check reads a stream that opened, for an end that came after the stream was
confirmed open (a loaded machine may read CRI-O's at-once end past ``CONFIRM_SECONDS``)."""


def events_unsupported(endpoint: str, timeout: float) -> EventsUnsupportedError | None:
    """The error when the runtime sends no container events (GetContainerEvents UNIMPLEMENTED,
    or a stream that ends at once with OK: CRI-O's default), else None.

    A runtime that cannot be reached yet is not an answer: None (a subscription keeps trying).
    """
    try:
        with CRIRuntime(endpoint, timeout=timeout) as runtime, runtime.container_events() as s:
            s.open()
            return _ended_at_once(s)
    except EventsUnsupportedError as exc:
        return exc
    except PodcacheError:
        return None


def _ended_at_once(stream: ContainerEventStream) -> EventsUnsupportedError | None:
    """Read ``stream`` for ``SETTLE_SECONDS`` (in a thread; closing it ends the read): its
    end as a runtime without events, else None (an event, or nothing yet, is a live stream)."""
    ended: list[EventsUnsupportedError] = []

    def read() -> None:
        try:
            next(stream, None)
        except EventsUnsupportedError as exc:
            ended.append(exc)
        except PodcacheError:
            pass

    reader = threading.Thread(target=read, name="podcache-events-check", daemon=True)
    reader.start()
    reader.join(SETTLE_SECONDS)
    stream.close()
    reader.join()
    return ended[0] if ended else None
