"""``OneShotRuntime`` (the CLI's one-shot reads) against ``CRIRuntime``, its reference, over real
sockets: the same listing (IPs included) and Version on the simulator, requests byte for byte
the generated module's, every failure read again by ``CRIRuntime`` (so its errors are the
reference's), and no grpcio, protobuf or asyncio imported on the way to a listing."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from podcache.cri import CRIRuntime, h2core, oneshot
from podcache.cri.endpoint import resolve_endpoint
from podcache.cri.oneshot import (
    BATCH,
    FIRST_STEP,
    STATUSES_IN_FLIGHT,
    OneShotRuntime,
)
from podcache.cri.proto import api_pb2 as pb
from podcache.cri.queries import CRI_VERSION, _list_requests
from podcache.cri.wire.methods import request
from podcache.errors import CRIError, RuntimeProtocolError, RuntimeUnavailableError
from podcache.model import Pod
from podcache.sim import SimRuntime
from tests.unit.cri.servers import (
    CannedRuntime,
    SandboxesOnly,
    grpc_runtime,
    raw_peer,
    refused_socket,
)

HEAVY = (
    "grpc",
    "google.protobuf",
    "asyncio",
    "yaml",
    "rich",
    "concurrent.futures",
    "hpack",
    "logging",
    "socket",
    "podcache.procs",
    "podcache.cache",
)
"""What a one-shot listing must not import (each costs the CLI's start-up): ``hpackdecoder``
reads the header blocks, ``_socket`` connects, and ``which IP`` reads no ``/proc``."""


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(60, seed=5, churn=0.0) as runtime:
        yield runtime


@pytest.mark.parametrize("all_", [False, True], ids=["running", "all"])
def test_the_listing_is_the_reference_clients(sim: SimRuntime, all_: bool) -> None:
    oneshot = OneShotRuntime(sim.endpoint, timeout=5.0)
    with CRIRuntime(sim.endpoint, timeout=5.0) as reference:
        assert oneshot.get_pods(all_) == reference.get_pods(all_)
        assert oneshot.version() == reference.version()
    assert oneshot.fallbacks == 0  # read by itself, not by the fallback
    assert sum(bool(pod.ips) for pod in oneshot.get_pods(all_)) > 30  # with their IPs


def test_without_ips_only_the_ips_differ(sim: SimRuntime) -> None:
    without = OneShotRuntime(sim.endpoint, timeout=5.0, ips=False).get_pods(True)
    with CRIRuntime(sim.endpoint, timeout=5.0) as reference:
        listed = reference.get_pods(True)
    assert [p.id for p in without] == [p.id for p in listed]
    assert all(not pod.ips and not pod.host_network for pod in without)
    for pod, same in zip(without, listed, strict=True):
        assert (pod.containers, pod.sandboxes, pod.labels) == (
            same.containers,
            same.sandboxes,
            same.labels,
        )


def test_requests_are_the_generated_modules() -> None:
    """The requests the one-shot read sends, through the wire's method table."""
    version = pb.VersionRequest(version=CRI_VERSION).SerializeToString()
    assert request("Version") == ("Version", version)
    for all_ in (False, True):
        sandboxes, containers = _list_requests(all_)
        assert request("ListPodSandbox", all_)[1] == sandboxes.SerializeToString()
        assert request("ListContainers", all_)[1] == containers.SerializeToString()
    sid = "ab" * 32 + "é" * 70  # a length past one varint byte
    status = pb.PodSandboxStatusRequest(pod_sandbox_id=sid).SerializeToString()
    assert request("PodSandboxStatus", sid) == ("PodSandboxStatus", status)


def test_a_failed_read_is_made_again_by_the_reference_client(tmp_path: object) -> None:
    """A runtime with ListPodSandbox only: the one-shot read fails (Version UNIMPLEMENTED), the
    reference client reads again and raises its own error."""
    path = f"{tmp_path}/cri.sock"
    with grpc_runtime(SandboxesOnly(), path) as endpoint:
        oneshot = OneShotRuntime(endpoint, timeout=2.0)
        with pytest.raises(Exception) as caught:
            oneshot.get_pods(False)
        with CRIRuntime(endpoint, timeout=2.0) as reference, pytest.raises(Exception) as expected:
            reference.get_pods(False)
        oneshot.close()
    assert type(caught.value) is type(expected.value)
    assert str(caught.value) == str(expected.value)
    assert oneshot.fallbacks == 1


def test_nothing_listening_is_the_reference_clients_error(tmp_path: object) -> None:
    endpoint = refused_socket(f"{tmp_path}/refused.sock")
    oneshot = OneShotRuntime(endpoint, timeout=2.0)
    with pytest.raises(RuntimeUnavailableError, match="refused") as caught:
        oneshot.get_pods(False)
    assert endpoint in str(caught.value)
    with pytest.raises(RuntimeUnavailableError):
        oneshot.version()
    oneshot.close()


def test_an_empty_version_field_is_a_protocol_error(tmp_path: object) -> None:
    path = f"{tmp_path}/cri.sock"
    canned = CannedRuntime(version=pb.VersionResponse(version="0.1.0", runtime_name=""))
    with grpc_runtime(canned, path) as endpoint:
        oneshot = OneShotRuntime(endpoint, timeout=2.0)
        with pytest.raises(RuntimeProtocolError, match="runtime_name"):
            oneshot.version()
        oneshot.close()


def test_the_cli_lists_without_grpc_protobuf_or_asyncio(sim: SimRuntime) -> None:
    """``podcache pods``, ``ps``, ``which IP``, ``inspect`` and ``version`` in a fresh
    interpreter: none of the heavy modules is imported (start-up time, without a clock)."""
    ip = next(ip for pod in sim_pods(sim) for ip in pod.ips)
    script = (
        "import contextlib, io, json, sys\n"
        "from podcache.cli import run\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    status = run(sys.argv[1:])\n"
        f"print(json.dumps([status, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    for args in (
        ["pods"],
        ["pods", "-o", "json"],
        ["ps", "-a"],
        ["which", ip],
        ["inspect", ip.replace(".", "-")],  # nothing matches: exit 3, still a listing
        ["version"],
    ):
        (status, heavy), stderr = _cli_in_a_fresh_interpreter(script, args, sim)
        assert status in (0, 3), (args, stderr)
        assert heavy == [], (args, heavy)


def _cli_in_a_fresh_interpreter(script: str, args: list[str], sim: SimRuntime) -> tuple[Any, str]:
    """``script`` run with ``args -r <sim>`` in a new interpreter: the JSON it printed last,
    and its stderr."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args, "-r", sim.endpoint],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def sim_pods(sim: SimRuntime) -> list[Pod]:
    with CRIRuntime(sim.endpoint) as runtime:
        return list(runtime.get_pods(False))


_ANSWER_HEADERS = (
    b"\x00\x00\x14\x01\x04\x00\x00\x00\x01"  # HEADERS, END_HEADERS, stream 1
    + b"\x88\x0f\x10\x10application/grpc"  # :status 200, content-type (static name)
)
_TRAILERS = (
    b"\x00\x00\x0f\x01\x05\x00\x00\x00\x01"  # HEADERS, END_HEADERS | END_STREAM
    + b"\x00\x0bgrpc-status\x010"  # grpc-status: 0, a new name
)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 400 Bad Request\r\n\r\n",  # not HTTP/2
        b"\x00\x00\x04\x01\x05\x00\x00\x00\x01\xff\xff\xff\xff",  # a HEADERS block hpack rejects
        b"\x00\x40\x00\x00\x00\x00\x00\x00\x01" + b"\x00" * 16_384,  # a frame over its bound
        b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + _ANSWER_HEADERS + _TRAILERS * 2,
    ],
    ids=["http1", "bad-hpack", "big-frame", "trailers-twice"],
)
def test_an_answer_that_is_not_clean_is_read_again_by_the_reference(
    tmp_path: object, answer: bytes
) -> None:
    """A hostile or broken peer: whatever the one-shot client meets, its caller gets the
    reference client's error (a podcache error naming the endpoint), never a traceback of
    the one-shot reader."""
    path = f"{tmp_path}/hostile.sock"

    def talk(conn: socket.socket) -> None:
        conn.sendall(answer)
        conn.recv(65536)

    with raw_peer(path, talk) as endpoint:
        oneshot = OneShotRuntime(endpoint, timeout=1.0)
        with pytest.raises(CRIError) as caught:
            oneshot.get_pods(False)
        oneshot.close()
    assert f"unix://{path}" in str(caught.value)
    assert oneshot.fallbacks == 1


# -- find_ips: statuses asked newest first, until every IP looked up is found --------------------


class _Addressed(CannedRuntime):
    """A canned runtime of READY sandboxes, one pod each, answering PodSandboxStatus with the
    address ``ips`` gives each sandbox ID (data swapped per example; requests recorded)."""

    ips: dict[str, str]

    def PodSandboxStatus(  # noqa: N802 (gRPC's method names)
        self, request: pb.PodSandboxStatusRequest, context: object
    ) -> pb.PodSandboxStatusResponse:
        self._got("PodSandboxStatus", request)
        sid = request.pod_sandbox_id
        return pb.PodSandboxStatusResponse(
            status=pb.PodSandboxStatus(
                id=sid,
                state=pb.SANDBOX_READY,
                network=pb.PodSandboxNetworkStatus(ip=self.ips[sid]),
            )
        )

    def hold(self, addresses: list[str]) -> None:
        """Pod ``i`` (created at second ``i``: the last is the newest) holds ``addresses[i]``."""
        self.requests.clear()
        self.ips = {f"{i:064x}": ip for i, ip in enumerate(addresses)}
        self.sandboxes = pb.ListPodSandboxResponse(
            items=[
                pb.PodSandbox(
                    id=sid,
                    metadata=pb.PodSandboxMetadata(
                        name=f"pod-{i}", uid=f"uid-{i}", namespace="default"
                    ),
                    state=pb.SANDBOX_READY,
                    created_at=(i + 1) * 1_000_000_000,
                )
                for i, sid in enumerate(self.ips)
            ]
        )

    def status_calls(self) -> int:
        return self.methods().count("PodSandboxStatus")


@pytest.fixture(scope="module")
def addressed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[_Addressed, str]]:
    servicer = _Addressed()
    servicer.ips = {}
    path = f"{tmp_path_factory.mktemp('addressed')}/cri.sock"
    with grpc_runtime(servicer, path) as endpoint:
        yield servicer, endpoint


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    held=st.lists(st.sampled_from([f"10.0.0.{n}" for n in range(1, 25)]), min_size=1, max_size=60),
    picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=3),
    absent=st.booleans(),
)
@example(held=[f"10.0.0.{n % 24 + 1}" for n in range(30)], picks=[29], absent=False)
def test_find_ips_gives_each_ip_the_full_listings_pod(
    addressed: tuple[_Addressed, str], held: list[str], picks: list[int], absent: bool
) -> None:
    """The model: ``by_ip`` of a listing with every pod's IPs (an address held by two pods is
    the newer pod's). ``find_ips`` answers every IP looked up with that pod (or None), and
    asks no more statuses than the newest pods up to the step holding the last IP found."""
    looked_up = [held[pick % len(held)] for pick in picks] + (["10.0.1.1"] if absent else [])
    servicer, endpoint = addressed
    servicer.hold(held)
    full = OneShotRuntime(endpoint, timeout=5.0).get_pods(False)
    asked_all = servicer.status_calls()
    servicer.requests.clear()
    wanted = frozenset(looked_up)
    found = OneShotRuntime(endpoint, timeout=5.0, find_ips=wanted).get_pods(False)
    for ip in wanted:
        holder = full.by_ip(ip)
        assert (holder and holder.id) == ((pod := found.by_ip(ip)) and pod.id), ip
        if holder is not None:  # the newest pod holding it, as the model says
            assert holder.id == f"uid-{max(i for i, a in enumerate(held) if a == ip)}"
    assert asked_all == len(held)
    newest_first = held[::-1]
    if wanted <= set(held):  # each found: asked up to the step of the last one found
        depth = max(newest_first.index(ip) for ip in wanted) + 1
        step, needed = FIRST_STEP, 0
        while needed < depth:
            needed, step = needed + step, min(2 * step, BATCH)
        assert servicer.status_calls() == min(needed, len(held))
    else:  # one held by nobody: every pod asked
        assert servicer.status_calls() == len(held)


def test_statuses_are_asked_as_the_getters_ask_them(
    addressed: tuple[_Addressed, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``which`` of the oldest pod's IP, 110 pods: every status asked, never more than
    ``STATUSES_IN_FLIGHT`` in flight, a new one as soon as one ends (so exactly that many)."""
    servicer, endpoint = addressed
    servicer.hold([f"10.1.{i // 200}.{i % 200 + 1}" for i in range(110)])
    counted = {"sent": 0, "ended": 0, "most": 0}
    open_call, end = oneshot._Connection._open, h2core.Stream.end

    def counting_open(
        self: oneshot._Connection, method: str, body: bytes, out: bytearray, *, unary: bool = False
    ) -> int:
        counted["sent"] += 1
        counted["most"] = max(counted["most"], counted["sent"] - counted["ended"])
        return open_call(self, method, body, out, unary=unary)

    def counting_end(call: h2core.Stream, code: int, details: str) -> None:
        counted["ended"] += call.status is None
        end(call, code, details)

    monkeypatch.setattr(oneshot._Connection, "_open", counting_open)
    monkeypatch.setattr(h2core.Stream, "end", counting_end)
    found = OneShotRuntime(endpoint, timeout=5.0, find_ips=frozenset({"10.1.0.1"})).get_pods()
    assert (pod := found.by_ip("10.1.0.1")) is not None and pod.id == "uid-0"
    assert servicer.status_calls() == 110
    assert counted["most"] == STATUSES_IN_FLIGHT


WHICH_ARGS = ("which", "10.1.0.110", "-o", "json", "-r")


def test_which_ip_asks_the_newest_pods_only(
    addressed: tuple[_Addressed, str],
) -> None:
    """``podcache which IP`` of the newest pod's address, 110 pods: one step of statuses."""
    servicer, endpoint = addressed
    servicer.hold([f"10.1.{i // 200}.{i % 200 + 1}" for i in range(110)])
    done = subprocess.run(
        [sys.executable, "-c", "from podcache.cli import main; main()", *WHICH_ARGS, endpoint],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout)["items"][0]["pod"]["id"] == "uid-109"
    assert servicer.status_calls() == FIRST_STEP


@pytest.mark.parametrize("timeout", [0, -1.0, float("inf"), float("nan"), True, "2"])
def test_a_timeout_is_refused_as_the_full_client_refuses_it(timeout: object) -> None:
    """One check (``endpoint.check_timeout``) for both clients: the same error, word for word."""
    errors = []
    for make in (CRIRuntime, OneShotRuntime):
        with pytest.raises((TypeError, ValueError)) as info:
            make("unix:///nonexistent.sock", timeout=timeout)  # type: ignore[arg-type]
        errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]


