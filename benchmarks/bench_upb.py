"""Why podcache reads events and list answers with its own C reader (``cri/_wire.c``, through
``cri/eventwire.py`` and ``cri/convert.py``): against upb, protobuf's own parser (the default
Python protobuf backend), each turned into the same result.

    .venv/bin/python benchmarks/bench_upb.py [--quick] [--rounds 5] [--json]

1. **Events, us per event**: the events of a simulated node's changes (``bench_eventwire``'s:
   pods created, crash-looping, stopped and removed, each with its sandbox status and its
   containers' statuses), read into ``EventFields`` by the C reader (``event_fields``) and by
   upb (``ContainerEventResponse.FromString``, then the same fields taken from the message).
   Every event's two results are held equal (any difference fails the run, exit 2).
2. **Listings, ms per listing**: a node's two list answers (``bench_refresh``'s kubelet-shaped
   node, 110 and 5,000 pods) turned into a ``PodList`` with its indexes, cold: through the C
   list reader (``pods_from_wire``) and through upb's messages (``pods_from_responses``, the
   path where the extension is not built); the two ``PodList`` held equal.
3. **The GIL while a big answer is read** (the attack of an event whose sandbox status holds
   16 MiB of labels, and a 5,000-pod ``ListContainers`` answer read as the converter reads a
   large one, in pieces of ``READ_PIECE_BYTES`` cut between items, each piece one call of
   either reader): a thread that sleeps 1 ms over and over measures how late it wakes while
   the main thread reads the answer again and again, with each reader, under serve's switch
   interval of 1 ms: p99 and worst lateness in ms. A reader that holds the GIL for a whole
   parse makes every other thread (the event loop's) wait that long.

Each measurement runs ``--rounds`` rounds, the readers interleaved within each (C, upb, C,
upb); figures are medians over rounds with the lowest and highest, ratios are upb's over C's
in the same round. Prints a table (``--json``: the figures as JSON).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_eventwire import big_event, simulated_events  # noqa: E402 -- after sys.path, above
from bench_refresh import make_responses  # noqa: E402 -- after sys.path names benchmarks/
from google.protobuf.internal import api_implementation  # noqa: E402 -- after sys.path, above
from plumbing import best_pass, print_figures, reason, span  # noqa: E402 -- as above

from podcache.cri import eventwire  # noqa: E402 -- after sys.path names benchmarks/
from podcache.cri.convert import (  # noqa: E402 -- after sys.path names benchmarks/
    WIRE_READER,
    pods_from_responses,
    pods_from_wire,
    read_containers,
    split_items,
)
from podcache.cri.converter import READ_PIECE_BYTES  # noqa: E402 -- after sys.path, above
from podcache.cri.proto import api_pb2 as pb  # noqa: E402 -- after sys.path names benchmarks/
from podcache.model import PodList  # noqa: E402 -- after sys.path names benchmarks/

RUNTIME = "containerd"
SWITCH_INTERVAL = 0.001
"""The GIL's switch interval ``podcache serve`` sets (Python code hands the GIL over this often;
one C call holds it until it returns)."""
Reader = Callable[[bytes], object]


# -- events --------------------------------------------------------------------------------------
def upb_event_fields(data: bytes) -> eventwire.EventFields:
    """``event_fields(data)`` through upb: the message decoded whole, then the fields taken."""
    event = pb.ContainerEventResponse.FromString(data)
    sandbox = event.pod_sandbox_status
    extra = sandbox.network.additional_ips
    statuses = event.containers_statuses
    return eventwire.EventFields(
        container_event_type=event.container_event_type,
        container_id=event.container_id,
        created_at=event.created_at,
        sandbox_id=sandbox.id,
        pod_uid=sandbox.metadata.uid,
        sandbox_state=sandbox.state,
        ip=sandbox.network.ip,
        additional_ips=tuple(ip.ip for ip in extra[: eventwire.MAX_ADDITIONAL_IPS]),
        additional_ips_dropped=max(0, len(extra) - eventwire.MAX_ADDITIONAL_IPS),
        network_mode=sandbox.linux.namespaces.options.network,
        pod_name=sandbox.metadata.name,
        pod_namespace=sandbox.metadata.namespace,
        sandbox_created_at=sandbox.created_at,
        containers=tuple(
            (
                c.id,
                c.metadata.name,
                c.metadata.attempt,
                c.state,
                c.created_at,
                c.image.image,
                c.image_ref,
            )
            for c in statuses[: eventwire.MAX_EVENT_CONTAINERS]
        ),
        containers_dropped=max(0, len(statuses) - eventwire.MAX_EVENT_CONTAINERS),
    )


def check_events(events: Sequence[bytes]) -> None:
    for data in events:
        if eventwire.event_fields(data) != upb_event_fields(data):
            print("bench_upb: the two readers read an event differently", file=sys.stderr)
            raise SystemExit(2)


def us_per_item(
    readers: dict[str, Reader], items: Sequence[bytes], rounds: int, passes: int
) -> dict[str, list[float]]:
    """Per round, each reader's best pass (us per item); the readers interleaved."""
    out: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(rounds):
        for name, value in best_pass(readers, items, passes).items():
            out[name].append(value)
    return out


