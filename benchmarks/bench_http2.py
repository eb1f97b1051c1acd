"""CPU per call and per event: podcache's own HTTP/2 client against grpcio
(docs/architecture.md §7 rule 6).

    .venv/bin/python benchmarks/bench_http2.py [--quick] [--json]

The runtime is the simulator in a process of its own (``bench_perpod``'s node, 5,000 pods), so
only the client's CPU is in this process. Measured from ``/proc/self/task`` (every thread of
this process: grpcio's completion-queue and event-engine threads count), minus the main
thread's where it only drives the node:

1. **the relist of one pod**: the two list calls filtered by a pod's UID, N times over the
   node's pods, through grpcio (``CRIRuntime._listings``, two blocking unary calls) and
   through the own client (``_filtered_listings``, both calls in one write on a pooled
   connection); both read by the same reader. The answers are compared pod by pod (any
   difference fails the run) and the calls and answer bytes the node counted are reported.
2. **the event stream**: pods created and removed at the node while one reader takes the
   GetContainerEvents stream, through grpcio (a unary-stream call whose messages are read by
   ``event_from_bytes``) and through ``CRIRuntime.container_events()``; CPU per event, and
   each reader's count held to the events the node says it sent (any other count fails the
   run; tests/integration/test_http2_twins.py compares the events themselves).

Writes ``benchmarks/results/http2.json``; exit 2 on a broken run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc  # noqa: E402 -- after sys.path names the repository
from bench_perpod import Node, node  # noqa: E402 -- after sys.path names benchmarks/

from podcache.cri import CRIRuntime  # noqa: E402 -- after sys.path names the repository
from podcache.cri.eventstream import event_from_bytes  # noqa: E402 -- after sys.path names the repository
from podcache.cri.proto import api_pb2 as pb  # noqa: E402 -- after sys.path names the repository
from podcache.cri.queries import _pod_requests  # noqa: E402 -- after sys.path names the repository
from podcache.model import ContainerEvent  # noqa: E402 -- after sys.path names the repository

RESULTS = ROOT / "benchmarks" / "results" / "http2.json"
_TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu() -> dict[int, float]:
    """CPU seconds of each thread of this process (utime + stime)."""
    out: dict[int, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / _TICK
    return out


def cpu_of(run: Callable[[], None]) -> float:
    """CPU seconds every thread of this process spent while ``run`` ran (the calls are made
    on the main thread, so its share counts)."""
    before = thread_cpu()
    run()
    after = thread_cpu()
    return sum(after[t] - before.get(t, 0.0) for t in after)


def measure_relists(n: Node, calls: int) -> dict[str, Any]:
    with CRIRuntime(n.endpoint) as runtime:
        uids = [pod.id for pod in runtime.get_pods(True)][:500]
        requests = [_pod_requests(uids[i % len(uids)], False) for i in range(calls)]
        results: dict[str, Any] = {}
        answers: dict[str, list[tuple[int, int]]] = {}
        for name, make in (
            ("grpcio", runtime._listings),
            ("http2", runtime._filtered_listings),
        ):
            make(*requests[0])  # a connection made, a channel ready
            got: list[tuple[int, int]] = []
            n.ask("reset")

            def run(make: Any = make, got: list[tuple[int, int]] = got) -> None:
                for sandboxes, containers in requests:
                    listed = make(sandboxes, containers)
                    got.append((len(listed[0]), len(listed[1])))

            seconds = cpu_of(run)
            counts = n.counts()
            answers[name] = got
            results[name] = {
                "cpu_us_per_relist": seconds / calls * 1e6,
                "list_calls": sum(counts[m]["filtered"]["calls"] for m in _LISTS),
                "answer_bytes": sum(counts[m]["filtered"]["bytes"] for m in _LISTS),
            }
        if answers["grpcio"] != answers["http2"]:
            raise RuntimeError("the two clients' answers differ")
        results["ratio"] = (
            results["http2"]["cpu_us_per_relist"] / results["grpcio"]["cpu_us_per_relist"]
        )
        return results


_LISTS = ("ListPodSandbox", "ListContainers")


def _grpcio_reader(
    endpoint: str, into: list[ContainerEvent], ready: threading.Event
) -> Callable[[], None]:
    channel = grpc.insecure_channel(endpoint.replace("unix://", "unix:"))
    call = channel.unary_stream(
        "/runtime.v1.RuntimeService/GetContainerEvents",
        request_serializer=pb.GetEventsRequest.SerializeToString,
        response_deserializer=None,
    )(pb.GetEventsRequest())

    def read() -> None:
        ready.set()
        try:
            for data in call:
                into.append(event_from_bytes(endpoint, data))
        except grpc.RpcError:
            return

    threading.Thread(target=read, daemon=True).start()

    def stop() -> None:
        call.cancel()  # type: ignore[no-untyped-call]  # the stubs leave it untyped
        channel.close()

    return stop


def _own_reader(
    endpoint: str, into: list[ContainerEvent], ready: threading.Event
) -> Callable[[], None]:
    runtime = CRIRuntime(endpoint)
    stream = runtime.container_events()
    stream.open()

    def read() -> None:
        ready.set()
        for event in stream:
            into.append(event)

    threading.Thread(target=read, daemon=True).start()

    def stop() -> None:
        stream.close()
        runtime.close()

    return stop


def measure_events(n: Node, changes: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, start in (("grpcio", _grpcio_reader), ("http2", _own_reader)):
        events: list[ContainerEvent] = []
        ready = threading.Event()
        stop = start(n.endpoint, events, ready)
        ready.wait()
        while not events:  # subscribed: a marker pod's events arrived
            n.ask("remove", uid=n.ask("create")["uid"])
            time.sleep(0.05)
        time.sleep(0.2)
        events.clear()
        main = threading.get_native_id()

        sent = [0]

        def run(sent: list[int] = sent) -> None:
            for _ in range(changes):
                created = n.ask("create")
                sent[0] += created["events"] + n.ask("remove", uid=created["uid"])["events"]
                time.sleep(0.01)
            time.sleep(0.3)

        before = thread_cpu()
        run()
        after = thread_cpu()
        seconds = sum(after[t] - before.get(t, 0.0) for t in after if t != main)
        stop()
        if len(events) != sent[0]:
            raise RuntimeError(f"{name} read {len(events)} events of the {sent[0]} the node sent")
        results[name] = {
            "events": len(events),
            "cpu_us_per_event": seconds / max(len(events), 1) * 1e6,
        }
    results["ratio"] = results["http2"]["cpu_us_per_event"] / results["grpcio"]["cpu_us_per_event"]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and changes")
    parser.add_argument("--json", action="store_true", help="print the JSON result")
    parser.add_argument("--output", default=str(RESULTS), help="where to write the JSON")
    args = parser.parse_args(argv)
    calls, changes = (1_000, 100) if args.quick else (5_000, 400)
    try:
        with node(5_000) as n:
            result: dict[str, Any] = {
                "mode": "quick" if args.quick else "full",
                "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "load_before": list(os.getloadavg()),
                "relist_of_one_pod": measure_relists(n, calls),
                "event_stream": measure_events(n, changes),
                "load_after": list(os.getloadavg()),
            }
    except RuntimeError as exc:
        print(f"bench_http2: broken run: {exc}", file=sys.stderr)
        return 2
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result, indent=2))
    relist, events = result["relist_of_one_pod"], result["event_stream"]
    print(
        f"relist of one pod: grpcio {relist['grpcio']['cpu_us_per_relist']:.0f} us, own HTTP/2 "
        f"{relist['http2']['cpu_us_per_relist']:.0f} us of CPU ({relist['ratio']:.2f}x); "
        f"list calls {relist['grpcio']['list_calls']} / {relist['http2']['list_calls']}, "
        f"answer bytes {relist['grpcio']['answer_bytes']} / {relist['http2']['answer_bytes']}"
    )
    print(
        f"event stream: grpcio {events['grpcio']['cpu_us_per_event']:.0f} us, own HTTP/2 "
        f"{events['http2']['cpu_us_per_event']:.0f} us of CPU per event ({events['ratio']:.2f}x) "
        f"over {events['grpcio']['events']} / {events['http2']['events']} events"
    )
    print(f"load average: before {result['load_before']}, after {result['load_after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
