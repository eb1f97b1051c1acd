"""The agents' benchmark (``benchmarks/bench_agents.py``) run small, so its harness cannot rot:
the simulated runtime in its own process, three agent processes straight at it and through
``podcache serve --cri-listen``. Counts and equality only, never a time; and its comparisons and
per-event attribution shown able to tell a difference."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from podcache.cri.proto import api_pb2 as pb

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_agents.py"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_agents", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_agents"] = module
    spec.loader.exec_module(module)
    return module


bench = _load()
STATUS = ("ContainerStatus", "PodSandboxStatus")


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    mode = bench.Mode(
        pods=30, seconds=6.0, poll_period=2.0, start_cost_pods=60, latency_samples=20, grace=60.0
    )
    measured: dict[str, Any] = bench.measure(mode)
    return measured


def _agents(phase: dict[str, Any], method: str) -> int:
    return sum(phase["agent_calls"].get(method, {}).values())


@pytest.mark.timeout(600)
def test_direct_every_agent_call_reaches_the_runtime(result: dict[str, Any]) -> None:
    direct = result["direct"]
    for method in (*STATUS, "ImageStatus"):
        assert direct["runtime_calls"][method]["calls"] == _agents(direct, method) > 0
    assert direct["per_event"]["ContainerStatus"]["calls"] > 0
    assert direct["deleted"]["asked"] > 0
    assert direct["deleted"].get("answered", 0) == 0


@pytest.mark.timeout(600)
def test_through_the_socket_never_more_upstream_calls_than_asked(result: dict[str, Any]) -> None:
    for name in bench.SOCKET_PHASES:
        phase = result[name]
        assert _agents(phase, "ContainerStatus") > 0
        for method in STATUS:
            assert phase["upstream_status"].get(method, 0) <= _agents(phase, method)


@pytest.mark.timeout(600)
def test_departed_containers_answered_only_when_kept(result: dict[str, Any]) -> None:
    """Every DELETED container's answer through the socket is a departed one (its header
    says so), and there are some with ``--cri-keep-departed``, none without. (The share
    answered is the benchmark's target, judged in its report.)"""
    kept = result["config"]["keep_departed"] is not None
    for name in bench.SOCKET_PHASES:
        deleted = result[name]["deleted"]
        answered = deleted.get("answered", 0)
        assert answered == deleted.get("departed header", 0)
        assert (answered > 0) == (kept and deleted.get("asked", 0) > 0)


@pytest.mark.timeout(600)
def test_answers_equal_at_rest_and_when_comparable(result: dict[str, Any]) -> None:
    at_rest = result["at_rest"]
    assert at_rest["settled"]
    assert sum(at_rest["compared"].values()) > 0
    assert all(kind.endswith(" equal") for kind in at_rest["compared"]), at_rest
    for name in bench.SOCKET_PHASES:
        assert result[name]["pairs"].get("equal", 0) > 0
        assert result[name]["pairs"].get("differ", 0) == 0


def _answer(message: Any, departed: str | None = None) -> Any:
    return bench.Answer(message.SerializeToString(), "OK", departed)


def test_a_different_answer_is_told_apart_and_the_answer_time_is_not() -> None:
    def sandbox(state: Any, timestamp: int) -> Any:
        status = pb.PodSandboxStatus(id="s", state=state)
        return pb.PodSandboxStatusResponse(status=status, timestamp=timestamp)

    ready = _answer(sandbox(pb.SANDBOX_READY, 1))
    assert bench.verdict("PodSandboxStatus", ready, _answer(sandbox(pb.SANDBOX_READY, 2))) == (
        "equal"
    )
    assert bench.verdict("PodSandboxStatus", ready, _answer(sandbox(pb.SANDBOX_NOTREADY, 1))) == (
        "differ"
    )
    info = pb.ContainerStatusResponse(info={"info": "{}"})
    plain = _answer(pb.ContainerStatusResponse())
    assert bench.verdict("ContainerStatus", _answer(info), plain) == "differ"
    missing = bench.Answer(None, "NOT_FOUND", None)
    assert bench.verdict("ContainerStatus", plain, missing) == "differ"
    kept = _answer(pb.ContainerStatusResponse(), departed="2026-12-06T06:00:00Z")
    assert bench.verdict("ContainerStatus", kept, missing) == "departed"
    assert bench.verdict("ContainerStatus", missing, missing) == "equal"


def test_upstream_calls_are_counted_to_the_event_before_them_within_the_window() -> None:
    window = 2.0
    events = [
        [10.0, 0, "c1", "s1", True],
        [20.0, 3, "c1", "s1", False],
        [30.0, 3, "s1", "s1", False],  # the sandbox deleted: its status not carried
    ]
    calls = [
        [at, method, named, True, 100, "podcache", verbose]
        for at, method, named, verbose in (
            (9.0, "ContainerStatus", "c1", False),  # before any event: not the event's
            (10.1, "ContainerStatus", "c1", False),
            (10.2, "ContainerStatus", "c1", True),  # verbose: the event did not carry it
            (10.0 + window + 0.1, "ContainerStatus", "c1", False),  # past the window
            (20.1, "ContainerStatus", "c1", False),
            (20.2, "PodSandboxStatus", "s1", False),
            (20.3, "ContainerStatus", "other", False),
            (30.1, "PodSandboxStatus", "s1", False),
        )
    ]
    found = bench.per_event(events, calls, window)
    assert found["ContainerStatus"] == {
        "events": 3,
        "calls": 3,
        "max_per_event": 1.5,
        "max_per_event_not_sandbox": 1.5,
        "ids_over_one": 1,
        "after_carrying_event": 1,
    }
    assert found["PodSandboxStatus"]["calls"] == 2
    assert found["PodSandboxStatus"]["after_carrying_event"] == 1
