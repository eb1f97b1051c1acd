"""Which HPACK decoder the CRI client keeps: podcache's own (``cri/wire/headers.py``) against the
``hpack`` package, on the header blocks a runtime answers calls with.

    .venv/bin/python benchmarks/bench_hpack.py [--calls 2000] [--json]

1. **Decode, us per call**: each call's answer brings two header blocks, its response headers
   (``:status`` 200, ``content-type: application/grpc``) and its trailers (``grpc-status``,
   ``grpc-message``), made by an encoder that indexes and Huffman-codes as grpc-go's does
   (``hpack.Encoder``: containerd's and CRI-O's servers are grpc-go). ``first``: a fresh
   decoder per call (a connection's first answer: literals, Huffman strings, table inserts);
   ``steady``: one decoder for ``--calls`` calls on one connection (indexed fields after the
   first). Best of 7 passes, the two decoders' passes interleaved; each decoder's headers are
   held to the other's (any difference fails the run).
2. **Import, ms**: a fresh interpreter importing each decoder's module (``-X importtime``'s
   cumulative figure of its row, best of 5) once what the one-shot read imports before it is
   imported: what a CLI command that reads once pays for it (``hpack`` brings ``logging``).

Prints a table (``--json``: the figures as JSON); exit 2 on a broken run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import hpack  # noqa: E402 -- after sys.path names the repository

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    costs = decode_costs(args.calls)
    imports = {"podcache": import_ms("podcache.cri.wire.headers"), "hpack": import_ms("hpack")}
    if args.json:
        print(json.dumps({"decode_us_per_call": costs, "import_ms": imports}, indent=2))
        return 0
    print(f"{'decoder':10} {'first us/call':>14} {'steady us/call':>15} {'import ms':>10}")
    for name, cost in costs.items():
        print(f"{name:10} {cost['first']:14.2f} {cost['steady']:15.2f} {imports[name]:10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
