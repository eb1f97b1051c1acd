"""The event reader (``cri/eventwire.py``): us per event, its Python reader against the C one,
and how long each keeps other threads from running.

    .venv/bin/python benchmarks/bench_eventwire.py [--events PICKLE] [--quick] [--json]

Run on demand (not part of ``benchmarks/run``); it needs the C extension built.

1. Per event: the events of a simulated node's changes (``podcache.sim``: pods created,
   crash-looping, stopped and removed, each event with its sandbox status and the pod's
   container statuses, as containerd sends them), or ``--events``: a pickled list of event
   messages (bytes) captured from a runtime. Each reader reads every event once per pass,
   passes interleaved; the figure is the best pass's us per event (the machine's noise only
   ever adds). The ratio is Python's over C's, measured in the same run. The same for
   ``status_fields`` over the sandboxes' ``PodSandboxStatusResponse`` answers.
2. The GIL: a thread ticks (a Python loop counting its turns) while the main thread reads a
   16 MiB event of small labels (about 1.6 million fields) over and over: with the C reader
   from bytes (the scan runs with the GIL released), from a bytearray (the same scan with the
   GIL held: mutable input), and with the Python reader. Reported: the ticker's turns taken
   while the main thread is inside a read, and their rate as a share of the ticker's rate
   alone; then the same turns with no forced switch (a 60 s switch interval, a ticker that
   gives the GIL up after each turn): only a read that releases the GIL lets it turn at all.
   Also the scan time of the worst input kept under the GIL: 64 KiB of two-byte fields, just
   under the release threshold.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pickle
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from plumbing import best_pass

from podcache.cri import eventwire
from podcache.cri.proto import api_pb2 as pb
from podcache.sim.population import Population
from podcache.sim.server import event_message, sandbox_status_message

Reader = Callable[[bytes], object]


def simulated_events(pods: int) -> list[bytes]:
    """The events of ``pods`` pods each created, crash-looping twice, stopped and removed, on
    a node of 100 pods."""
    population = Population(pods=100, seed=22)
    changes = []
    for _ in range(pods):
        uid, events = population.create_pod()
        changes += events
        for _ in range(2):
            with contextlib.suppress(ValueError):  # a pod whose main container does not run
                changes += population.crash_container(uid)
        changes += population.stop_pod(uid) + population.remove_pod(uid)
    return [event_message(change).SerializeToString() for change in changes]


def status_answers(pods: int) -> list[bytes]:
    sandboxes = Population(pods=pods, seed=22).snapshot().sandboxes
    return [
        pb.PodSandboxStatusResponse(status=sandbox_status_message(s)).SerializeToString()
        for s in sandboxes
    ]


def us_per_message(
    readers: dict[str, Reader], messages: Sequence[bytes], passes: int
) -> dict[str, float]:
    """Best pass's us per message of each reader, passes interleaved (wall clock)."""
    return best_pass(readers, messages, passes, time.perf_counter_ns)


class Ticker:
    """A thread that counts its loop turns: all of them, and those taken while the main thread
    is inside a read (``reading``, which the main thread sets around each call)."""

    def __init__(self, *, yielding: bool = False) -> None:
        self.ticks = 0
        self.ticks_reading = 0
        self.reading = False
        self._yielding = yielding  # each turn gives the GIL up (sleep(0)) as it ends
        self._running = True
        self._thread = threading.Thread(target=self._run, name="ticker", daemon=True)

    def _run(self) -> None:
        while self._running:
            self.ticks += 1
            if self.reading:
                self.ticks_reading += 1
            if self._yielding:
                time.sleep(0)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._running = False
        self._thread.join()


