"""``podcache serve --cri-listen``: the read-only CRI socket (docs/architecture.md §10, which
names its modules). ``CRISocketSetup`` wires it into serve.
"""

from __future__ import annotations

import asyncio
from typing import Any

from podcache.cri.endpoint import parse_endpoint
from podcache.cri.wireitems import WireItems
from podcache.serve.crisock.departedstatus import DepartedStatuses
from podcache.serve.crisock.forward import Forwarder
from podcache.serve.crisock.metrics import cri_metrics
from podcache.serve.crisock.routes import READ_ONLY, Route, denial
from podcache.serve.crisock.server import (
    DEFAULT_ACCESS,
    DEFAULT_LIMITS,
    CRILimits,
    CRISocket,
    SocketAccess,
    group_id,
)
from podcache.serve.crisock.statuses import StatusStore
from podcache.serve.crisock.taskevents import TaskEvents
from podcache.serve.eventhub import EventBuffer, EventHub

__all__ = [
    "READ_ONLY",
    "CRILimits",
    "CRISocket",
    "CRISocketSetup",
    "EventBuffer",
    "Route",
    "SocketAccess",
    "denial",
    "group_id",
]


class CRISocketSetup:
    """The socket's parts around one ``AsyncCRIRuntime`` (``runtime``) and the ``hub`` every
    cache of serve follows (the socket's subscribers become its clients): ``start(app)``
    serves ``paths`` from the app's all view; ``stop()`` ends the socket and the hub."""

    def __init__(
        self,
        runtime: Any,
        hub: EventHub,
        paths: list[str],
        *,
        timeout: float,
        wait: float,
        access: SocketAccess = DEFAULT_ACCESS,
        limits: CRILimits = DEFAULT_LIMITS,
        redact_env: bool = False,
        keep_departed: float = 0.0,
    ) -> None:
        self.items = WireItems()
        runtime.keep_wire_items(self.items)
        self.hub = hub
        hub.max_clients = limits.max_event_streams
        self.paths = paths
        self._wait, self._access, self._limits = wait, access, limits
        self._redact_env = redact_env
        self._keep_departed = keep_departed
        self._forwarder = Forwarder(parse_endpoint(runtime.endpoint), timeout=timeout)
        self.socket: CRISocket | None = None

    def start(self, app: Any) -> None:
        """Serve from ``app``'s all view (built now); its metrics gain the socket's."""
        view = app.all_view()
        departed = DepartedStatuses(self._keep_departed) if self._keep_departed > 0 else None
        store = StatusStore(view.cache.cache_period, departed=departed)
        self.hub.attach_statuses(store)
        tasks = TaskEvents(self._forwarder.target, store, settle=view.cache.cache_period)
        socket = self.socket = CRISocket(
            self.paths,
            cache=view.cache,
            items=self.items,
            forwarder=self._forwarder,
            hub=self.hub,
            wait=self._wait,
            access=self._access,
            limits=self._limits,
            redact_env=self._redact_env,
            statuses=store,
        )
        socket.task_events = tasks
        socket.start()
        tasks.start()
        self.hub.watch(view.cache)  # serve's caches read time.monotonic
        # Kept within its period as the default view is (the hub needs the node's revision
        # before an outage: rule 4 of serve.eventhub).
        view.keep_fresh()
        app.metrics.sources.append(lambda: cri_metrics(socket))

    async def stop(self) -> None:
        """Stop the socket (the hub's clients and stream are ended by serve after it)."""
        if self.socket is not None:
            if self.socket.task_events is not None:
                await asyncio.to_thread(self.socket.task_events.stop)
            await self.socket.stop()
        else:
            self._forwarder.close()
