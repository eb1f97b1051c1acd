"""Fault settings of the simulated runtime, changeable while it serves; decides, never serves.

``Faults`` holds what the server consults on every call: added latency, the fraction of list
calls that fail with UNAVAILABLE (drawn from a seeded RNG), a hang switch, RPCs to answer
UNIMPLEMENTED, and malformed items to add to list responses. Every setting is guarded by one
lock, so tests may flip them from any thread while calls are in flight. The server applies
them (see ``server``); this module only decides and waits.

Malformed items are fixed records, one or two per ``Malformed`` kind, each shaped to hit one
rule of the kubelet's pod grouping (see ``Malformed``). They are not part of the population:
``Population.snapshot()`` stays the clean truth and ``malformed_items()`` lists the extras.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import random
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import MappingProxyType

from podcache.cri.proto import api_pb2
from podcache.sim.population import (
    CONTAINER_HASH_ANNOTATION,
    CONTAINER_NAME_LABEL,
    DEFAULT_EPOCH_NS,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
    SimContainer,
    SimContainerState,
    SimSandbox,
    SimSandboxState,
)

__all__ = [
    "LIST_METHODS",
    "MALFORMED_CREATED_AT",
    "MAX_EVENT_REPLAY",
    "RUNTIME_METHODS",
    "STREAM_LIST_METHODS",
    "Faults",
    "Malformed",
    "malformed_items",
    "malformed_uid",
]

RUNTIME_METHODS: frozenset[str] = frozenset(
    api_pb2.DESCRIPTOR.services_by_name["RuntimeService"].methods_by_name
)
"""The RPC names of ``runtime.v1.RuntimeService`` in the project's proto."""

STREAM_LIST_METHODS: frozenset[str] = frozenset({"StreamPodSandboxes", "StreamContainers"})
"""The streaming twins of the list RPCs (KEP-5825); UNIMPLEMENTED for a runtime without them."""

LIST_METHODS: frozenset[str] = frozenset({"ListPodSandbox", "ListContainers"}) | STREAM_LIST_METHODS
"""The RPCs that ``fail_rate`` applies to: the list calls, unary and streaming."""

_EVENT_RATES = ("drop", "duplicate", "reorder")

MAX_EVENT_REPLAY = 1_000
"""The most past events ``event_replay`` may ask for (the server keeps that many)."""

MALFORMED_CREATED_AT = DEFAULT_EPOCH_NS - 7200 * 1_000_000_000
"""The ``created_at`` of every malformed item (2024-12-31T22:00:00Z)."""


class Malformed(enum.StrEnum):
    """Kinds of malformed list items, and what the kubelet's ``GetPods`` does with each.

    Every item is READY or RUNNING, so it is listed with ``all=False`` too. Each kind uses
    its own pod UID (``malformed-<kind>`` as a UUID5), except ``CONTAINER_NO_POD_LABELS``.
    """

    SANDBOX_NO_METADATA = "sandbox-no-metadata"
    """A sandbox without metadata: skipped, no pod made for it."""
    SANDBOX_EMPTY_ID = "sandbox-empty-id"
    """A sandbox with metadata but id "": its pod exists (created_at 0) with no sandbox."""
    CONTAINER_NO_METADATA = "container-no-metadata"
    """A container without metadata: skipped before grouping, no pod made for it."""
    CONTAINER_NO_POD_LABELS = "container-no-pod-labels"
    """A container without the three pod labels: it lands in the pod with ID, name and
    namespace all empty."""
    CONTAINER_INVALID_HASH = "container-invalid-hash"
    """A container whose hash annotation is not hexadecimal: hash 0; its pod (no sandbox
    anywhere) is made from its labels with created_at 0."""
    CONTAINER_NO_IMAGE = "container-no-image"
    """A container without an ImageSpec: skipped after grouping (its pod remains, empty)."""
    CONTAINER_EMPTY_ID = "container-empty-id"
    """A container with id "": skipped after grouping (its pod remains, empty)."""


def _digest(text: str) -> str:
    return hashlib.sha256(f"podcache-sim/malformed/{text}".encode()).hexdigest()