def turns_inside_without_forced_switches(work: Callable[[], object], reads: int) -> float:
    """The ticker's turns per read while the main thread is inside ``work``, with the switch
    interval at 60 s and a ticker that gives the GIL up after each turn: the GIL changes hands
    only where a thread releases it itself, so a read that holds it gives the ticker none."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(60)
    try:
        with Ticker(yielding=True) as ticker:
            for _ in range(reads):
                ticker.reading = True
                work()
                ticker.reading = False
    finally:
        sys.setswitchinterval(interval)
    return ticker.ticks_reading / reads


def ticker_share(work: Callable[[], object], seconds: float) -> dict[str, float]:
    """The ticker's rate while the main thread is inside ``work`` (called over and over for
    ``seconds``), as a share of its rate while the main thread sleeps. A read that holds the
    GIL throughout gives it none: it can only run while a read has released the GIL (or, for
    Python code, at the switch interval's forced hand-overs)."""
    with Ticker() as alone:
        time.sleep(seconds)
    alone_rate = alone.ticks / seconds
    with Ticker() as ticker:
        began = time.perf_counter()
        calls, inside = 0, 0.0
        while time.perf_counter() - began < seconds:
            entered = time.perf_counter()
            ticker.reading = True
            work()
            ticker.reading = False
            inside += time.perf_counter() - entered
            calls += 1
    return {
        "share_of_alone": ticker.ticks_reading / inside / alone_rate,
        "ticks_per_read": ticker.ticks_reading / calls,
        "ms_per_read": inside / calls * 1000,
        "ticks_per_read_no_forced_switch": turns_inside_without_forced_switches(work, 3),
    }


def big_event() -> bytes:
    """An event of 16 MiB of one-byte labels, its sandbox ID last."""
    entry = b"\x3a\x08\x0a\x03key\x12\x01v"
    labels = entry * ((16 * 1024 * 1024 - 1024) // len(entry))
    sandbox = labels + b"\x0a\x04last"
    size = len(sandbox)
    length = bytearray()
    while size > 0x7F:
        length.append(size & 0x7F | 0x80)
        size >>= 7
    length.append(size)
    return b"\x0a\x01c\x10\x01" + b"\x22" + bytes(length) + sandbox


def worst_kept_scan_us(passes: int) -> float:
    """us to read 64 KiB (less a byte: under the threshold) of two-byte fields (field 9, varint
    0): the densest input the C reader scans with the GIL held."""
    data = b"\x48\x00" * (32 * 1024 - 1)
    return us_per_message({"c": eventwire.event_fields}, [data], passes * 20)["c"]


def measure(events: list[bytes], quick: bool) -> dict[str, Any]:
    passes = 5 if quick else 20
    sizes = sorted(len(e) for e in events)
    per_event = us_per_message(
        {"python": eventwire.event_fields_python, "c": eventwire.event_fields}, events, passes
    )
    answers = status_answers(100)
    per_status = us_per_message(
        {"python": eventwire.status_fields_python, "c": eventwire.status_fields}, answers, passes
    )
    big = big_event()
    seconds = 1.0 if quick else 3.0
    mutable = bytearray(big)
    gil = {
        "c_bytes": ticker_share(lambda: eventwire.event_fields(big), seconds),
        "c_bytearray": ticker_share(lambda: eventwire.event_fields(mutable), seconds),  # type: ignore[arg-type]
        "python": ticker_share(lambda: eventwire.event_fields_python(big), seconds),
    }
    return {
        "events": len(events),
        "event_bytes": {"min": sizes[0], "median": statistics.median(sizes), "max": sizes[-1]},
        "event_us": per_event,
        "event_ratio": per_event["python"] / per_event["c"],
        "status_answers": len(answers),
        "status_us": per_status,
        "status_ratio": per_status["python"] / per_status["c"],
        "big_event_bytes": len(big),
        "gil": gil,
        "worst_kept_scan_us": worst_kept_scan_us(passes),
        "big_scan_ms": {
            name: us / 1000
            for name, us in us_per_message(
                {"c": eventwire.event_fields, "python": eventwire.event_fields_python},
                [big],
                2 if quick else 5,
            ).items()
        },
    }


def report(figures: dict[str, Any], source: str) -> None:
    b, e, s = figures["event_bytes"], figures["event_us"], figures["status_us"]
    print(f"{figures['events']} events from {source}: {b['min']}-{b['max']} bytes", end="")
    print(f" (median {b['median']:.0f})")
    print(f"event_fields:  Python {e['python']:.2f} us, C {e['c']:.3f} us per event", end="")
    print(f" (Python/C {figures['event_ratio']:.0f})")
    print(f"status_fields: Python {s['python']:.2f} us, C {s['c']:.3f} us per answer", end="")
    print(f" (Python/C {figures['status_ratio']:.0f})")
    print(f"{figures['big_event_bytes'] / 2**20:.1f} MiB event, a ticker thread meanwhile:")
    for name, g in figures["gil"].items():
        print(f"  {name:12s} {g['ms_per_read']:7.1f} ms per read; the ticker, inside it:", end="")
        print(
            f" {g['ticks_per_read']:9.0f} turns, {g['share_of_alone']:4.0%} of its rate alone;",
            end="",
        )
        print(f" with no forced switch {g['ticks_per_read_no_forced_switch']:.0f} turns")
    kept = figures["worst_kept_scan_us"]
    print(f"worst scan kept under the GIL (64 KiB of 2-byte fields): {kept:.0f} us")
    alone = figures["big_scan_ms"]
    print(f"the 16 MiB event's read alone: C {alone['c']:.1f} ms, Python {alone['python']:.0f} ms")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=Path, help="a pickled list of event messages (bytes)")
    parser.add_argument("--quick", action="store_true", help="fewer passes, shorter GIL runs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if eventwire.EVENT_READER != "c":
        print("bench_eventwire: the C extension is not built here", file=sys.stderr)
        return 1
    if args.events is not None:
        events = pickle.loads(args.events.read_bytes())  # the user's own file
        source = str(args.events)
    else:
        events, source = simulated_events(30), "the simulator (podcache.sim)"
    figures = measure(events, args.quick)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        report(figures, source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
