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
from typing import Any, Generic, Self, TypeVar, overload

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


_T = TypeVar("_T")


class _Setting(Generic[_T]):
    """A setting of ``Faults``: read without the lock (from ``_<name>``), set under it once
    ``check(name, value)`` made the value (raising what is wrong with it, naming the setting)."""

    def __init__(self, check: Callable[[str, Any], _T], doc: str) -> None:
        self._check = check
        self.__doc__ = doc
        self._name = self._slot = "?"

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name, self._slot = name, f"_{name}"

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, instance: Faults, owner: type[Any]) -> _T: ...
    def __get__(self, instance: Faults | None, owner: type[Any]) -> Self | _T:
        if instance is None:
            return self
        value: _T = getattr(instance, self._slot)
        return value

    def __set__(self, instance: Faults, value: Any) -> None:
        checked = self._check(self._name, value)
        with instance._lock:
            setattr(instance, self._slot, checked)


def _seconds(name: str, seconds: Any) -> float:
    if not seconds >= 0:
        raise ValueError(f"{name} must be >= 0 seconds, not {seconds!r}")
    return float(seconds)


def _fraction(name: str, rate: Any) -> float:
    if not 0 <= rate <= 1:
        raise ValueError(f"{name} must be within 0..1, not {rate!r}")
    return float(rate)


def _rpc_names(name: str, names: Iterable[str]) -> frozenset[str]:
    chosen = frozenset((names,) if isinstance(names, str) else names)
    unknown = chosen - RUNTIME_METHODS
    if unknown:
        raise ValueError(
            f"not RuntimeService RPCs: {sorted(unknown)}; known: {sorted(RUNTIME_METHODS)}"
        )
    return chosen


def _malformed_kinds(name: str, kinds: Iterable[Malformed]) -> frozenset[Malformed]:
    return frozenset(Malformed(kind) for kind in ((kinds,) if isinstance(kinds, str) else kinds))


def _texts(name: str, texts: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple((texts,) if isinstance(texts, str) else texts)
    if not all(isinstance(text, str) for text in chosen):
        raise TypeError(f"{name} must be strings")
    return chosen


def _cut_after(name: str, count: int | None) -> int | None:
    if count is not None and (isinstance(count, bool) or count < 0):
        raise ValueError(f"{name} must be None or >= 0, not {count!r}")
    return count


def _replay(name: str, count: int) -> int:
    if isinstance(count, bool) or not 0 <= count <= MAX_EVENT_REPLAY:
        raise ValueError(f"{name} must be within 0..{MAX_EVENT_REPLAY}, not {count!r}")
    return int(count)


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
        self.latency = latency
        self.fail_rate = fail_rate
        self.unimplemented = frozenset(unimplemented)
        self.malformed = frozenset(malformed)
        self.bad_ips = bad_ips
        self.event_delay = 0.0
        self.event_drop_rate = 0.0
        self.event_duplicate_rate = 0.0
        self.event_reorder_rate = 0.0
        self.event_cut_after = None
        self.event_replay = 0

    latency = _Setting(_seconds, "Seconds added to every unary call.")
    fail_rate = _Setting(_fraction, "The fraction of list calls answered with UNAVAILABLE.")
    unimplemented = _Setting(_rpc_names, "RuntimeService RPC names answered UNIMPLEMENTED.")
    malformed = _Setting(_malformed_kinds, "Kinds of malformed items added to list responses.")
    bad_ips = _Setting(_texts, "Hostile IP strings every sandbox status carries (see the class).")

    # -- event streams ------------------------------------------------------------------------
    event_delay = _Setting(_seconds, "Seconds each container event is held before it is sent.")
    event_drop_rate = _Setting(_fraction, "Fraction of container events never sent.")
    event_duplicate_rate = _Setting(_fraction, "Fraction of container events sent twice.")
    event_reorder_rate = _Setting(
        _fraction, "Fraction of container events held back and sent after the next one."
    )
    event_cut_after = _Setting(
        _cut_after, "Each stream ends with UNAVAILABLE after this many events (None: never)."
    )
    event_replay = _Setting(_replay, "Past events each new stream receives first (0: none).")

    def roll_event(self, name: str) -> bool:
        """Draw once for an event fault (``drop``, ``duplicate``, ``reorder``)."""
        with self._lock:
            rate: float = getattr(self, f"_event_{name}_rate")
            return rate > 0 and self._rng.random() < rate

    def malformed_items(self) -> tuple[tuple[SimSandbox, ...], tuple[SimContainer, ...]]:
        """The sandboxes and containers the current ``malformed`` setting adds to lists."""
        return malformed_items(self.malformed)

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
            rate = self.fail_rate
            if rate <= 0:
                return False
            return self._rng.random() < rate