def malformed_uid(kind: Malformed) -> str:
    """The pod UID that a malformed item of this kind carries ("" for no pod labels)."""
    if kind is Malformed.CONTAINER_NO_POD_LABELS:
        return ""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"podcache-sim:malformed-{kind.value}"))


def _malformed_sandbox(kind: Malformed) -> SimSandbox:
    uid = malformed_uid(kind)
    name = f"malformed-{kind.value}"
    return SimSandbox(
        id="" if kind is Malformed.SANDBOX_EMPTY_ID else _digest(kind.value),
        name=name,
        uid=uid,
        namespace="default",
        attempt=0,
        state=SimSandboxState.READY,
        created_at=MALFORMED_CREATED_AT,
        labels=MappingProxyType(
            {POD_NAME_LABEL: name, POD_NAMESPACE_LABEL: "default", POD_UID_LABEL: uid}
        ),
        annotations=MappingProxyType({}),
        has_metadata=kind is not Malformed.SANDBOX_NO_METADATA,
    )


def _malformed_container(kind: Malformed) -> SimContainer:
    uid = malformed_uid(kind)
    pod_name = f"malformed-{kind.value}"
    labels = {CONTAINER_NAME_LABEL: "app"}
    if kind is not Malformed.CONTAINER_NO_POD_LABELS:
        labels |= {POD_NAME_LABEL: pod_name, POD_NAMESPACE_LABEL: "default", POD_UID_LABEL: uid}
    invalid = kind is Malformed.CONTAINER_INVALID_HASH
    image_id = f"sha256:{_digest('image')}"
    return SimContainer(
        id="" if kind is Malformed.CONTAINER_EMPTY_ID else _digest(kind.value),
        pod_sandbox_id=_digest(f"{kind.value}/sandbox"),
        name="app",
        attempt=0,
        state=SimContainerState.RUNNING,
        created_at=MALFORMED_CREATED_AT,
        started_at=MALFORMED_CREATED_AT + 50_000,
        image="registry.example/app:1.2",
        image_ref=image_id,
        image_id=image_id,
        labels=MappingProxyType(labels),
        annotations=MappingProxyType(
            {CONTAINER_HASH_ANNOTATION: "not-hex!" if invalid else "1f2e3d4c"}
        ),
        has_metadata=kind is not Malformed.CONTAINER_NO_METADATA,
        has_image=kind is not Malformed.CONTAINER_NO_IMAGE,
    )


def malformed_items(
    kinds: Iterable[Malformed],
) -> tuple[tuple[SimSandbox, ...], tuple[SimContainer, ...]]:
    """The sandboxes and containers that these kinds add to list responses, in kind order."""
    return _malformed_items(frozenset(Malformed(k) for k in kinds))


@functools.cache
def _malformed_items(
    kinds: frozenset[Malformed],
) -> tuple[tuple[SimSandbox, ...], tuple[SimContainer, ...]]:
    # Cached: the same records each time, so the server's encodings of them are reused.
    chosen = [kind for kind in Malformed if kind in kinds]
    sandboxes = tuple(_malformed_sandbox(k) for k in chosen if k.value.startswith("sandbox-"))
    containers = tuple(_malformed_container(k) for k in chosen if k.value.startswith("container-"))
    return sandboxes, containers