# -- listings ------------------------------------------------------------------------------------
def listing_wire(pods: int) -> tuple[bytes, bytes]:
    sandboxes, containers = make_responses(pods)
    return sandboxes.SerializeToString(), containers.SerializeToString()


def c_listing(wire: tuple[bytes, bytes]) -> PodList:
    pods = pods_from_wire(RUNTIME, *wire, None)
    pods.by_container_id("0000")  # builds every index
    return pods


def upb_listing(wire: tuple[bytes, bytes]) -> PodList:
    pods = pods_from_responses(
        RUNTIME,
        pb.ListPodSandboxResponse.FromString(wire[0]),
        pb.ListContainersResponse.FromString(wire[1]),
    )
    pods.by_container_id("0000")
    return pods


def ms_per_listing(wire: tuple[bytes, bytes], rounds: int, passes: int) -> dict[str, list[float]]:
    if c_listing(wire) != upb_listing(wire):
        print("bench_upb: the two readers list the node differently", file=sys.stderr)
        raise SystemExit(2)
    readers: dict[str, Callable[[tuple[bytes, bytes]], object]] = {
        "c": c_listing,
        "upb": upb_listing,
    }
    out: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(rounds):
        for name, us in best_pass(readers, [wire], passes).items():
            out[name].append(us / 1000)
    return out


def _upb_piece(piece: memoryview) -> pb.ListContainersResponse:
    """A piece decoded by upb, which takes any buffer (its stubs say bytes), uncopied."""
    return pb.ListContainersResponse.FromString(cast("bytes", piece))


# -- the GIL -------------------------------------------------------------------------------------
def lateness_ms(work: Callable[[], object], seconds: float) -> dict[str, float]:
    """How late a thread sleeping 1 ms at a time wakes while ``work`` runs over and over."""
    late: list[float] = []
    running = threading.Event()
    running.set()

    def sleeper() -> None:
        while running.is_set():
            began = time.perf_counter()
            time.sleep(0.001)
            late.append((time.perf_counter() - began - 0.001) * 1000)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    thread = threading.Thread(target=sleeper, daemon=True)
    thread.start()
    ends = time.monotonic() + seconds
    reads = 0
    try:
        while time.monotonic() < ends:
            work()
            reads += 1
    finally:
        running.clear()
        thread.join()
        sys.setswitchinterval(interval)
    late.sort()
    return {"p99": late[int(0.99 * (len(late) - 1))], "max": late[-1], "reads": reads}


def gil_rounds(readers: dict[str, Callable[[], object]], rounds: int,
               seconds: float) -> dict[str, list[dict[str, float]]]:  # fmt: skip
    out: dict[str, list[dict[str, float]]] = {name: [] for name in readers}
    for _ in range(rounds):
        for name, work in readers.items():
            out[name].append(lateness_ms(work, seconds))
    return out


# -- the report ----------------------------------------------------------------------------------
def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


def compared(by_reader: dict[str, list[float]]) -> dict[str, Any]:
    return {
        "c": spread(by_reader["c"]),
        "upb": spread(by_reader["upb"]),
        "upb_over_c": statistics.median(
            u / c for u, c in zip(by_reader["upb"], by_reader["c"], strict=True)
        ),
    }


