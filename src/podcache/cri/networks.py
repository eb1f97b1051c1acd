"""Pod IPs: each sandbox's network status, read once per sandbox ID and remembered; no gRPC.

``ListPodSandbox`` carries no IPs; ``PodSandboxStatus`` does (``network.ip``, then
``network.additional_ips``; ``linux.namespaces.options.network == NODE`` for a host-network
pod). An IP never changes during a sandbox's life, so a getter asks once per new sandbox ID and
keeps the answer in a ``NetworkMemo``:

- a listing looks up each pod's newest READY sandbox in the memo (a dict lookup: the hit path
  makes no call). The IDs it misses are the getter's to ask for, after the listing, with at
  most ``STATUS_CONCURRENCY`` calls in flight; their pods are then given their IPs;
- after a full listing the memo keeps only the sandboxes that listing used (plus any learnt
  while it ran): an entry is dropped when its sandbox leaves the listing. It never holds more
  than ``MEMO_MAX`` entries (the oldest go first);
- a status call that fails leaves that pod's IPs empty (unknown, not wrong); the sandbox is
  asked again at later listings, at most ``STATUS_ATTEMPTS`` times in all;
- an event's ``pod_sandbox_status`` of a READY sandbox that states an address (or the host
  network) fills the memo with no call;
- hostile answers: a string that is not an IP address is dropped and counted
  (``invalid_ips``), as are additional IPs past ``eventwire.MAX_ADDITIONAL_IPS``; never an
  error for the listing. A host-network sandbox has no IPs of its own: its strings are ignored.

All counters and tables are changed under one lock held for no I/O; readers see whole dicts
(each replaced by one attribute swap), so the memo may be shared by threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from podcache.cri.eventwire import EventFields
from podcache.model import ContainerState, Pod, PodList, normalise_ip

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "MEMO_MAX",
    "STATUS_ATTEMPTS",
    "STATUS_CONCURRENCY",
    "NetworkMemo",
    "SandboxNetwork",
    "StatusReader",
    "newest_ready_sandbox",
]

STATUS_CONCURRENCY = 8
"""PodSandboxStatus calls a getter has in flight at once (a cold start's 5,000 go 8 at a time)."""

STATUS_ATTEMPTS = 3
"""Status calls made for one sandbox in all (the first and two retries, one per later listing)
before its IPs are left unknown for the rest of its life."""

MEMO_MAX = 65_536
"""Sandboxes a ``NetworkMemo`` remembers at most (far above a node's pods; the oldest go)."""

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
    """One listing's lookups in the memo: what it used and what it missed (in pod order)."""

    __slots__ = ("known", "used", "wanted")

    def __init__(self, known: dict[str, SandboxNetwork]) -> None:
        self.known = known
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


StatusCall = Callable[[str], EventFields]
"""Reads one sandbox's status (a PodSandboxStatus call); raises on failure."""


class NetworkMemo:
    """Sandbox ID -> ``SandboxNetwork``, with the counters a getter exposes (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, SandboxNetwork] = {}
        self._learnt: dict[str, SandboxNetwork] = {}  # since the last full listing began
        self._failures: dict[str, int] = {}
        self.invalid_ips = 0
        """IP strings the runtime sent that were not addresses (or past the bound), dropped."""
        self.status_calls = 0
        """PodSandboxStatus calls made."""
        self.status_failures = 0
        """Of those, the ones that failed."""

    def __len__(self) -> int:
        return len(self._known)

    def get(self, sandbox_id: str) -> SandboxNetwork | None:
        return self._known.get(sandbox_id)

    def begin(self, *, full: bool) -> ListingPass:
        """A pass for one listing; ``full``: the node's whole listing (it prunes the memo)."""
        if full:
            with self._lock:
                self._learnt = {}
        return ListingPass(self._known)

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
        return {sid: known[sid] for sid in listing.wanted if sid in known}

    def ask(self, sandbox_id: str, call: StatusCall) -> SandboxNetwork | None:
        """Call for one sandbox's status and remember its network; None when the call failed
        (any exception: the pod's IPs stay unknown until a later listing asks again)."""
        with self._lock:
            self.status_calls += 1
        try:
            fields = call(sandbox_id)
        except Exception:
            with self._lock:
                self.status_failures += 1
                self._failures[sandbox_id] = self._failures.get(sandbox_id, 0) + 1
            return None
        return self.learn(sandbox_id, fields)

    def learn(self, sandbox_id: str, fields: EventFields) -> SandboxNetwork:
        """Remember what a status (of a call, or an event's) says of ``sandbox_id``."""
        network, dropped = network_of(fields)
        with self._lock:
            self.invalid_ips += dropped
            self._failures.pop(sandbox_id, None)
            known = self._known
            if len(known) >= MEMO_MAX:
                known = dict(list(known.items())[len(known) - MEMO_MAX + 1 :])
            known[sandbox_id] = network
            self._known = known
            self._learnt[sandbox_id] = network
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
            self.learn(sandbox_id, fields)

    def finish(self, listing: ListingPass, fetched: dict[str, SandboxNetwork]) -> None:
        """After a full listing: keep what it used, what it fetched and what was learnt while
        it ran (an event's), drop the rest; failure counts only for sandboxes still wanted."""
        with self._lock:
            if not fetched and not self._learnt and len(listing.used) == len(self._known):
                kept = self._known  # a steady node: it used every entry, learnt none
            else:
                kept = listing.used | self._learnt | fetched
            if len(kept) > MEMO_MAX:
                kept = dict(list(kept.items())[-MEMO_MAX:])
            self._known = kept
            wanted = set(listing.wanted)
            self._failures = {s: n for s, n in self._failures.items() if s in wanted}


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
    it missed, asking ``STATUS_CONCURRENCY`` at a time in threads of its own (made on first
    need). Blocking: the asyncio getter runs ``complete`` in a worker thread."""

    def __init__(self, memo: NetworkMemo, call: StatusCall) -> None:
        self.memo = memo
        self._call = call
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def complete(self, pods: PodList, listing: ListingPass, *, full: bool) -> PodList:
        """``pods`` (converted with ``listing``) with the networks it missed asked for; after
        a full listing the memo is pruned to it (``NetworkMemo.finish``)."""
        memo = self.memo
        fetched = memo.learnt_since(listing)
        wanted = memo.to_ask(listing)
        if wanted:
            results = self._map(lambda sid: memo.ask(sid, self._call), wanted)
            fetched.update((s, n) for s, n in zip(wanted, results, strict=True) if n is not None)
        if full:
            memo.finish(listing, fetched)
        return with_networks(pods, fetched)

    def _map(
        self, ask: Callable[[str], SandboxNetwork | None], ids: list[str]
    ) -> list[SandboxNetwork | None]:
        if len(ids) == 1:
            return [ask(ids[0])]
        with self._pool_lock:
            pool = self._pool
            if pool is None:
                from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 -- on need

                pool = self._pool = ThreadPoolExecutor(
                    STATUS_CONCURRENCY, thread_name_prefix="podcache-status"
                )
        return list(pool.map(ask, ids))

    def close(self) -> None:
        """Let the threads go (a call in flight ends with its channel)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