def test_a_listing_sends_its_first_calls_before_importing_msgspec_or_the_model(
    sim: SimRuntime,
) -> None:
    """``podcache pods``, ``ps`` and ``which IP``: what they import before their first write to
    the runtime leaves out msgspec and the model (docs/architecture.md §6 rule 1): those are
    imported while the runtime answers."""
    ip = next(ip for pod in sim_pods(sim) for ip in pod.ips)
    script = (
        "import contextlib, io, json, sys\n"
        "from podcache.cri import oneshot\n"
        "seen = []\n"
        "send = oneshot._Connection._send\n"
        "def first(self, data):\n"
        "    if not seen:\n"
        "        seen.append([m for m in ('msgspec', 'podcache.model') if m in sys.modules])\n"
        "    send(self, data)\n"
        "oneshot._Connection._send = first\n"
        "from podcache.cli import run\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    status = run(sys.argv[1:])\n"
        "print(json.dumps([status, seen]))\n"
    )
    for args in (["pods"], ["ps", "-a"], ["which", ip]):
        (status, seen), stderr = _cli_in_a_fresh_interpreter(script, args, sim)
        assert status == 0, (args, stderr)
        assert seen == [[]], (args, seen)


# -- begin(): the listing sent, statuses asked ahead, read later (cli.early) --------------------