def measure(rounds: int, quick: bool) -> dict[str, Any]:
    events = simulated_events(5 if quick else 30)
    check_events(events)
    passes = 2 if quick else 5
    result: dict[str, Any] = {
        "events": len(events),
        "event_us": compared(
            us_per_item(
                {"c": eventwire.event_fields, "upb": upb_event_fields}, events, rounds, passes
            )
        ),
        "listing_ms": {},
    }
    for pods in (110,) if quick else (110, 5_000):
        wire = listing_wire(pods)
        result["listing_ms"][str(pods)] = compared(ms_per_listing(wire, rounds, passes))
    big = big_event()
    node = listing_wire(200 if quick else 5_000)[1]
    pieces = split_items(node, READ_PIECE_BYTES) or [memoryview(node)]
    seconds = 0.5 if quick else 3.0
    result["gil_big_event"] = gil_rounds(
        {"c": lambda: eventwire.event_fields(big), "upb": lambda: upb_event_fields(big)},
        rounds, seconds,
    )  # fmt: skip
    result["gil_listing"] = gil_rounds(
        {
            "c": lambda: [read_containers(p) for p in pieces],
            "upb": lambda: [_upb_piece(p) for p in pieces],
        },
        rounds,
        seconds,
    )
    result["listing_pieces"] = len(pieces)
    result["big_event_bytes"] = len(big)
    return result


def markdown(result: dict[str, Any], rounds: int) -> list[str]:
    lines = [
        f"podcache's C reader against upb (protobuf's backend here: {result['protobuf_backend']})"
        f", each reading into the same result; median of {rounds} rounds (lowest-highest), "
        "upb / C the median over rounds of the ratio in the same round.",
        "",
        "| what | C | upb | upb / C |",
        "|---|---:|---:|---:|",
    ]
    e = result["event_us"]
    lines.append(
        f"| event, us ({result['events']} events) | {span(e['c'], 2)} | {span(e['upb'], 2)} "
        f"| {e['upb_over_c']:.2f} |"
    )
    for pods, row in result["listing_ms"].items():
        lines.append(
            f"| listing of {pods} pods, ms | {span(row['c'], 2)} | {span(row['upb'], 2)} | "
            f"{row['upb_over_c']:.2f} |"
        )
    for key, what in GIL_ROWS.items():
        for figure in ("p99", "max"):
            c, u, ratio = _lateness(result[key], figure)
            lines.append(
                f"| a 1 ms sleeper's {figure} lateness while reading a {what}, ms | "
                f"{span(c, 1)} | {span(u, 1)} | {ratio:.1f} |"
            )
    return lines


GIL_ROWS = {"gil_big_event": "16 MiB event", "gil_listing": "5,000-pod listing in pieces"}


def _lateness(
    rows: dict[str, list[dict[str, float]]], figure: str
) -> tuple[dict[str, float], dict[str, float], float]:
    c = spread([r[figure] for r in rows["c"]])
    u = spread([r[figure] for r in rows["upb"]])
    return c, u, u["median"] / c["median"]


def reasons(result: dict[str, Any]) -> list[dict[str, Any]]:
    """CPU per event and per listing, and the sleeper's p99 lateness: upb's ratio to ours,
    and whether ours keeps its reason there (``plumbing.reason``)."""
    rows = [("event: CPU per event", result["event_us"]["upb_over_c"])]
    rows += [
        (f"listing of {pods} pods: CPU per listing", row["upb_over_c"])
        for pods, row in result["listing_ms"].items()
    ]
    rows += [
        (f"{what}: p99 lateness of another thread", _lateness(result[key], "p99")[2])
        for key, what in GIL_ROWS.items()
    ]
    return [reason(f"C reader, {name}", {"upb": ratio}) for name, ratio in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round, fewer and smaller inputs")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if eventwire.EVENT_READER != "c" or WIRE_READER != "c":
        print("bench_upb: the C extension is not built here", file=sys.stderr)
        return 1
    rounds = args.rounds or (1 if args.quick else 5)
    result = measure(rounds, args.quick)
    result["protobuf_backend"] = api_implementation.Type()
    lines = markdown(result, rounds)
    print_figures(args.json, {**result, "reasons": reasons(result)}, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
