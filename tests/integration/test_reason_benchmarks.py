"""The benchmarks that give podcache's own parts their reason (docs/architecture.md: the
HTTP/1.1 server against uvicorn, the HTTP/2 client against h2 and grpcio, the C reader
against upb, the HPACK decoder against hpack) run here in their quick mode, so none can rot.

Each benchmark holds the contenders' answers to each other itself (bodies, answer bytes,
decoded fields; exit 2 on a difference); these tests check that it ran to the end, that every
contender was measured in every scenario, and the counts of what was asked and answered.
Never a time: how fast is the benchmarks' report, not a test's verdict.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args, "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)
    # What benchmarks/run reports of it: its table, and a verdict per figure that matters.
    assert figures["markdown"][-1].startswith("|")
    assert figures["reasons"]
    assert all(isinstance(reason["holds"], bool) for reason in figures["reasons"])
    return figures


def test_benchmarks_run_runs_and_reports_each_of_them() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import report
        import runner
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    keys = {"reasons_http1", "reasons_h2", "reasons_upb", "reasons_hpack"}
    assert keys <= {bench.key for bench in runner.BENCHMARKS}
    assert keys <= set(report.SECTIONS)


@pytest.mark.timeout(660)
def test_the_http1_server_is_measured_against_uvicorn_in_every_scenario() -> None:
    figures = _run("bench_http1_uvicorn.py", "--quick")
    assert set(figures["table"]) == {"load", "slowloris", "idle", "huge-headers", "slow-readers"}
    servers = {"podcache", "uvicorn-httptools", "uvicorn-h11"}
    for scenario, row in figures["table"].items():
        assert set(row["servers"]) == servers, scenario
        for name, server in row["servers"].items():
            assert server.get("non_2xx", 0) == 0, (scenario, name)
            assert server.get("probe_non_200", 0) == 0, (scenario, name)
    # The bodies compared were whole answers: the node's pods and one container's.
    bodies = figures["bodies"]
    assert len(bodies) == 2 and bodies["/pods"] > 0
    assert [t for t in bodies if t.startswith("/containers/") and bodies[t] > 0]
    ours = figures["table"]["huge-headers"]["servers"]["podcache"]["attack"]
    assert set(ours) - {"431", "cut", "closed_by_server", "connections"} == set()
    assert ours.get("431", 0) + ours.get("cut", 0) > 0
    loris = figures["table"]["slowloris"]["servers"]
    assert {s["attack"]["connections"] for s in loris.values()} == {20}


@pytest.mark.timeout(300)
def test_the_http2_client_is_measured_against_h2_and_grpcio() -> None:
    figures = _run("bench_h2_client.py", "--quick")
    assert figures["calls"] == 200
    for kind in ("relist", "status"):
        assert set(figures["table"][kind]) == {"podcache", "h2", "grpcio"}
        for wire in figures["wire"][kind].values():
            assert wire["sent_per_call"] > 0
            assert wire["received_per_call"] > 0
    # The same answers came back to each client (the benchmark compared them), so each
    # received the same message bytes: only the frames and headers around them differ.
    received = {w["received_per_call"] for w in figures["wire"]["status"].values()}
    assert max(received) - min(received) < 100


@pytest.mark.timeout(300)
def test_the_c_reader_is_measured_against_upb() -> None:
    figures = _run("bench_upb.py", "--quick")
    assert figures["protobuf_backend"] == "upb"
    assert figures["events"] > 0
    assert set(figures["listing_ms"]) == {"110"}
    for key in ("gil_big_event", "gil_listing"):
        assert set(figures[key]) == {"c", "upb"}
        assert all(run["reads"] > 0 for runs in figures[key].values() for run in runs)


@pytest.mark.timeout(120)
def test_the_hpack_decoder_is_measured_against_hpack() -> None:
    figures = _run("bench_hpack.py", "--calls", "20", "--rounds", "2")
    assert set(figures["decode_us_per_call"]) == {"podcache", "hpack"}
    assert set(figures["import_ms"]) == {"podcache", "hpack"}