def test_a_begun_read_lists_once_and_asks_each_status_once(sim: SimRuntime) -> None:
    """``begin()`` then ``get_pods(False)``: the reference's listing, IPs included, from one
    listing and one status per pod (those asked ahead are not asked again)."""
    with CRIRuntime(sim.endpoint, timeout=5.0) as reference:
        expected = reference.get_pods(False)
    sim.reset_call_counts()
    begun = OneShotRuntime(sim.endpoint, timeout=5.0)
    assert begun.begin()
    assert begun.get_pods(False) == expected
    counts = sim.call_counts()
    asked = {m: sum(k["calls"] for k in counts[m].values()) for m in counts}
    assert asked["ListPodSandbox"] == 1
    assert asked["PodSandboxStatus"] == len({pod.id for pod in expected if pod.sandboxes})
    assert begun.fallbacks == 0


def test_a_begun_read_is_not_used_for_another_listing(sim: SimRuntime) -> None:
    """``begin()`` lists READY sandboxes; ``get_pods(True)`` closes it and lists everything."""
    with CRIRuntime(sim.endpoint, timeout=5.0) as reference:
        expected = reference.get_pods(True)
    sim.reset_call_counts()
    begun = OneShotRuntime(sim.endpoint, timeout=5.0)
    assert begun.begin()
    assert begun.get_pods(True) == expected
    counts = sim.call_counts()["ListPodSandbox"]
    assert sum(kind["calls"] for kind in counts.values()) == 2  # the begun one, its own