class Faults:
    """Faults the simulated runtime injects; every property may be set at any time, any thread.

    - ``latency``: seconds added to every unary call and streaming list call (after a hang,
      before answering).
    - ``fail_rate``: fraction (0..1) of list calls (ListPodSandbox, ListContainers and their
      streaming twins) answered with UNAVAILABLE, drawn from ``random.Random(seed)``.
    - ``hang()`` / ``release()``: while hanging, every unary call and streaming list call
      blocks until released, the caller's deadline passes or the server stops (then it
      answers UNAVAILABLE).
    - ``unimplemented``: RPC names answered UNIMPLEMENTED (``{"Version"}`` makes the socket
      look like a gRPC server that is not a CRI runtime; ``STREAM_LIST_METHODS`` one without
      CRI list streaming, as containerd 1.6-2.1).
    - ``malformed``: kinds of malformed items added to list responses.
    - Container event streams (GetContainerEvents): ``event_delay`` (seconds each event is held
      before it is sent), ``event_drop_rate`` (fraction never sent), ``event_duplicate_rate``
      (fraction sent twice), ``event_reorder_rate`` (fraction held back and sent after the
      event that follows it), ``event_cut_after`` (a stream ends with UNAVAILABLE after that
      many events; None: never), ``event_replay`` (each new stream first receives this many
      of the events sent before it opened, oldest first, as containerd 2.x replays the
      events it kept to the next subscriber; at most ``MAX_EVENT_REPLAY``).
      ``SimRuntime.cut_event_streams()`` cuts every open stream now, and
      ``unimplemented={"GetContainerEvents"}`` makes the RPC UNIMPLEMENTED (containerd 1.6).
      Draws come from the same seeded RNG as ``fail_rate``.
    - ``bad_ips``: IP strings every sandbox status (PodSandboxStatus answers and events'
      ``pod_sandbox_status``) carries besides its own address: the first is sent as
      ``network.ip`` (the sandbox's own address then leads ``additional_ips``), the rest
      follow it in ``additional_ips``. Hostile text, for tests of what a reader drops.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        latency: float = 0.0,
        fail_rate: float = 0.0,
        unimplemented: Iterable[str] = (),
        malformed: Iterable[Malformed] = (),
        bad_ips: Iterable[str] = (),
    ) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._released = threading.Event()
        self._released.set()
        self._latency = 0.0
        self._fail_rate = 0.0
        self._unimplemented: frozenset[str] = frozenset()
        self._malformed: frozenset[Malformed] = frozenset()
        self._event_delay = 0.0
        self._event_rates = dict.fromkeys(_EVENT_RATES, 0.0)
        self._event_cut_after: int | None = None
        self._bad_ips: tuple[str, ...] = ()
        self._event_replay = 0
        self.latency = latency
        self.fail_rate = fail_rate
        self.unimplemented = frozenset(unimplemented)
        self.malformed = frozenset(malformed)
        self.bad_ips = bad_ips

    @property
    def latency(self) -> float:
        """Seconds added to every unary call."""
        return self._latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        if not seconds >= 0:
            raise ValueError(f"latency must be >= 0 seconds, not {seconds!r}")
        with self._lock:
            self._latency = float(seconds)

    @property
    def fail_rate(self) -> float:
        """The fraction of list calls answered with UNAVAILABLE."""
        return self._fail_rate

    @fail_rate.setter
    def fail_rate(self, rate: float) -> None:
        if not 0 <= rate <= 1:
            raise ValueError(f"fail_rate must be within 0..1, not {rate!r}")
        with self._lock:
            self._fail_rate = float(rate)

    @property
    def unimplemented(self) -> frozenset[str]:
        """RuntimeService RPC names answered UNIMPLEMENTED."""
        return self._unimplemented

    @unimplemented.setter
    def unimplemented(self, names: Iterable[str]) -> None:
        chosen = frozenset((names,) if isinstance(names, str) else names)
        unknown = chosen - RUNTIME_METHODS
        if unknown:
            raise ValueError(
                f"not RuntimeService RPCs: {sorted(unknown)}; known: {sorted(RUNTIME_METHODS)}"
            )
        with self._lock:
            self._unimplemented = chosen

    @property
    def malformed(self) -> frozenset[Malformed]:
        """Kinds of malformed items added to list responses."""
        return self._malformed

    @malformed.setter
    def malformed(self, kinds: Iterable[Malformed]) -> None:
        chosen = frozenset(
            Malformed(kind) for kind in ((kinds,) if isinstance(kinds, str) else kinds)
        )
        with self._lock:
            self._malformed = chosen

    @property
    def bad_ips(self) -> tuple[str, ...]:
        """Hostile IP strings every sandbox status carries (see the class)."""
        return self._bad_ips

    @bad_ips.setter
    def bad_ips(self, texts: Iterable[str]) -> None:
        chosen = tuple((texts,) if isinstance(texts, str) else texts)
        if not all(isinstance(text, str) for text in chosen):
            raise TypeError("bad_ips must be strings")
        with self._lock:
            self._bad_ips = chosen

    # -- event streams ------------------------------------------------------------------------
    @property
    def event_delay(self) -> float:
        """Seconds each container event is held before it is sent."""
        return self._event_delay

    @event_delay.setter
    def event_delay(self, seconds: float) -> None:
        if not seconds >= 0:
            raise ValueError(f"event_delay must be >= 0 seconds, not {seconds!r}")
        with self._lock:
            self._event_delay = float(seconds)

    @property
    def event_drop_rate(self) -> float:
        """Fraction of container events never sent."""
        return self._event_rates["drop"]

    @event_drop_rate.setter
    def event_drop_rate(self, rate: float) -> None:
        self._set_event_rate("drop", rate)

    @property
    def event_duplicate_rate(self) -> float:
        """Fraction of container events sent twice."""
        return self._event_rates["duplicate"]

    @event_duplicate_rate.setter
    def event_duplicate_rate(self, rate: float) -> None:
        self._set_event_rate("duplicate", rate)

    @property
    def event_reorder_rate(self) -> float:
        """Fraction of container events held back and sent after the next one."""
        return self._event_rates["reorder"]

    @event_reorder_rate.setter
    def event_reorder_rate(self, rate: float) -> None:
        self._set_event_rate("reorder", rate)

    @property
    def event_cut_after(self) -> int | None:
        """Each stream ends with UNAVAILABLE after this many events (None: never)."""
        return self._event_cut_after

    @event_cut_after.setter
    def event_cut_after(self, count: int | None) -> None:
        if count is not None and (isinstance(count, bool) or count < 0):
            raise ValueError(f"event_cut_after must be None or >= 0, not {count!r}")
        with self._lock:
            self._event_cut_after = count

    @property
    def event_replay(self) -> int:
        """Past events each new stream receives first (0: none)."""
        return self._event_replay

    @event_replay.setter
    def event_replay(self, count: int) -> None:
        if isinstance(count, bool) or not 0 <= count <= MAX_EVENT_REPLAY:
            raise ValueError(f"event_replay must be within 0..{MAX_EVENT_REPLAY}, not {count!r}")
        with self._lock:
            self._event_replay = int(count)

    def _set_event_rate(self, name: str, rate: float) -> None:
        if not 0 <= rate <= 1:
            raise ValueError(f"event_{name}_rate must be within 0..1, not {rate!r}")
        with self._lock:
            self._event_rates[name] = float(rate)

    def roll_event(self, name: str) -> bool:
        """Draw once for an event fault (``drop``, ``duplicate``, ``reorder``)."""
        with self._lock:
            rate = self._event_rates[name]
            return rate > 0 and self._rng.random() < rate

    def malformed_items(self) -> tuple[tuple[SimSandbox, ...], tuple[SimContainer, ...]]:
        """The sandboxes and containers the current ``malformed`` setting adds to lists."""
        return malformed_items(self._malformed)

    # -- hang ---------------------------------------------------------------------------------
    @property
    def hanging(self) -> bool:
        """Whether unary calls currently block."""
        return not self._released.is_set()

    def hang(self) -> None:
        """Make every later (and every waiting) unary call block until ``release()``."""
        self._released.clear()

    def release(self) -> None:
        """Let blocked calls go on; later calls no longer block."""
        self._released.set()

    @contextmanager
    def hung(self) -> Iterator[None]:
        """``hang()`` for the duration of a ``with`` block, then ``release()``."""
        self.hang()
        try:
            yield
        finally:
            self.release()

    def wait_while_hanging(self, give_up: Callable[[], bool], poll: float = 0.05) -> bool:
        """Block while hanging; True once released, False as soon as ``give_up()`` is true."""
        while not self._released.wait(poll):
            if give_up():
                return False
        return True

    # -- failures -----------------------------------------------------------------------------
    def roll_failure(self) -> bool:
        """Draw once: True for a call that must fail (probability ``fail_rate``)."""
        with self._lock:
            rate = self._fail_rate
            if rate <= 0:
                return False
            return self._rng.random() < rate
