"""Pod IPs: each sandbox's network status, read once per sandbox ID and remembered in a
``NetworkMemo``; no gRPC. The rules, costs and bounds (``STATUS_CONCURRENCY``,
``STATUS_ATTEMPTS``, ``UNCONFIRMED_MAX``, ``LEARNT_MAX``, ``MEMO_MAX``; the oldest entry goes
first past each) are docs/architecture.md §4's, "Pod IPs"; besides them:

- additional IPs past ``eventwire.MAX_ADDITIONAL_IPS`` are dropped and counted as invalid
  strings are (``invalid_ips``);
- failure counts are kept only for sandboxes the memo holds or a listing still wants;
- all counters and tables are changed under one lock held for no I/O; readers' lookups
  (``get``, a listing's) are single dict reads, so the memo may be shared by threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from podcache.cri.eventwire import EventFields
from podcache.model import ContainerState, Pod, PodList, normalise_ip

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "LEARNT_MAX",
    "MEMO_MAX",
    "PACE_WAIT",
    "STATUS_ATTEMPTS",
    "STATUS_CONCURRENCY",
    "UNCONFIRMED_MAX",
    "NetworkMemo",
    "Pace",
    "SandboxNetwork",
    "StatusBatch",
    "StatusReader",
    "loop_turn",
    "newest_ready_sandbox",
]

STATUS_CONCURRENCY = 128
"""PodSandboxStatus calls a getter makes together, in one round, on one connection; each
round's answers are read by one thread."""

STATUS_ATTEMPTS = 3
"""Status calls made for one sandbox in all (the first and two retries, one per later listing)
before its IPs are left unknown for the rest of its life."""

MEMO_MAX = 65_536
"""Sandboxes a ``NetworkMemo`` remembers at most (far above a node's pods; the oldest go)."""

UNCONFIRMED_MAX = 1_024
"""Sandboxes learnt from events and not yet used by a listing or relist, kept at most (a
runtime may send READY statuses for sandboxes it never lists: the oldest go first)."""

LEARNT_MAX = 4_096
"""Sandboxes remembered as learnt while a full listing runs (for it to keep), at most; the
oldest are forgotten past it, costing a call."""

_NODE = 2  # NamespaceMode.NODE
_READY = 0  # PodSandboxState.SANDBOX_READY
_RUNNING = ContainerState.RUNNING  # a READY sandbox, in the model


class SandboxNetwork(NamedTuple):
    """One sandbox's addresses (canonical, primary first, each once) and host-network flag."""

    ips: tuple[str, ...]
    host_network: bool


def newest_ready_sandbox(pod: Pod) -> str | None:
    """The bare ID of ``pod``'s newest READY sandbox (sandboxes are held newest first)."""
    for sandbox in pod.sandboxes:
        if sandbox.state is _RUNNING:
            return sandbox.id.id
    return None


def network_of(fields: EventFields) -> tuple[SandboxNetwork, int]:
    """The network a sandbox status states, and how many of its IP strings were dropped."""
    if fields.network_mode == _NODE:
        return SandboxNetwork((), True), 0
    ips: list[str] = []
    dropped = fields.additional_ips_dropped
    for text in (fields.ip, *fields.additional_ips):
        if not text:
            continue  # no address given (a host-network sandbox, or none yet)
        try:
            ip = normalise_ip(text)
        except ValueError:
            dropped += 1
            continue
        if ip not in ips:
            ips.append(ip)
    return SandboxNetwork(tuple(ips), False), dropped


class ListingPass:
    """One listing's lookups in the memo: what it used and what it missed (in pod order);
    ``pod``: the UID a relist of one pod names (None for a node's listing)."""

    __slots__ = ("known", "pod", "used", "wanted")

    def __init__(self, known: dict[str, SandboxNetwork], pod: str | None = None) -> None:
        self.known = known
        self.pod = pod
        self.used: dict[str, SandboxNetwork] = {}
        self.wanted: list[str] = []

    def network(self, sandbox_id: str) -> SandboxNetwork | None:
        """The network of a pod's newest READY sandbox, None (and wanted) when unknown."""
        found = self.known.get(sandbox_id)
        if found is None:
            self.wanted.append(sandbox_id)
        else:
            self.used[sandbox_id] = found
        return found


