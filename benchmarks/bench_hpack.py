"""Which HPACK decoder the CRI client keeps: podcache's own (``cri/wire/headers.py``) against the
``hpack`` package, on the header blocks a runtime answers calls with.

    .venv/bin/python benchmarks/bench_hpack.py [--calls 2000] [--rounds 5] [--json]

1. **Decode, us per call**: each call's answer brings two header blocks, its response headers
   (``:status`` 200, ``content-type: application/grpc``) and its trailers (``grpc-status``,
   ``grpc-message``), made by an encoder that indexes and Huffman-codes as grpc-go's does
   (``hpack.Encoder``: containerd's and CRI-O's servers are grpc-go). ``first``: a fresh
   decoder per call (a connection's first answer: literals, Huffman strings, table inserts);
   ``steady``: one decoder for ``--calls`` calls on one connection (indexed fields after the
   first). Each round is the best of 7 passes, the two decoders' passes interleaved; the
   figures are the medians over ``--rounds`` rounds with the lowest and highest, the ratios
   the median over rounds of ``hpack``'s over ours in the same round. Each decoder's headers
   are held to the other's (any difference fails the run).
2. **Import, ms**: a fresh interpreter importing each decoder's module (``-X importtime``'s
   cumulative figure of its row, best of 5) once what the one-shot read imports before it is
   imported: what a CLI command that reads once pays for it (``hpack`` brings ``logging``).

Prints a table (``--json``: the figures as JSON); exit 2 on a broken run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import hpack  # noqa: E402 -- after sys.path names the repository
from plumbing import reason  # noqa: E402 -- benchmarks/ is the script's own directory

from podcache.cri.wire.headers import HPACKDecoder  # noqa: E402 -- after sys.path, as above

_LIMIT = 128 * 1024
_PASSES = 7
_RESPONSE = [(":status", "200"), ("content-type", "application/grpc")]
_TRAILERS = [("grpc-status", "0"), ("grpc-message", "")]

Decode = Callable[[object, bytes], list[tuple[bytes, bytes]]]


def _answers(calls: int) -> list[bytes]:
    encoder = hpack.Encoder()
    blocks = []
    for _ in range(calls):
        blocks += [encoder.encode(_RESPONSE), encoder.encode(_TRAILERS)]
    return blocks


def _ours() -> object:
    return HPACKDecoder(max_header_list_size=_LIMIT)


def _library() -> object:
    return hpack.Decoder(max_header_list_size=_LIMIT)


def _decode_ours(decoder: object, block: bytes) -> list[tuple[bytes, bytes]]:
    assert isinstance(decoder, HPACKDecoder)
    return decoder.decode(block)


def _decode_library(decoder: object, block: bytes) -> list[tuple[bytes, bytes]]:
    assert isinstance(decoder, hpack.Decoder)
    return [(bytes(n), bytes(v)) for n, v in decoder.decode(block, raw=True)]


_DECODERS: dict[str, tuple[Callable[[], object], Decode]] = {
    "podcache": (_ours, _decode_ours),
    "hpack": (_library, _decode_library),
}


def _pass(make: Callable[[], object], decode: Decode, blocks: list[bytes], fresh: bool) -> float:
    """Seconds to decode ``blocks`` two by two (one call's), a fresh decoder per call or not."""
    decoder = make()
    began = time.perf_counter()
    for index in range(0, len(blocks), 2):
        if fresh:
            decoder = make()
        decode(decoder, blocks[index])
        decode(decoder, blocks[index + 1])
    return time.perf_counter() - began


def decode_costs(calls: int) -> dict[str, dict[str, float]]:
    """us per call of each decoder, first answers and steady ones (best of the passes)."""
    steady = _answers(calls)
    first = _answers(1) * calls
    for blocks in (steady, first):
        made = {name: make() for name, (make, _) in _DECODERS.items()}
        for block in blocks:
            got = {name: _DECODERS[name][1](d, block) for name, d in made.items()}
            if got["podcache"] != got["hpack"]:
                raise SystemExit(2)
    best = {name: {"first": 1e9, "steady": 1e9} for name in _DECODERS}
    for _ in range(_PASSES):
        for name, (make, decode) in _DECODERS.items():
            for shape, blocks in (("first", first), ("steady", steady)):
                seconds = _pass(make, decode, blocks, fresh=shape == "first")
                best[name][shape] = min(best[name][shape], seconds / calls * 1e6)
    return best


_BEFORE = "podcache.cri.endpoint, podcache.cri.wire"
"""What the one-shot read has imported before its decoder, either way."""


def import_ms(module: str, runs: int = 5) -> float:
    """ms a fresh interpreter takes to import ``module`` once ``_BEFORE`` is (its row's
    cumulative figure: it and what it brings), the best of ``runs``."""
    best = float("inf")
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {_BEFORE}; import {module}"],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONPATH": str(ROOT / "src")},
        )
        line = next(x for x in done.stderr.splitlines() if x.rstrip().endswith(f"| {module}"))
        best = min(best, int(line.split("|")[1]) / 1000)
    return best


def rounds_of(calls: int, rounds: int) -> dict[str, Any]:
    """``decode_costs`` ``rounds`` times: each figure's median, lowest and highest, and the
    median of hpack's over ours in the same round."""
    runs = [decode_costs(calls) for _ in range(rounds)]
    out: dict[str, Any] = {"decode_us_per_call": {}, "spread": {}, "hpack_over_ours": {}}
    for name in _DECODERS:
        out["decode_us_per_call"][name] = {}
        out["spread"][name] = {}
        for shape in ("first", "steady"):
            values = [run[name][shape] for run in runs]
            out["decode_us_per_call"][name][shape] = statistics.median(values)
            out["spread"][name][shape] = [min(values), max(values)]
    for shape in ("first", "steady"):
        out["hpack_over_ours"][shape] = statistics.median(
            run["hpack"][shape] / run["podcache"][shape] for run in runs
        )
    return out


def reasons(figures: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        reason(f"HPACK decoder, {shape} answers: CPU per call", {"hpack": ratio})
        for shape, ratio in figures["hpack_over_ours"].items()
    ]


def markdown(figures: dict[str, Any], imports: dict[str, float], rounds: int) -> list[str]:
    lines = [
        f"HPACK: podcache's decoder against the hpack package, median of {rounds} rounds "
        "(lowest-highest) of each round's best pass; x ours: hpack's over ours in the same "
        "round.",
        "",
        "| decoder | first answer us/call | steady us/call | import ms |",
        "|---|---:|---:|---:|",
    ]
    for name, cost in figures["decode_us_per_call"].items():
        spread = figures["spread"][name]
        cells = [
            f"{cost[shape]:.2f} ({spread[shape][0]:.2f}-{spread[shape][1]:.2f})"
            for shape in ("first", "steady")
        ]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {imports[name]:.2f} |")
    ratio = figures["hpack_over_ours"]
    lines.append(f"| x ours (hpack) | {ratio['first']:.2f} | {ratio['steady']:.2f} | "
                 f"{imports['hpack'] / imports['podcache']:.1f} |")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = rounds_of(args.calls, args.rounds)
    imports = {"podcache": import_ms("podcache.cri.wire.headers"), "hpack": import_ms("hpack")}
    lines = markdown(figures, imports, args.rounds)
    if args.json:
        out = {**figures, "import_ms": imports, "reasons": reasons(figures), "markdown": lines}
        print(json.dumps(out, indent=2))
        return 0
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
