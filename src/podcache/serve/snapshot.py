"""The response memo: one snapshot's JSON, serialised once, and the answers given from it
(docs/architecture.md §5, items 4-5, and what lives between requests).

A ``SnapshotView`` belongs to one PodList object (§3 rule 6: identity is the key), so nothing
in it can outlive its snapshot. A body is stored without the age: ``head`` ends just before
it, and the server sends the age after it (``Response.suffix``). Pods become JSON through
``podcache.jsonview``. It deliberately does not route, parse requests, check tokens or talk to
the cache: which answers may be reused for which request is ``App.respond_now``'s rule.
"""

from __future__ import annotations

import hashlib
from itertools import compress, count, repeat
from operator import is_not, itemgetter
from typing import Any, NamedTuple, cast

import msgspec

from podcache.jsonview import container_to_json, pod_to_json
from podcache.model import Container, Pod, PodList

__all__ = ["MEMO_LIMIT", "Answer", "SnapshotView"]

MEMO_LIMIT = 4096
"""Most answers kept per snapshot (then the memo starts over: bounded memory under a scan of
targets)."""

_encode = msgspec.json.Encoder().encode

_Encoded = tuple[Pod, bytes, bytes]
"""A pod, its JSON, and an 8-byte digest of the JSON (the ETag hashes the digests)."""

_NOT_KNOWN = cast(_Encoded, (None, b"", b""))  # its "pod" is no pod's
_POD_OF = itemgetter(0)
_JSON_OF = itemgetter(1)
_DIGEST_OF = itemgetter(2)


class Answer(NamedTuple):
    """What a request target is answered from one snapshot: everything but the age."""

    route: str
    """The route's template (``/pods/{uid}``): the metrics' label."""
    status: int
    head: bytes
    """The JSON body up to the age (``..."age_seconds":``)."""
    etag: bool
    """Whether the answer carries the snapshot's ETag (and may be a 304)."""
    kept: bool = True
    """Whether the memo may keep it (not when it also depends on the departed pods, which
    age out without a new snapshot)."""