StatusBatch = Callable[[Sequence[str]], Sequence[EventFields | Exception]]
"""Reads the statuses of some sandboxes (their PodSandboxStatus calls, made together): each
one's fields, or the exception its call failed with, in order. It may raise: every call
failed."""

Pace = Callable[[], None]
"""Blocks until a ``StatusReader`` may begin its next round of calls (``loop_turn``)."""

PACE_WAIT = 1.0
"""Seconds a round waits at most for the event loop's turn: a safety net for a loop that
stopped (a running loop turns within milliseconds), never the pacing itself."""


def loop_turn(loop: asyncio.AbstractEventLoop) -> Pace:
    """A pace that returns once ``loop`` has run a turn since it was called: a callback it
    schedules (thread-safely) has run, so every request the loop had ready was handled in
    between. A closed loop has nothing left to starve: the pace returns at once."""

    def pace() -> None:
        turned = threading.Event()
        try:
            loop.call_soon_threadsafe(turned.set)
        except RuntimeError:  # the loop is closed
            return
        turned.wait(PACE_WAIT)

    return pace


class NetworkMemo:
    """Sandbox ID -> ``SandboxNetwork``, with the counters a getter exposes (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: OrderedDict[str, SandboxNetwork] = OrderedDict()
        self._pod_of: dict[str, str] = {}  # sandbox ID -> the pod UID its entry belongs to
        self._sandbox_of: dict[str, str] = {}  # pod UID -> its one sandbox ID held
        self._learnt: OrderedDict[str, SandboxNetwork] = OrderedDict()  # since a full began
        self._unconfirmed: OrderedDict[str, None] = OrderedDict()  # from events, unused yet
        self._failures: dict[str, int] = {}
        self.invalid_ips = 0
        """IP strings the runtime sent that were not addresses (or past the bound), dropped."""
        self.status_calls = 0
        """PodSandboxStatus calls made."""
        self.status_failures = 0
        """Of those, the ones that failed."""

    def __len__(self) -> int:
        return len(self._known)

    def sizes(self) -> dict[str, int]:
        """Each table's entries (for tests and benchmarks: every one is bounded)."""
        return {
            "known": len(self._known),
            "pod_of": len(self._pod_of),
            "sandbox_of": len(self._sandbox_of),
            "learnt": len(self._learnt),
            "unconfirmed": len(self._unconfirmed),
            "failures": len(self._failures),
        }

    def get(self, sandbox_id: str) -> SandboxNetwork | None:
        return self._known.get(sandbox_id)

    def begin(self, *, full: bool, pod: str | None = None) -> ListingPass:
        """A pass for one listing; ``full``: the node's whole listing (it prunes the memo);
        else ``pod``: the UID a relist of one pod lists (``StatusReader.complete`` settles its
        entry)."""
        if full:
            with self._lock:
                self._learnt = OrderedDict()
        return ListingPass(self._known, None if full else pod)

    def to_ask(self, listing: ListingPass) -> list[str]:
        """The sandboxes the listing missed that may still be asked about (each once): not
        learnt since (another listing's call, an event) and not given up on."""
        failures = self._failures
        known = self._known
        return [
            sid
            for sid in dict.fromkeys(listing.wanted)
            if failures.get(sid, 0) < STATUS_ATTEMPTS and sid not in known
        ]

    def learnt_since(self, listing: ListingPass) -> dict[str, SandboxNetwork]:
        """The networks of sandboxes the listing missed that were learnt while it ran (by a
        concurrent listing or an event): its pods get them with no call."""
        known = self._known
        found: dict[str, SandboxNetwork] = {}
        for sid in listing.wanted:
            network = known.get(sid)
            if network is not None:
                found[sid] = network
        return found

    def ask_all(
        self, sandbox_ids: Sequence[str], batch: StatusBatch, pod: str | None = None
    ) -> list[SandboxNetwork | None]:
        """Call for some sandboxes' statuses together and remember each network (for ``pod``,
        else the pod each status names); None for a call that failed (the pod's IPs stay
        unknown until a later listing asks again)."""
        with self._lock:
            self.status_calls += len(sandbox_ids)
        try:
            outcomes = batch(sandbox_ids)
        except Exception as failure:  # every call failed, whatever the cause
            outcomes = [failure] * len(sandbox_ids)
        if len(outcomes) != len(sandbox_ids):
            raise ValueError(f"{len(sandbox_ids)} statuses asked, {len(outcomes)} answered")
        networks: list[SandboxNetwork | None] = []
        for sandbox_id, outcome in zip(sandbox_ids, outcomes, strict=True):
            if isinstance(outcome, Exception):
                with self._lock:
                    self.status_failures += 1
                    self._failures[sandbox_id] = self._failures.get(sandbox_id, 0) + 1
                networks.append(None)
            else:
                networks.append(self.learn(sandbox_id, outcome, pod))
        return networks

    def learn(
        self,
        sandbox_id: str,
        fields: EventFields,
        pod: str | None = None,
        *,
        confirmed: bool = True,
    ) -> SandboxNetwork:
        """Remember what a status (of a call, or an event's: not ``confirmed``) says of
        ``sandbox_id``, as the entry of ``pod`` (None: the status's own pod UID). O(1)."""
        network, dropped = network_of(fields)
        with self._lock:
            self.invalid_ips += dropped
            self._failures.pop(sandbox_id, None)
            self._hold(sandbox_id, network, fields.pod_uid if pod is None else pod)
            learnt = self._learnt
            learnt[sandbox_id] = network
            if len(learnt) > LEARNT_MAX:
                learnt.popitem(last=False)
            if confirmed:
                self._unconfirmed.pop(sandbox_id, None)
            else:
                self._unconfirmed[sandbox_id] = None
                if len(self._unconfirmed) > UNCONFIRMED_MAX:
                    self._drop(next(iter(self._unconfirmed)))
        return network

    def learn_event(self, fields: EventFields) -> None:
        """An event's sandbox status: remembered when it is of a READY sandbox not yet known
        that states an address or the host network (a NOTREADY one's network is torn down; a
        known one cannot have changed; one with neither may predate its network's set-up, so
        a call asks instead)."""
        sandbox_id = fields.sandbox_id
        if (
            sandbox_id
            and fields.sandbox_state == _READY
            and (fields.ip or fields.additional_ips or fields.network_mode == _NODE)
            and sandbox_id not in self._known
        ):
            self.learn(sandbox_id, fields, confirmed=False)

    def settle(self, pod: str, sandbox_id: str | None) -> None:
        """A relist of pod ``pod`` found ``sandbox_id`` its newest READY sandbox (None: the
        pod is gone, or has none): the pod's entry, if it held another, is dropped; the one
        it uses now is its own (confirmed). O(1)."""
        with self._lock:
            held = self._sandbox_of.get(pod)
            if held is not None and held != sandbox_id:
                self._drop(held)
            if sandbox_id is not None:
                network = self._known.get(sandbox_id)
                if network is not None:
                    self._hold(sandbox_id, network, pod)
                    self._unconfirmed.pop(sandbox_id, None)

    def finish(self, listing: ListingPass, fetched: dict[str, SandboxNetwork]) -> None:
        """After a full listing: keep what it used, what it fetched and what was learnt while
        it ran (an event's), drop the rest; failure counts only for sandboxes still wanted.
        O(the listing's pods)."""
        with self._lock:
            learnt = self._learnt
            if fetched or learnt or len(listing.used) != len(self._known):
                self._prune(OrderedDict(listing.used | learnt | fetched), listing.used)
            wanted = set(listing.wanted)
            self._failures = {s: n for s, n in self._failures.items() if s in wanted}

    # -- under the lock ---------------------------------------------------------------------
    def _hold(self, sandbox_id: str, network: SandboxNetwork, pod: str) -> None:
        """``sandbox_id``'s entry, belonging to ``pod`` (""/unknown: to none), which holds
        no other (a pod's older sandbox is never looked up again)."""
        if pod:
            held = self._sandbox_of.get(pod)
            if held is not None and held != sandbox_id:
                self._drop(held)
            owner = self._pod_of.get(sandbox_id)
            if owner is not None and owner != pod:
                self._sandbox_of.pop(owner, None)
            self._pod_of[sandbox_id] = pod
            self._sandbox_of[pod] = sandbox_id
        known = self._known
        known[sandbox_id] = network
        if len(known) > MEMO_MAX:
            self._drop(next(iter(known)))

    def _drop(self, sandbox_id: str) -> None:
        """Forget ``sandbox_id`` in every table."""
        self._known.pop(sandbox_id, None)
        self._learnt.pop(sandbox_id, None)
        self._unconfirmed.pop(sandbox_id, None)
        self._failures.pop(sandbox_id, None)
        pod = self._pod_of.pop(sandbox_id, None)
        if pod is not None and self._sandbox_of.get(pod) == sandbox_id:
            del self._sandbox_of[pod]

    def _prune(
        self, kept: OrderedDict[str, SandboxNetwork], used: dict[str, SandboxNetwork]
    ) -> None:
        """Keep only ``kept`` (a full listing's), capped at ``MEMO_MAX``, the oldest going."""
        while len(kept) > MEMO_MAX:
            kept.popitem(last=False)
        pod_of = {sid: pod for sid in kept if (pod := self._pod_of.get(sid)) is not None}
        self._pod_of = pod_of
        self._sandbox_of = {pod: sid for sid, pod in pod_of.items()}
        self._unconfirmed = OrderedDict(
            (sid, None) for sid in self._unconfirmed if sid in kept and sid not in used
        )
        self._known = kept


