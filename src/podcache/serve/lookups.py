"""Lookups by key that may reach past the snapshot: a process (``/pids/{pid}``, from the
host's /proc), and a key a pod that left may have held (``departed=1``, ``at``); no routing.

None of these answers is kept in the memo: a PID names another process later, and whether a
released key is answered depends on the time and the departed, not on the snapshot alone.
Cost: a key is one table lookup in the snapshot, or in the cache's departed record; a PID
reads its process's cgroup and stat, and at most one relist of one pod (``cache.pids``).
"""

from __future__ import annotations

from podcache.cache import AsyncPodGetter, Found
from podcache.cache.pids import LookupResult, UnknownIDs, alookup_pod, async_probe
from podcache.errors import AmbiguousContainerIDError, PodcacheError
from podcache.jsonview import PID_MISS_REASONS
from podcache.model import PodList
from podcache.serve.failures import failure_of
from podcache.serve.metrics import Metrics
from podcache.serve.reading import Reader
from podcache.serve.response import HTTPError, Response
from podcache.serve.snapshot import Answer, SnapshotView
from podcache.serve.who import DEPARTED, WHO_ROUTES, Who, rfc3339, who_document

__all__ = ["Lookups", "not_found"]

_PID_MISSES = {
    "not_in_container": "is in no container (its cgroup names none)",
    "unknown": "is in a container or pod the runtime does not list",
}


class Lookups:
    """Lookups over ``reader``'s cache; processes are read under ``proc_root`` (the host's
    ``/proc``), and a container missing from the snapshot is asked of ``getter`` alone (never
    a relist of the node) when it can list one pod."""

    def __init__(
        self, reader: Reader, getter: AsyncPodGetter, metrics: Metrics, proc_root: str
    ) -> None:
        self._reader = reader
        self._cache = reader.cache
        self.metrics = metrics
        self._proc_root = proc_root
        self._probe = async_probe(getter)
        self._unknown = UnknownIDs()

    def find(self, pods: PodList, key: tuple[str, str], at: float | None = None) -> Found | None:
        """``cache.find_in`` by one key, ``(kind, value)``: ``ip``, ``uid`` or ``container_id``."""
        kind, value = key
        if kind == "ip":
            return self._cache.find_in(pods, ip=value, at=at)
        if kind == "uid":
            return self._cache.find_in(pods, uid=value, at=at)
        return self._cache.find_in(pods, container_id=value, at=at)

    def missing(self, view: SnapshotView, message: str, key: tuple[str, str]) -> Answer:
        """A 404 from ``view``; when a pod held the key until lately, the body says when it
        stopped (``held_until``) and, when the pod left, when (``departed_at``): the client
        may ask again with ``departed=1``. The memo does not keep it (the released keys age
        out without a new snapshot)."""
        try:
            found = self.find(view.pods, key)
        except (ValueError, LookupError):  # a prefix several released IDs share: plain 404
            found = None
        if found is None or found.held_until is None:
            return not_found(view, message)
        extra = {"held_until": rfc3339(found.held_until)}
        said = "a pod that left held it"
        if found.departed_at is None:
            said = "a pod that is still listed held it"
        else:
            extra["departed_at"] = rfc3339(found.departed_at)
        head = view.not_found_head(404, f"{message}; {said}", **extra)
        return Answer("", 404, head, etag=False, kept=False)

    async def answer_who(
        self, need: float | None, headers: dict[str, str], who: Who, key: tuple[str, str]
    ) -> Response:
        """A lookup that may answer a pod that left (``departed=1``) or the pod that held the
        key at ``at``. 200 with ``departed_at`` and ``X-Podcache-Departed: true`` for a pod
        that left; 404 when nobody held it."""
        reader = self._reader
        arrival = reader.clock()
        view, _ = await reader.snapshot(need)
        try:
            found = self.find(view.pods, key, who.at)
        except ValueError as exc:  # a malformed type://id, or a prefix under 4 characters
            raise HTTPError(400, str(exc)) from None
        except AmbiguousContainerIDError as exc:  # a prefix of several IDs, listed or released
            raise HTTPError(409, str(exc), extra={"matches": list(exc.matches)}) from None
        route = WHO_ROUTES[key[0]]
        if found is None:
            what = "" if who.at is None else f" at {rfc3339(who.at)}"
            message = f"nothing known held {key[1]!r}{what}"
            answer = Answer(route, 404, view.not_found_head(404, message), etag=False)
            return reader.from_answer(view, answer, headers)
        document = who_document(found, key)
        answer = Answer(route, 200, view.document_head(document), etag=False)
        response = reader.from_answer(view, answer, headers, stale=reader.stale_for(view, arrival))
        if found.held_until is not None:
            response.headers.append(DEPARTED)
        return response

    async def answer_pid(self, pid: int, need: float | None, headers: dict[str, str]) -> Response:
        """The pod and container of process ``pid``."""
        reader = self._reader
        arrival = reader.clock()
        await reader.snapshot(need)  # read-your-writes first, as on every route
        result = await self.lookup_pid(pid)
        pods = result.pods
        reason = {"reason": PID_MISS_REASONS.get(result.outcome, "")}
        if pods is None:  # the process's cgroup names nothing: the runtime was not asked
            raise HTTPError(404, f"process {pid} {_PID_MISSES[result.outcome]}", extra=reason)
        view = reader.views.view_of(pods)
        found = result.process
        if found is None:
            message = f"process {pid} {_PID_MISSES[result.outcome]}"
            answer = Answer("", 404, view.not_found_head(404, message, **reason), etag=False)
        else:
            head = view.process_head(pid, found.pod, found.container)
            answer = Answer("/pids/{pid}", 200, head, etag=False)
        return reader.from_answer(view, answer, headers, stale=reader.stale_for(view, arrival))

    async def lookup_pid(self, pid: int) -> LookupResult:
        """``pod_of_pid`` with its outcome counted; failures as HTTP errors."""
        try:
            result = await alookup_pod(
                self._cache,
                self._reader.clock,
                pid,
                proc_root=self._proc_root,
                timeout=self._reader.wait,
                probe=self._probe,
                unknown=self._unknown,
            )
        except (PodcacheError, OSError) as exc:  # the cache's, and /proc's (TimeoutError too)
            failure = failure_of(type(exc))
            self.metrics.count_pid_lookup(failure.miss or "error", False)
            raise failure.http_error(
                exc, subject=f"process {pid}", proc_root=self._proc_root
            ) from exc
        self.metrics.count_pid_lookup(result.outcome, result.refreshed, result.probed)
        return result


def not_found(view: SnapshotView, message: str) -> Answer:
    """A plain 404 from ``view`` (kept in the memo: it holds for the snapshot)."""
    return Answer("", 404, view.not_found_head(404, message), etag=False)