def test_a_runtime_slower_than_the_early_wait_is_asked_nothing_ahead() -> None:
    """The listing outlasts ``EARLY_WAIT``: nothing is asked ahead, and ``get_pods`` reads
    the listing begun, as it reads its own."""
    with SimRuntime(20, seed=2, churn=0.0, latency=2 * oneshot.EARLY_WAIT) as slow:
        begun = OneShotRuntime(slow.endpoint, timeout=5.0)
        assert begun.begin()
        assert begun._begun is not None and begun._begun.ahead is None
        listed = begun.get_pods(False)
        assert sum(k["calls"] for k in slow.call_counts()["ListPodSandbox"].values()) == 1
        assert begun.fallbacks == 0
        slow.faults.latency = 0.0
        with CRIRuntime(slow.endpoint, timeout=5.0) as reference:
            assert listed == reference.get_pods(False)


def test_nothing_is_begun_where_nothing_listens(tmp_path: object) -> None:
    runtime = OneShotRuntime(refused_socket(f"{tmp_path}/gone.sock"), timeout=1.0)
    assert runtime.begin() is False
    with pytest.raises(RuntimeUnavailableError):
        runtime.get_pods(False)  # the reference's error, as without begin
    runtime.close()


def test_a_wait_that_ends_inside_a_frame_leaves_the_connection_whole(tmp_path: object) -> None:
    """``wait_answers`` runs out while a DATA frame is half sent: False, nothing taken; the
    rest, once sent, is read whole by ``answers`` (causal: the peer sends it after the wait
    returned)."""
    body = pb.VersionResponse(
        version="0.1.0", runtime_name="half", runtime_version="1"
    ).SerializeToString()
    message = b"\x00" + len(body).to_bytes(4, "big") + body
    data = len(message).to_bytes(3, "big") + b"\x00\x00\x00\x00\x00\x01" + message
    waited = threading.Event()

    def talk(conn: socket.socket) -> None:
        conn.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + _ANSWER_HEADERS + data[:12])
        waited.wait(10)
        conn.sendall(data[12:] + _TRAILERS)
        conn.recv(65536)

    with raw_peer(f"{tmp_path}/half.sock", talk) as endpoint:
        try:
            connection = oneshot._Connection(resolve_endpoint(endpoint).endpoint, timeout=5.0)
            batch = connection.send([request("Version")])
            assert connection.wait_answers(batch, 0.05) is False
            waited.set()
            (answer,) = connection.answers(batch)
            assert oneshot._message(answer) == body
            connection.close()
        finally:
            waited.set()


def test_only_one_whole_message_is_an_answer() -> None:
    """An answer that ended OK is one message, none cut short (a compressed message or a
    second one the connection core refuses as it reads: ``test_http2``)."""
    call = h2core.Stream("Version", True, 0)
    call.end(0, "")
    with pytest.raises(oneshot._UnexpectedAnswerError, match="not exactly one"):
        oneshot._message(call)  # no message
    call.messages.append(b"abc")
    assert oneshot._message(call) == b"abc"
    call.pending += b"\x00\x00\x00"  # a second one, cut short
    with pytest.raises(oneshot._UnexpectedAnswerError, match="not exactly one"):
        oneshot._message(call)
    failed = h2core.Stream("Version", True, 0)
    failed.end(5, "gone")
    with pytest.raises(oneshot._UnexpectedAnswerError, match="answered"):
        oneshot._message(failed)
