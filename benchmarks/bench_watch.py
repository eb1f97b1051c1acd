"""Benchmark the watch: the cost of a refresh's changes, and HTTP watchers; not a test.

diff: the listing of bench_refresh.py (5,000 pods, 3 containers each), then the next listing
with 1% of the pods replaced, both converted as a live getter does (the memo reuses unchanged
pods); times in one run, interleaved, best of N, in process CPU time: the bare protobuf decode
of the listing (the refresh benchmark's baseline); the changes between the two snapshots as
the cache computes them (``changes.Tracker``: by identity, from the state of the previous
refresh); a whole ``ChangeLog.publish`` (those changes, the revision, the history), which is
what the target is judged on; and, for reference, the plain ``changes.diff`` from the two UID
tables (the new one built in the timing, the old one already built). Target: the changes
cost at most 0.1x the decode.

fanout: ``podcache serve`` over a simulated runtime, N HTTP watchers on ``GET /pods?watch=1``
(raw sockets, one asyncio client process); each change the simulation makes is timed from the
moment the server published its snapshot (the revision's time, written by the server into its
log) to its arrival at every watcher. Targets: p99 publish->all received <= 50 ms for 1,000
watchers; server RSS <= its idle RSS + 100 MiB.

consistency: M watchers while the simulation replaces pods at R per second for S seconds;
each watcher rebuilds the state from its stream, and at every bookmark it compares it with
``GET /pods`` at the same revision (the server keeps the pods of each revision it published
for this check, under ``--keep-revisions``); counts changes lost or repeated.

    python benchmarks/bench_watch.py [--quick] [--json] [--only diff,fanout,consistency]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_refresh import RUNTIME, churned, make_responses

from podcache.cache.changes import ChangeLog, Tracker, diff
from podcache.cri.convert import Memo, pods_from_wire
from podcache.cri.proto import api_pb2 as pb
from podcache.model import PodList

DIFF_PODS = 5_000
DIFF_TARGET = 0.1


def _cpu(fn: Callable[[], object], samples: list[float]) -> None:
    gc.collect()
    start = time.process_time()
    fn()
    samples.append(time.process_time() - start)


def measure_diff(n_pods: int, rounds: int) -> dict[str, float]:
    """Decode vs diff vs publish at ``n_pods``, 1% churn: best of ``rounds``, interleaved."""
    sandboxes, containers = make_responses(n_pods)
    before_wire = (sandboxes.SerializeToString(), containers.SerializeToString())
    following = churned(sandboxes, containers)
    after_wire = (following[0].SerializeToString(), following[1].SerializeToString())
    memo = Memo()
    before = pods_from_wire(RUNTIME, *before_wire, memo)
    after = pods_from_wire(RUNTIME, *after_wire, memo)
    shared = sum(1 for pod in after if before.by_uid(pod.id) is pod)

    def fresh(pods: PodList) -> PodList:
        return PodList(pods.pods)  # no index yet: the diff builds its UID table itself

    def previous() -> PodList:
        """The old snapshot as a live cache holds it: its UID table was built when it was
        published (as the new one's is now, and timed)."""
        pods = fresh(before)
        pods.by_uid("")
        return pods

    def decode() -> None:
        pb.ListPodSandboxResponse.FromString(after_wire[0])
        pb.ListContainersResponse.FromString(after_wire[1])

    def plain() -> None:
        diff(old, new, 2)

    def tracked() -> None:
        tracker.update(new, 2)

    def publish() -> None:
        log.publish(new, 1.0)

    found = diff(fresh(before), fresh(after), 2)
    times: dict[str, list[float]] = {"decode": [], "diff": [], "tracker": [], "publish": []}
    for _ in range(rounds):
        _cpu(decode, times["decode"])
        old, new = previous(), fresh(after)
        _cpu(plain, times["diff"])
        tracker = Tracker()
        tracker.update(fresh(before), 1)  # the state as of the previous refresh
        new = fresh(after)
        _cpu(tracked, times["tracker"])
        log = ChangeLog()
        log.publish(fresh(before), 0.0)
        new = fresh(after)
        _cpu(publish, times["publish"])
        assert log.revision == 2 and len(log) == len(found) + n_pods
    best = {k: min(v) for k, v in times.items()}
    return {
        "pods": n_pods,
        "unchanged_shared": shared,
        "changes": len(found),
        "decode_ms": best["decode"] * 1e3,
        "diff_ms": best["diff"] * 1e3,
        "tracker_ms": best["tracker"] * 1e3,
        "publish_ms": best["publish"] * 1e3,
        "diff_ratio": best["diff"] / best["decode"],
        "tracker_ratio": best["tracker"] / best["decode"],
        "publish_ratio": best["publish"] / best["decode"],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the parts asked for; print a report (or JSON); exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (to check it works)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--only",
        default="diff,fanout,consistency",
        help="comma-separated parts (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    results: dict[str, object] = {"quick": args.quick}
    verdicts: dict[str, bool] = {}
    if "diff" in parts:
        d = measure_diff(DIFF_PODS, 5 if args.quick else 25)
        results["diff"] = d
        verdicts[f"changes at {DIFF_PODS:,} pods <= {DIFF_TARGET}x decode"] = (
            d["publish_ratio"] <= DIFF_TARGET
        )
    if "fanout" in parts or "consistency" in parts:
        from bench_watch_http import run_http_parts

        http, http_verdicts = run_http_parts(parts, quick=args.quick)
        results.update(http)
        verdicts.update(http_verdicts)
    results["verdicts"] = verdicts
    print(json.dumps(results, indent=2))
    if args.json:
        return 0  # the runner's report judges the figures
    for name, ok in verdicts.items():
        print(f"- {name}: {'met' if ok else 'NOT met'}")
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