class SnapshotView:
    """One snapshot's serialised forms and the answers given from it.

    ``monotonic``: the cache clock's reading for the snapshot; ``wall``: the same instant as
    unix seconds. ``etag`` is weak and names the pods' content (not the fetch), so an
    unchanged node answers 304 across refreshes.

    Built when asked: making a view reads no pod. ``build`` (first use of the ETag or the
    body) takes each pod's encoding from the previous view, encodes the pods it lacks and
    hashes the digests: O(pods) steps in C plus one encoding per changed pod. The body is
    joined only when an answer needs it (``items_head``), in one join. Where it is built (the
    loop or a worker thread, ``build(body=True)``) is docs/architecture.md §5 item 4's rule.
    """

    __slots__ = (
        "_built",
        "_etag",
        "_items_head",
        "_known",
        "_pod_json",
        "_retired",
        "answers",
        "monotonic",
        "pods",
        "wall",
        "wall_text",
    )

    _pod_json: dict[int, _Encoded]
    _known: dict[int, _Encoded]

    def __init__(
        self,
        pods: PodList,
        monotonic: float,
        wall: float,
        previous: SnapshotView | None = None,
    ) -> None:
        self.pods = pods
        self.monotonic = monotonic
        self.wall = wall
        self.wall_text = b"%.6f" % wall
        # Each pod's JSON and digest by the Pod object: a refresh hands unchanged pods over as
        # the same objects, so an earlier view's bytes serve again.
        self._known = {} if previous is None else previous.known()
        self._pod_json = {}
        self._built = False
        self._retired = False
        self._items_head = b""
        self._etag = ""
        self.answers: dict[str, Answer] = {}
        """Answers by request target (path, and ``?query`` when there is one)."""

    def inherit(self, previous: SnapshotView) -> None:
        """Take ``previous``'s pods' JSON again (it was built since this view was made); call
        before this view is built, in the thread that will build it or before."""
        if not self._built:
            self._known = previous.known()

    def known(self) -> dict[int, _Encoded]:
        """The pods' encodings a later view may reuse (this view's, once built)."""
        return self._pod_json if self._built else self._known

    @property
    def ready(self) -> bool:
        """Whether the pods are encoded and the ETag made (the body is then one join away)."""
        return self._built

    @property
    def items_head(self) -> bytes:
        """``{"items": [...],"cache_time":...,"age_seconds":`` for the whole snapshot: joined
        on first use and kept, but by a retired view (joined again for a late request)."""
        head = self._items_head
        if not head:
            self.build()
            head = self._body(list(map(self._pod_json.__getitem__, map(id, self.pods))))
            if not self._retired:
                self._items_head = head
        return head

    @property
    def etag(self) -> str:
        """Weak, naming the items' content: a hash of the pods' digests, in order."""
        if not self._built:
            self.build()
        return self._etag

    def build(self, *, body: bool = False) -> None:
        """Encode the pods not encoded before and hash the digests; with ``body``, join the
        body too (a worker thread's build: the request that needs it then finds it ready).
        Idempotent; safe in a worker thread while the loop reads other views (it publishes its
        results only when complete, and builds of one view compute the same bytes).

        One pod per encode call: the encoder holds the GIL while it runs (docs/architecture.md
        §5, "Threads beside the loop", rule 2). The body's bytes equal the list's encoding."""
        if not self._built:
            entries, table = self._encoded(self._known)
            digests = b"".join(map(_DIGEST_OF, entries))
            self._etag = f'W/"{hashlib.blake2b(digests, digest_size=12).hexdigest()}"'
            self._pod_json = table
            self._built = True
            self._known = {}
        if body:
            _ = self.items_head

    def retire(self) -> None:
        """A newer snapshot's view took over: drop the joined body and the answers, keep each
        pod's JSON and the ETag (docs/architecture.md §5, ``RECENT_VIEWS``). A build running in
        a worker thread as the view retires may still keep its body."""
        self._retired = True
        self.answers = {}
        self._items_head = b""

    def _encoded(self, known: dict[int, _Encoded]) -> tuple[list[_Encoded], dict[int, _Encoded]]:
        """Each pod's encoding in order (from ``known`` when there, else made), and by id().

        Cost: O(pods) in C (``map``, ``zip``) plus the encoding of the pods ``known`` lacks:
        the only Python-level steps are per pod encoded."""
        pods = self.pods
        keys = list(map(id, pods))
        entries: list[_Encoded] = list(map(known.get, keys, repeat(_NOT_KNOWN)))
        # An entry is reused only for the very pod it encoded: an id() may be reused by a new
        # object once the old one is gone.
        for at in compress(count(), map(is_not, map(_POD_OF, entries), pods)):
            pod = pods[at]
            encoded = _encode(pod_to_json(pod))
            entries[at] = (pod, encoded, hashlib.blake2b(encoded, digest_size=8).digest())
        return entries, dict(zip(keys, entries, strict=True))

    def _body(self, entries: list[_Encoded]) -> bytes:
        """The list's JSON up to the age, in one join (one allocation)."""
        closing = b'],"cache_time":' + self.wall_text + b',"age_seconds":'
        if not entries:
            return b'{"items":[' + closing
        parts = [b","] * (2 * len(entries) + 1)
        parts[0] = b'{"items":['
        parts[1::2] = map(_JSON_OF, entries)
        parts[-1] = closing
        return b"".join(parts)

    def remember(self, target: str, answer: Answer) -> None:
        """Keep ``answer`` for ``target``; at ``MEMO_LIMIT`` answers the memo starts over."""
        if len(self.answers) >= MEMO_LIMIT:
            self.answers.clear()
        self.answers[target] = answer

    def _head(self, opening: bytes) -> bytes:
        return opening + b',"cache_time":' + self.wall_text + b',"age_seconds":'

    def pods_head(self, pods: list[Pod]) -> bytes:
        """``{"items": [...]`` for a filtered list of this snapshot's pods."""
        return self._head(_encode({"items": [pod_to_json(pod) for pod in pods]})[:-1])

    def pod_head(self, pod: Pod) -> bytes:
        """``{"pod": {...}`` for one of this snapshot's pods."""
        return self._head(_encode({"pod": pod_to_json(pod)})[:-1])

    def container_head(self, pod: Pod, container: Container) -> bytes:
        """``{"container": {...}, "pod": {...}`` for a container (or sandbox) and its pod."""
        document: dict[str, Any] = {
            "container": container_to_json(container),
            "pod": pod_to_json(pod),
        }
        return self._head(_encode(document)[:-1])

    def process_head(self, pid: int, pod: Pod, container: Container | None) -> bytes:
        """``{"pid": N, "pod": {...}, "container": {...} or null`` for a process in this
        snapshot's pod (``container`` None: the process is in the pod but in no container)."""
        document: dict[str, Any] = {
            "pid": pid,
            "pod": pod_to_json(pod),
            "container": None if container is None else container_to_json(container),
        }
        return self._head(_encode(document)[:-1])

    def document_head(self, document: dict[str, Any]) -> bytes:
        """Any JSON object answered from this snapshot, up to the age."""
        return self._head(_encode(document)[:-1])

    def not_found_head(self, status: int, message: str, **extra: str) -> bytes:
        """An error body answered from this snapshot (with ``extra`` members, e.g. a
        ``/pids`` 404's ``reason``): it says how old the snapshot is too."""
        return self._head(_encode({"error": message, "status": status, **extra})[:-1])

    def ready_head(self) -> bytes:
        """``/readyz``'s body up to the age."""
        return b'{"status":"ready","cache_time":' + self.wall_text + b',"age_seconds":'