def with_networks(pods: PodList, fetched: dict[str, SandboxNetwork]) -> PodList:
    """``pods`` with the pods whose newest READY sandbox is in ``fetched`` given its network
    (the others are the same objects)."""
    if not fetched:
        return pods
    changed = False
    out: list[Pod] = []
    for pod in pods:
        sandbox_id = newest_ready_sandbox(pod)
        network = fetched.get(sandbox_id) if sandbox_id is not None else None
        if network is not None and (pod.ips, pod.host_network) != network:
            out.append(with_network(msgspec.structs.replace(pod), network))
            changed = True
        else:
            out.append(pod)
    return PodList(out) if changed else pods


def with_network(pod: Pod, network: SandboxNetwork) -> Pod:
    """Give ``pod`` (no one else has seen yet) a network whose IPs are already canonical."""
    msgspec.structs.force_setattr(pod, "ips", network.ips)
    msgspec.structs.force_setattr(pod, "host_network", network.host_network)
    return pod


class StatusReader:
    """A getter's status calls for its listings: ``complete`` gives a listing's pods the IPs
    it missed, asking in rounds of at most ``STATUS_CONCURRENCY`` calls made together
    (``batch``: on one connection of the getter's own HTTP/2 client). Blocking: the asyncio
    getter runs ``complete`` in a worker thread.

    Pacing (docs/architecture.md §5, "Threads beside the loop"): a round begins only when the
    previous one has ended and ``pace`` has returned (the asyncio getter's is ``loop_turn``;
    without one, the thread getter's rounds follow each other).
    """

    def __init__(self, memo: NetworkMemo, batch: StatusBatch) -> None:
        self.memo = memo
        self._batch = batch

    def complete(
        self, pods: PodList, listing: ListingPass, *, full: bool, pace: Pace | None = None
    ) -> PodList:
        """``pods`` (converted with ``listing``) with the networks it missed asked for, in
        rounds separated by ``pace``; after a full listing the memo is pruned to it
        (``NetworkMemo.finish``)."""
        memo = self.memo
        fetched = memo.learnt_since(listing)
        wanted = memo.to_ask(listing)
        owner = listing.pod
        results: list[SandboxNetwork | None] = []
        for start in range(0, len(wanted), STATUS_CONCURRENCY):
            if start and pace is not None:
                pace()
            results += memo.ask_all(wanted[start : start + STATUS_CONCURRENCY], self._batch, owner)
        fetched.update((s, n) for s, n in zip(wanted, results, strict=True) if n is not None)
        if full:
            memo.finish(listing, fetched)
        done = with_networks(pods, fetched)
        if owner is not None:
            pod = done.by_uid(owner)
            memo.settle(owner, None if pod is None else newest_ready_sandbox(pod))
        return done
