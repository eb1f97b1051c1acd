"""``SimRuntime``: population, faults, churn and server behind one start/stop; no logic of its own.

It owns the socket path (a fresh temporary one by default, removed on stop) and the order of
start and shutdown. It holds no pod logic (``population``), no RPC logic (``server``) and no
fault logic (``faults``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from podcache.sim.addresses import DEFAULT_POD_CIDR
from podcache.sim.churn import ChurnDriver, ChurnPause
from podcache.sim.counters import CallCounters
from podcache.sim.faults import STREAM_LIST_METHODS, Faults, Malformed
from podcache.sim.flavor import CONTAINERD, Flavor, flavor_named
from podcache.sim.population import DEFAULT_HOST_NETWORK, DEFAULT_NAMESPACES, Population, SimEvent
from podcache.sim.server import DEFAULT_STREAM_ITEMS, SimServer, StreamChunking
from podcache.sim.taskevents import envelope
from podcache.unixsocket import BoundSocket, claim_socket_path

__all__ = ["SimRuntime"]


def _address(
    socket: str | os.PathLike[str] | None, tcp: bool
) -> tuple[str, int | None, str | None]:
    """(host, port, path) of where to listen: a TCP host and port, or a unix socket's absolute
    path, or neither (a temporary socket, chosen at start)."""
    text = os.fspath(socket) if socket is not None else None
    if tcp and text is not None:
        raise ValueError("give either socket= or tcp=True, not both")
    if tcp:
        text = "tcp://127.0.0.1:0"
    if text is not None and text.startswith("tcp://"):
        host, port = _tcp_address(text)
        return host, port, None
    if text is not None:
        path = text.removeprefix("unix://")
        if not path:
            raise ValueError(f"malformed socket path {text!r}")
        return "", None, os.path.abspath(path)
    return "", None, None


def _tcp_address(text: str) -> tuple[str, int]:
    """The host and port of ``tcp://HOST:PORT`` (a ValueError naming ``text`` otherwise)."""
    host, sep, port = text.removeprefix("tcp://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"malformed TCP address {text!r}: expected tcp://HOST:PORT")
    return host, int(port)


def _refused(unimplemented: Iterable[str], streaming: bool) -> frozenset[str]:
    """The methods answered UNIMPLEMENTED: those named, and the streaming list calls of a
    runtime that does not stream lists."""
    return frozenset(unimplemented) | (frozenset() if streaming else STREAM_LIST_METHODS)


def _chunking(flavor: Flavor, seed: int, stream_items: int) -> StreamChunking:
    """How ``flavor`` cuts a streamed list: CRI-O by a fixed count, containerd by draws."""
    fixed = flavor.fixed_stream_items
    if fixed is not None:
        return StreamChunking(seed, fixed, by_count=True)
    return StreamChunking(seed, stream_items)


class SimRuntime:
    """A simulated CRI runtime: a real gRPC server over a churning population of pods.

    ``with SimRuntime(pods=50) as sim: CRIRuntime(sim.endpoint)...``

    - ``socket``: a unix socket path (``/path`` or ``unix:///path``), ``tcp://HOST:PORT``
      (loopback; port 0 picks a free one), or None for a fresh temporary socket path.
      ``tcp=True`` is short for ``tcp://127.0.0.1:0``. A stale socket file at the path is
      replaced; a socket something listens on is an error.
    - ``churn``: pods replaced per second by a background thread (0: none); see
      ``pause_churn()`` and ``churn_step()`` for deterministic tests.
    - ``latency``, ``fail_rate``, ``malformed``, ``unimplemented``: the initial ``faults``
      (all changeable later).
    - ``pod_cidr``: the network pods get addresses from (freed ones reused first);
      ``host_network``: the fraction of pods on the host network (no address of their own);
      ``bad_ips``: hostile IP strings every sandbox status carries (``Faults.bad_ips``).
    - ``clock``: nanoseconds since the epoch for new records; the wall clock by default, so
      ages look real (pass ``podcache.sim.LogicalClock()`` to fix timestamps by the seed too).
    - ``streaming``: whether it has CRI list streaming (KEP-5825: StreamPodSandboxes and
      StreamContainers); False makes both UNIMPLEMENTED (in ``faults.unimplemented``), as
      containerd 1.6-2.1. ``stream_items``: the most items of one streamed message; each
      message's count is drawn by seed (``chunking``, settable while running).
    - ``annotation_bytes``: a ``last-applied-configuration`` annotation that long on every
      sandbox and container (``Population``): 1,000 pods at 16 KiB pass gRPC's 16 MiB.
    - ``flavor``: the runtime it behaves like, ``"containerd"`` (the default) or ``"crio"``
      (``podcache.sim.flavor``: CRI-O's chunking by 3,000 items, no event for a removed pod,
      the sandbox label, its status answers and events' statuses, its name and version);
      ``pod_events=False``: GetContainerEvents ends at once with OK and no event (CRI-O's
      default ``enable_pod_events = false``), and CRI-O's sandbox answers lose their
      containers' statuses and time.

    A SimRuntime starts once; ``stop()`` is idempotent and leaves no socket file or thread.
    """

    def __init__(
        self,
        pods: int = 100,
        *,
        seed: int = 0,
        churn: float = 0.0,
        socket: str | os.PathLike[str] | None = None,
        tcp: bool = False,
        namespaces: Sequence[str] = DEFAULT_NAMESPACES,
        latency: float = 0.0,
        fail_rate: float = 0.0,
        malformed: Iterable[Malformed] = (),
        unimplemented: Iterable[str] = (),
        clock: Callable[[], int] | None = time.time_ns,
        max_workers: int = 32,
        pod_cidr: str = DEFAULT_POD_CIDR,
        host_network: float = DEFAULT_HOST_NETWORK,
        bad_ips: Iterable[str] = (),
        streaming: bool = True,
        stream_items: int = DEFAULT_STREAM_ITEMS,
        annotation_bytes: int = 0,
        flavor: Flavor | str = CONTAINERD,
        pod_events: bool = True,
    ) -> None:
        self.flavor = flavor if isinstance(flavor, Flavor) else flavor_named(flavor)
        """The runtime it behaves like (``podcache.sim.flavor``)."""
        self.pod_events = pod_events
        self.population = Population(
            pods,
            seed=seed,
            namespaces=namespaces,
            clock=clock,
            pod_cidr=pod_cidr,
            host_network=host_network,
            annotation_bytes=annotation_bytes,
            sandbox_labels=self.flavor.sandbox_labels(),
        )
        """The simulated pods; read ``population.snapshot()`` for the truth."""
        self.faults = Faults(
            seed=seed,
            latency=latency,
            fail_rate=fail_rate,
            malformed=malformed,
            unimplemented=_refused(unimplemented, streaming),
            bad_ips=bad_ips,
        )
        """Faults injected into calls; change them at any time."""
        self.chunking = _chunking(self.flavor, seed, stream_items)
        """How streamed list answers are cut into messages (``max_items`` settable)."""
        self._init_serving(churn, max_workers, _address(socket, tcp))

    def _init_serving(
        self, churn: float, max_workers: int, address: tuple[str, int | None, str | None]
    ) -> None:
        """How it runs: ``churn`` pods replaced a second, ``max_workers`` server threads, where
        it will listen (``_address``), and its server's state (none yet, new)."""
        self._churn = ChurnDriver(self.population, churn)
        self._max_workers = max_workers
        self._server: SimServer | None = None
        self._tempdir: str | None = None
        self._lock = threading.Lock()
        self._state = "new"
        self._host, self._port, self._path = address
        self._bound: BoundSocket | None = None

    # -- addresses ----------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        """The CRI endpoint: ``unix:///abs/path`` or ``tcp://127.0.0.1:PORT`` (the bound port)."""
        if self._path is not None:
            return f"unix://{self._path}"
        if not self._port:  # a temporary socket, or port 0, is chosen by start()
            raise RuntimeError("the endpoint is known once the runtime has started")
        return f"tcp://{self._host}:{self._port}"

    @property
    def target(self) -> str:
        """The address for ``grpc.insecure_channel``: ``unix:///abs/path`` or ``HOST:PORT``."""
        if self._path is not None:
            return f"unix://{self._path}"
        return self.endpoint.removeprefix("tcp://")

    @property
    def socket_path(self) -> str | None:
        """The unix socket's path (None over TCP, and before start for a temporary one)."""
        return self._path

    @property
    def port(self) -> int | None:
        """The bound TCP port (None over a unix socket)."""
        return self._port

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Between a successful ``start()`` and ``stop()``."""
        return self._state == "running"

    def start(self) -> SimRuntime:
        """Bind, serve and start churning; returns self. Errors leave nothing behind."""
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"a SimRuntime starts once (it is {self._state})")
            self._state = "starting"
            try:
                if self._path is None and self._port is None:
                    self._tempdir = tempfile.mkdtemp(prefix="podcache-sim-")
                    self._path = os.path.join(self._tempdir, "sim.sock")
                if self._path is not None:
                    claim_socket_path(self._path)
                    address = f"unix:{self._path}"
                else:
                    address = f"{self._host}:{self._port}"
                self._server = SimServer(
                    self.population,
                    self.faults,
                    address,
                    max_workers=self._max_workers,
                    chunking=self.chunking,
                    flavor=self.flavor,
                    pod_events=self.pod_events,
                )
                if self._path is None:
                    self._port = self._server.port
                else:
                    self._bound = BoundSocket.record(self._path)
                self._server.start()
                self._churn.start()
            except BaseException:
                self._state = "stopping"
                self._teardown(0.0)
                self._state = "stopped"
                raise
            self._state = "running"
            return self

    def stop(self, grace: float = 0.5) -> None:
        """Stop churn and serving (in-flight calls get ``grace`` s), remove the socket."""
        with self._lock:
            if self._state in ("stopped", "new"):
                self._state = "stopped"
                return
            self._state = "stopping"
            self._teardown(grace)
            self._state = "stopped"

    def _teardown(self, grace: float) -> None:
        self._churn.stop()
        if self._server is not None:
            self._server.stop(grace)
        if self._bound is not None:
            self._bound.remove()  # only the socket it bound (unixsocket rule 3)
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)

    def __enter__(self) -> SimRuntime:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self._path if self._port is None else f"{self._host}:{self._port}"
        return f"<SimRuntime {self._state} {len(self.population)} pods at {where}>"

    # -- churn --------------------------------------------------------------------------------
    @property
    def churn(self) -> float:
        """Pods replaced per second by the background thread; settable while running."""
        return self._churn.rate

    @churn.setter
    def churn(self, rate: float) -> None:
        self._churn.rate = rate

    def send_events(self, events: Sequence[SimEvent]) -> int:
        """Send ``events`` to every open GetContainerEvents stream as they are, whether or not
        the population holds what they name (a hostile or confused runtime, for fault tests
        and benchmarks: events are only hints); returns how many streams got them."""
        server = self._server
        if server is None:
            return 0
        return server.servicer.send_events(events)

    def send_task_events(self, topic: str, container_ids: Sequence[str]) -> int:
        """Send containerd's own event ``topic`` (``/containers/update``, ``/tasks/oom``)
        naming each of ``container_ids`` to every open Events subscription; how many there
        are (0 for a flavour without the service)."""
        task_events = None if self._server is None else self._server.task_events
        if task_events is None:
            return 0
        return task_events.send([envelope(topic, each) for each in container_ids])

    @property
    def task_event_subscribers(self) -> int:
        """Open subscriptions to containerd's own Events service."""
        task_events = None if self._server is None else self._server.task_events
        return 0 if task_events is None else task_events.subscribers

    def pause_churn(self) -> ChurnPause:
        """Hold background churn now, until ``resume()`` on the result or the end of ``with``.

        Returns once a step in progress has finished: from then on the population changes only
        by explicit calls (``churn_step`` or the population's own methods).
        """
        return ChurnPause(self._churn)

    def churn_step(self, count: int = 1) -> list[SimEvent]:
        """Take ``count`` churn steps now (even while paused); returns their events."""
        events: list[SimEvent] = []
        unsubscribe = self.population.subscribe(events.extend)
        try:
            self._churn.step(count)
        finally:
            unsubscribe()
        return events

    # -- what was asked -----------------------------------------------------------------------
    def call_counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """Calls and answer bytes so far per list and status RPC, split filtered/unfiltered
        (``podcache.sim.counters``): ``{method: {"filtered"|"unfiltered": {"calls", "bytes"}}}``.
        All zero before start."""
        return self._counters().snapshot()

    def stream_messages(self) -> dict[str, int]:
        """Messages sent so far per streaming list RPC (``{"StreamContainers": 40, ...}``);
        all zero before start. A streamed call counts once in ``call_counts``."""
        return self._counters().stream_messages()

    def unimplemented_calls(self) -> dict[str, int]:
        """Calls of methods the sim does not implement, by gRPC path (each answered
        UNIMPLEMENTED): what reached the runtime that it has no handler for."""
        return self._counters().unimplemented()

    def reset_call_counts(self) -> None:
        """Set the call counts back to zero (a benchmark's setup is not its measurement)."""
        self._counters().reset()

    def _counters(self) -> CallCounters:
        """The server's call counters (new ones, all zero, before start)."""
        return CallCounters() if self._server is None else self._server.servicer.counters

    def calls(self) -> dict[str, int]:
        """Calls so far per list and status RPC, filtered and unfiltered together
        (``{"PodSandboxStatus": 12, ...}``)."""
        return {
            method: sum(kind["calls"] for kind in kinds.values())
            for method, kinds in self.call_counts().items()
        }

    # -- events -------------------------------------------------------------------------------
    @property
    def event_subscribers(self) -> int:
        """How many GetContainerEvents streams are open."""
        return self._server.servicer.subscriber_count if self._server is not None else 0

    @property
    def event_calls(self) -> int:
        """How many GetContainerEvents calls were made (each subscription attempt is one)."""
        return self._server.servicer.event_calls if self._server is not None else 0

    def cut_event_streams(self) -> int:
        """End every open GetContainerEvents stream now with UNAVAILABLE (a fault: the stream
        cut mid-way); returns how many were open. Events already queued are sent first."""
        return self._server.servicer.cut() if self._server is not None else 0

    def close_event_streams(self) -> int:
        """End every open GetContainerEvents stream the way containerd 2.x closes a
        subscription itself: UNAVAILABLE "container events subscription closed by server" (not
        a fault: 1.7 ends the same case with OK); returns how many were open."""
        return self._server.servicer.cut(by_server=True) if self._server is not None else 0

    def wait_for_event_subscribers(self, count: int = 1, timeout: float = 5.0) -> None:
        """Block until at least ``count`` event streams are open (TimeoutError after timeout).

        A client's stream call returns before the server has registered it; changes made in
        between are not streamed to it. Tests wait for this before changing the population.
        """
        deadline = time.monotonic() + timeout
        while self.event_subscribers < count:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{self.event_subscribers} event streams open after {timeout} s, "
                    f"expected {count}"
                )
            time.sleep(0.005)
