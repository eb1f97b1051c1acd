"""The calls the CRI socket answered: counts by method and code, durations by method, and the
connections open on its sockets (docs/architecture.md §10 rule 7: method labels from
``routes.method_label``, a closed set).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from podcache.serve.crisock.routes import method_label

__all__ = ["DURATION_BUCKETS", "NO_TABLE", "Answered", "CallStats", "RelayTable", "connections"]

DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds (seconds) of ``podcache_cri_request_duration_seconds``."""


class Answered(NamedTuple):
    """Calls of one method the C relay answered itself: how many, their seconds in all, and
    the count in each of ``DURATION_BUCKETS`` (and one more: past the last)."""

    calls: int
    seconds: float
    buckets: tuple[int, ...]


class RelayTable(NamedTuple):
    """The C relay's table of status answers: the calls it answered by method, the answers it
    holds now and their bytes (their IDs' and messages')."""

    answered: dict[str, Answered]
    kept: int
    size: int


NO_TABLE = RelayTable({}, 0, 0)
"""A relay without a table (the Python engine's): it answers no call itself."""


class CallStats:
    """The socket's calls: counts by (method label, code name), durations by method label
    (event streams not timed). Thread-safe; at most (methods + 1) x codes series."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str], int] = {}
        self._buckets: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}

    def record(self, path: str, code: str, seconds: float | None) -> None:
        """One call on ``path`` answered with ``code``, taking ``seconds`` (None: not timed)."""
        method = method_label(path)
        with self._lock:
            key = (method, code)
            self.requests[key] = self.requests.get(key, 0) + 1
            if seconds is None:
                return
            counts = self._buckets.setdefault(method, [0] * (len(DURATION_BUCKETS) + 1))
            index = next(
                (i for i, bound in enumerate(DURATION_BUCKETS) if seconds <= bound),
                len(DURATION_BUCKETS),
            )
            counts[index] += 1
            self._sums[method] = self._sums.get(method, 0.0) + seconds

    def durations(self, more: Mapping[str, Answered] | None = None) -> Metric:
        """The histogram of the calls recorded here, and of ``more`` (by method label)."""
        family = HistogramMetricFamily(
            "podcache_cri_request_duration_seconds",
            "Time the CRI socket took to answer a call, by method (event streams excluded).",
            labels=["method"],
        )
        with self._lock:
            table = {method: list(counts) for method, counts in self._buckets.items()}
            sums = dict(self._sums)
        for method, answered in (more or {}).items():
            counts = table.setdefault(method, [0] * (len(DURATION_BUCKETS) + 1))
            for index, count in enumerate(answered.buckets):
                counts[index] += count
            sums[method] = sums.get(method, 0.0) + answered.seconds
        for method, counts in sorted(table.items()):
            cumulative, running = [], 0
            for bound, count in zip((*map(str, DURATION_BUCKETS), "+Inf"), counts, strict=True):
                running += count
                cumulative.append((bound, running))
            family.add_metric([method], cumulative, sums[method])
        return family


def connections(paths: Iterable[str], table: str = "/proc/self/net/unix") -> int:
    """Connections accepted on the unix sockets at ``paths`` and open now (the kernel's table
    of unix sockets: an accepted socket carries its listener's path, state 03 connected)."""
    wanted = set(paths)
    count = 0
    try:
        with open(table, encoding="utf-8", errors="replace") as lines:
            next(lines, None)  # the header
            for line in lines:
                fields = line.rstrip("\n").split(maxsplit=7)
                if len(fields) == 8 and fields[5] == "03" and fields[7] in wanted:
                    count += 1
    except OSError:
        return 0
    return count
