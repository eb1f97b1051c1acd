"""Node agents' CRI patterns (Falco, Datadog) straight at the runtime and through podcache's socket.

    .venv/bin/python benchmarks/bench_agents.py [--quick] [--json] [--cache-period DURATION]
    .venv/bin/python benchmarks/bench_agents.py --containerd 2.1 [--containerd-pods 100]

The node: a simulated runtime (``SimRuntime``, 1,000 pods; quick: 100) in a process of its
own, churning 5 pods a second while the agents run. Its status handlers are wrapped (in that
process only) to log each ``ContainerStatus`` and ``PodSandboxStatus`` call: when, the ID it
names, whether it was answered, the answer's bytes and the caller (its gRPC user-agent: each
agent names itself, anything else is podcache); its population's events are logged the same
way. List calls and bytes come from the simulator's own counters; ``ImageStatus`` (the
simulator has no image service: it answers UNIMPLEMENTED, on both paths alike) from its
count of unimplemented calls.

The agents, each a process of its own, all stopping at the same instant:

- **Falco-pattern** (``falcosecurity/plugins``, ``plugins/container/go-worker/pkg/container/
  cri.go``): ``Version``; ``ListContainers``, then for each container ``ContainerStatus(id,
  verbose=true)`` and, when that answered, ``PodSandboxStatus(its sandbox, verbose=false)``;
  then ``GetContainerEvents``, and for every event (the plugin's switch lets STOPPED through
  too, with CREATED, STARTED and DELETED) the same two calls, the sandbox named by the event.
- **Datadog-pattern**: every 10 s (quick: 2 s) ``ListContainers``, then per container
  ``ContainerStatus``, ``PodSandboxStatus`` and ``ImageStatus``.

Two Falco-pattern agents and one Datadog-pattern agent run for 60 s (quick: 8 s) in three
phases: **direct** (on the runtime's socket), **socket, cold** (``podcache serve
--cri-listen``, started just before: the first agents it sees; ``--cri-keep-departed 5m``
when this podcache has it), **socket, warm** (the agents restarted on the same podcache).

What is reported, per phase: the runtime's calls by method (and bytes); the upstream status
calls, and per event the upstream status calls naming its container (``ContainerStatus``) or
its sandbox (``PodSandboxStatus``) within serve's cache period after it (the freshness rule:
a status learnt from an event is given for that long), before the next event naming
the same; how many came after an event that carried the status asked for (the simulator's
events carry the sandbox's status and every remaining container's, as containerd's do, so a
plain status is carried unless the event deleted it; a verbose one, with its ``info``, never
is); the share of DELETED containers' ``ContainerStatus`` answered; the agents' latencies.

Answers compared: at quiescence (churn stopped, the socket's ListContainers equal to the
runtime's), every container's ``ContainerStatus`` (verbose and not), every sandbox's
``PodSandboxStatus`` (verbose and not) and ``ImageStatus``, through the socket and direct,
protobuf-equal after clearing ``PodSandboxStatusResponse.timestamp`` (the time of the
answer: two direct calls differ in it). During churn, one status call in ``PAIR_EVERY`` of
the agents on the socket is repeated at once on the runtime (user-agent ``bench-pair``, left
out of the upstream counts); a pair is comparable when no event named its pod from
``PAIR_MARGIN`` s before the socket's call to the end of the direct one; a socket answer for
a departed container (``podcache-departed``) where the runtime says NOT_FOUND is counted
apart. Latency side by side: at quiescence, each status call alternately through the socket
and direct. Last, what podcache's own start costs the runtime at 5,000 pods (quick: 500):
its upstream calls by method, its CPU and memory, until its calls stop.

``--containerd VERSION`` measures instead, on a private real containerd (root; run it under
``flock /tmp/podcache-containerd.lock``), every status request compared at rest and the
status latency side by side: the simulator keeps its answers encoded, containerd builds each.
``benchmarks/run`` reports the simulated node (``--json``: every figure, with ``markdown``).
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plumbing import serve_cri

from podcache.cri.proto import api_pb2 as pb
from podcache.duration import parse_duration

HERE = Path(__file__).resolve().parent
SCRIPT = str(Path(__file__).resolve())
RUNTIME = "/runtime.v1.RuntimeService/"
IMAGES = "/runtime.v1.ImageService/"
STATUS_METHODS = ("ContainerStatus", "PodSandboxStatus")
LIST_METHODS = ("ListPodSandbox", "ListContainers", "StreamPodSandboxes", "StreamContainers")
IMAGE_STATUS_PATH = IMAGES + "ImageStatus"
CHURN = 5.0
"""Pods replaced per second while the agents run."""
SERVE_PERIOD = "2s"
"""serve's default --cache-period, as deployed (deploy/base/daemonset.yaml)."""
QUIET = 1.0
"""Seconds without an event after which an agent past its end stops reading."""
PAIR_EVERY = 4
PAIR_MARGIN = 1.0
KEEP_DEPARTED = "5m"
DEPARTED_HEADER = "podcache-departed"
PAIR_AGENT = "bench-pair"
OWN_WIRE = "podcache-cache"
"""The caller of the status calls podcache's caches make themselves (their own HTTP/2 wire,
user-agent ``podcache``: a new sandbox's IPs), counted upstream but in no agent's per-event
figure; the socket's forwarded calls (grpcio's user-agent) are ``podcache``."""
_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class Mode:
    """The sizes of one run."""

    pods: int
    seconds: float
    poll_period: float
    start_cost_pods: int
    latency_samples: int
    grace: float
    """Seconds an agent may take past the end for what it already received."""
    cache_period: str | None = None
    """serve's --cache-period (None: its default, as deployed)."""


FULL = Mode(
    pods=1_000,
    seconds=60.0,
    poll_period=10.0,
    start_cost_pods=5_000,
    latency_samples=1_000,
    grace=120.0,
)
QUICK = Mode(
    pods=100, seconds=10.0, poll_period=2.0, start_cost_pods=500, latency_samples=100, grace=60.0
)
AGENTS = ("falco-1", "falco-2", "datadog-1")
PHASES = ("direct", "socket_cold", "socket_warm")
SOCKET_PHASES = PHASES[1:]


# -- comparing answers -----------------------------------------------------------------------
RESPONSES: dict[str, Any] = {
    "ContainerStatus": pb.ContainerStatusResponse,
    "PodSandboxStatus": pb.PodSandboxStatusResponse,
    "ImageStatus": pb.ImageStatusResponse,
    "ListContainers": pb.ListContainersResponse,
}


def normalized(method: str, data: bytes) -> bytes:
    """``data`` as a comparable answer: parsed and serialized deterministically, a sandbox
    status's ``timestamp`` (the time of the answer) cleared."""
    message = RESPONSES[method].FromString(data)
    if method == "PodSandboxStatus":
        message.ClearField("timestamp")
    if method == "ListContainers":
        items = sorted(c.SerializeToString(deterministic=True) for c in message.containers)
        return b"".join(items)
    result: bytes = message.SerializeToString(deterministic=True)
    return result


@dataclasses.dataclass
class Answer:
    """One call's outcome: the answer's bytes (None on an error), its code and the departed
    header's value."""

    data: bytes | None
    code: str
    departed: str | None


def same(method: str, a: Answer, b: Answer) -> bool:
    """Whether two answers to the same request are equal (errors: by code)."""
    if a.data is None or b.data is None:
        return a.data is None and b.data is None and a.code == b.code
    return normalized(method, a.data) == normalized(method, b.data)


def verdict(method: str, socket: Answer, direct: Answer) -> str:
    """equal, departed (the socket answered a departed ID the runtime no longer has) or
    differ."""
    if same(method, socket, direct):
        return "equal"
    if socket.departed is not None and direct.code == "NOT_FOUND":
        return "departed"
    return "differ"


def _identity(data: bytes) -> bytes:
    return data


class Client:
    """One agent's CRI connection (raw bytes), its calls counted and timed by method."""

    def __init__(self, target: str, agent: str) -> None:
        self.channel = grpc.insecure_channel(
            target,
            options=[
                ("grpc.primary_user_agent", agent),
                ("grpc.max_receive_message_length", -1),
                ("grpc.use_local_subchannel_pool", 1),
            ],
        )
        self.calls: dict[str, Counter[str]] = defaultdict(Counter)
        self.latency_ms: dict[str, list[float]] = defaultdict(list)
        self._stubs: dict[str, Any] = {}

    def call(self, method: str, request: bytes) -> Answer:
        stub = self._stubs.get(method)
        if stub is None:
            path = (IMAGES if method == "ImageStatus" else RUNTIME) + method
            stub = self._stubs[method] = self.channel.unary_unary(
                path, request_serializer=_identity, response_deserializer=_identity
            )
        began = time.perf_counter()
        try:
            data, call = stub.with_call(request, timeout=30)
            code, trailing = "OK", call.trailing_metadata() or ()
        except grpc.RpcError as exc:
            data, code = None, exc.code().name
            trailing = exc.trailing_metadata() or ()
        ms = (time.perf_counter() - began) * 1000
        departed = next((str(v) for k, v in trailing if k == DEPARTED_HEADER), None)
        self.calls[method][code] += 1
        self.latency_ms[method].append(round(ms, 3))
        return Answer(data, code, departed)

    def close(self) -> None:
        self.channel.close()


def container_status(verbose: bool, container_id: str) -> bytes:
    request = pb.ContainerStatusRequest(container_id=container_id, verbose=verbose)
    return request.SerializeToString()


def sandbox_status(verbose: bool, sandbox_id: str) -> bytes:
    request = pb.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id, verbose=verbose)
    return request.SerializeToString()


def image_status(image: str) -> bytes:
    return pb.ImageStatusRequest(image=pb.ImageSpec(image=image)).SerializeToString()


# -- the runtime, in a process of its own ----------------------------------------------------
class RuntimeLog:
    """Every status call the runtime answers and every event its population makes."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []
        self.events: list[list[Any]] = []
        self.lock = threading.Lock()

    def instrument(self) -> None:
        """Wrap the simulator's status handlers (this process only) to log each call."""
        from podcache.sim.server import SimServicer

        for method, field in (
            ("ContainerStatus", "container_id"),
            ("PodSandboxStatus", "pod_sandbox_id"),
        ):
            setattr(SimServicer, method, self._logged(method, field, getattr(SimServicer, method)))

    def _logged(self, method: str, field: str, handler: Any) -> Any:
        def logged(servicer: Any, request: Any, context: grpc.ServicerContext) -> Any:
            agent = str(dict(context.invocation_metadata()).get("user-agent", ""))
            caller = agent.split(maxsplit=1)[0] if agent.startswith("bench-") else "podcache"
            if agent.startswith("podcache"):  # the cache's own wire, not the socket's grpcio
                caller = OWN_WIRE
            at, verbose = time.monotonic(), bool(request.verbose)
            try:
                answer = handler(servicer, request, context)
            except BaseException:
                self.log_call([at, method, getattr(request, field), False, 0, caller, verbose])
                raise
            size = len(answer) if isinstance(answer, bytes) else answer.ByteSize()
            self.log_call([at, method, getattr(request, field), True, size, caller, verbose])
            return answer

        return logged

    def log_call(self, entry: list[Any]) -> None:
        with self.lock:
            self.calls.append(entry)

    def on_events(self, events: Sequence[Any]) -> None:
        at = time.monotonic()
        with self.lock:
            for event in events:
                sandbox_id = event.sandbox.id if event.sandbox is not None else ""
                carried = any(c.id == event.container_id for c in event.containers)
                self.events.append([at, int(event.type), event.container_id, sandbox_id, carried])

    def take(self) -> tuple[list[list[Any]], list[list[Any]]]:
        """The calls and events logged since the last take."""
        with self.lock:
            calls, self.calls = self.calls, []
            events, self.events = self.events, []
        return calls, events


def runtime_child(pods: int, seed: int) -> None:
    """Serve the simulated runtime; answer JSON commands on stdin (``churn``, ``take``,
    ``stop``) on stdout, the endpoint first."""
    from podcache.sim import SimRuntime

    log = RuntimeLog()
    log.instrument()
    with SimRuntime(pods, seed=seed) as sim:
        sim.population.subscribe(log.on_events)
        print(sim.endpoint, flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            if command["op"] == "churn":
                sim.churn = float(command["rate"])
                print(json.dumps({}), flush=True)
            elif command["op"] == "take":
                calls, events = log.take()
                counts = {"calls": sim.call_counts(), "unimplemented": sim.unimplemented_calls()}
                print(json.dumps({**counts, "status": calls, "events": events}), flush=True)
            else:
                break


class Runtime:
    """The runtime's process, driven over its pipes."""

    def __init__(self, pods: int, seed: int = 11) -> None:
        self.process = subprocess.Popen(
            [sys.executable, SCRIPT, "--role", "runtime", "--pods", str(pods), "--seed", str(seed)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout is not None
        self.endpoint = self.process.stdout.readline().strip()
        if not self.endpoint:
            raise RuntimeError(f"the runtime exited ({self.process.wait()}) without an endpoint")

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        reply: dict[str, Any] = json.loads(self.process.stdout.readline())
        return reply

    def stop(self) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps({"op": "stop"}) + "\n")
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- the agents, each in a process of its own ------------------------------------------------
class Agent:
    """What an agent did: its calls, and (on the socket) its calls repeated on the runtime."""

    def __init__(self, name: str, target: str, pair_with: str | None) -> None:
        self.name = name
        self.client = Client(target, f"bench-{name}")
        self.pair = Client(pair_with, PAIR_AGENT) if pair_with else None
        self.pairs: list[list[Any]] = []
        self.status_calls = 0
        self.deleted = Counter[str]()
        self.events = Counter[str]()
        self.sandboxes: set[str] = set()
        self.lag_ms: list[float] = []
        self.unanswered: list[list[str]] = []
        """DELETED containers whose ContainerStatus was not answered (ID, code), the first."""
        """Per event: from its arrival to the start of its calls."""

    def status(self, method: str, request: bytes, named: str) -> Answer:
        """A status call; every ``PAIR_EVERY``-th repeated at once on the runtime."""
        began = time.monotonic()
        answer = self.client.call(method, request)
        self.status_calls += 1
        if self.pair is not None and self.status_calls % PAIR_EVERY == 0:
            direct = self.pair.call(method, request)
            self.pairs.append(
                [began, time.monotonic(), method, named, verdict(method, answer, direct)]
            )
        return answer

    def listed(self) -> list[Any]:
        answer = self.client.call("ListContainers", b"")
        if answer.data is None:
            return []
        containers: list[Any] = list(pb.ListContainersResponse.FromString(answer.data).containers)
        self.sandboxes.update(c.pod_sandbox_id for c in containers)
        return containers

    def result(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "calls": {m: dict(codes) for m, codes in self.client.calls.items()},
            "latency_ms": self.client.latency_ms,
            "pairs": self.pairs,
            "deleted": dict(self.deleted),
            "events": dict(self.events),
            "lag_ms": self.lag_ms,
            "unanswered": self.unanswered,
        }


def falco(agent: Agent, until: float, grace: float) -> None:
    """The Falco container plugin's calls (cri.go: List, then Listen) until ``until``; then
    the events already received, for at most ``grace`` s more."""
    began = time.monotonic()
    agent.client.call("Version", b"")
    for container in agent.listed():
        if time.monotonic() >= until + grace:
            return
        answer = agent.status("ContainerStatus", container_status(True, container.id), container.id)
        if answer.data is not None:
            sandbox_request = sandbox_status(False, container.pod_sandbox_id)
            agent.status("PodSandboxStatus", sandbox_request, container.pod_sandbox_id)
    agent.events["start burst ms"] = round((time.monotonic() - began) * 1000)
    stream: Any = agent.client.channel.unary_stream(
        RUNTIME + "GetContainerEvents",
        request_serializer=_identity,
        response_deserializer=pb.ContainerEventResponse.FromString,
    )(pb.GetEventsRequest().SerializeToString())
    inbox: queue.SimpleQueue[tuple[float, Any]] = queue.SimpleQueue()
    reader = threading.Thread(target=_read_events, args=(stream, inbox, agent.events), daemon=True)
    reader.start()
    _events_until(agent, inbox, until, until + grace)
    stream.cancel()
    while not inbox.empty():
        inbox.get()
        agent.events["unprocessed at the end"] += 1


def _events_until(
    agent: Agent, inbox: queue.SimpleQueue[tuple[float, Any]], until: float, deadline: float
) -> None:
    """Each event as it comes until ``until``; then those still coming, until none came for
    ``QUIET`` s or ``deadline``."""
    while (now := time.monotonic()) < deadline:
        try:
            received, event = inbox.get(timeout=0.5 if now < until else QUIET)
        except queue.Empty:
            if now >= until:
                return
            continue
        agent.lag_ms.append(round((time.monotonic() - received) * 1000, 3))
        on_event(agent, event)


def _read_events(
    stream: Any, inbox: queue.SimpleQueue[tuple[float, Any]], counts: Counter[str]
) -> None:
    """Each event with when it came, until the stream ends (how, if not by the agent)."""
    try:
        for event in stream:
            inbox.put((time.monotonic(), event))
        counts["event stream ended OK"] += 1
    except grpc.RpcError as exc:
        if exc.code() is not grpc.StatusCode.CANCELLED:
            counts[f"event stream ended {exc.code().name}"] += 1


def on_event(agent: Agent, event: Any) -> None:
    """The plugin's two status calls for one event; a DELETED container's answer noted."""
    agent.events["processed"] += 1
    sandbox_id = event.pod_sandbox_status.id
    if sandbox_id:
        agent.sandboxes.add(sandbox_id)
    answer = agent.status(
        "ContainerStatus", container_status(True, event.container_id), event.container_id
    )
    deleted_container = (
        event.container_event_type == pb.CONTAINER_DELETED_EVENT
        and event.container_id not in agent.sandboxes
    )
    if deleted_container:
        agent.deleted["asked"] += 1
        agent.deleted["answered"] += answer.data is not None
        agent.deleted["departed header"] += answer.departed is not None
        if answer.data is None and len(agent.unanswered) < 20:
            agent.unanswered.append([event.container_id, answer.code])
    if answer.data is not None:
        agent.status("PodSandboxStatus", sandbox_status(False, sandbox_id), sandbox_id)


def datadog(agent: Agent, until: float, period: float) -> None:
    """A Datadog-style CRI collector: a listing every ``period`` s, three status calls per
    container."""
    due = time.monotonic()
    polls = 0
    while due < until:
        if (wait := due - time.monotonic()) > 0:
            time.sleep(wait)
        for container in agent.listed():
            if time.monotonic() >= until:
                break
            agent.status("ContainerStatus", container_status(False, container.id), container.id)
            sandbox_request = sandbox_status(False, container.pod_sandbox_id)
            agent.status("PodSandboxStatus", sandbox_request, container.pod_sandbox_id)
            agent.client.call("ImageStatus", image_status(container.image.image))
        polls += 1
        due += period
    agent.events["polls"] = polls


def agent_child(args: argparse.Namespace) -> None:
    """One agent until ``args.until`` (time.monotonic: the same clock in every process)."""
    agent = Agent(args.name, args.target, args.pair_with)
    if args.name.startswith("falco"):
        falco(agent, args.until, args.grace)
    else:
        datadog(agent, args.until, args.period)
    Path(args.out).write_text(json.dumps(agent.result()))
    agent.client.close()
    if agent.pair is not None:
        agent.pair.close()


# -- podcache serve --------------------------------------------------------------------------
def serve_has(flag: str) -> bool:
    """Whether this podcache's serve takes ``flag``."""
    done = subprocess.run(
        [sys.executable, "-m", "podcache.serve", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    return flag in done.stdout


@contextmanager
def serve(endpoint: str, socket_path: str, extra: list[str]) -> Iterator[subprocess.Popen[str]]:
    """``podcache serve --cri-listen`` over ``endpoint`` with ``extra`` arguments; yields once
    its socket answers."""
    with serve_cri(endpoint, socket_path, *extra) as proc:
        _wait_answering(f"unix://{socket_path}")
        yield proc


def _wait_answering(target: str) -> None:
    client = Client(target, "bench-wait")
    deadline = time.monotonic() + 120
    while client.call("ListContainers", b"").data is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{target} never answered ListContainers")
        time.sleep(0.1)
    client.close()


def process_usage(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) and resident MiB of process ``pid``."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return {"cpu_s": (int(fields[11]) + int(fields[12])) / _CLK_TCK, "rss_mib": rss_kib / 1024}


# -- one phase -------------------------------------------------------------------------------
def start_agents(
    target: str, until: float, mode: Mode, pair_with: str | None, tmp: str
) -> list[tuple[subprocess.Popen[bytes], str]]:
    """The three agents, each a process, until ``until`` (and their grace)."""
    procs = []
    for name in AGENTS:
        out = os.path.join(tmp, f"{name}.json")
        command = [sys.executable, SCRIPT, "--role", "agent", "--name", name, "--target", target]
        command += ["--until", repr(until), "--period", str(mode.poll_period), "--out", out]
        command += ["--grace", str(mode.grace)]
        command += ["--pair-with", pair_with] if pair_with else []
        procs.append((subprocess.Popen(command), out))
    return procs


def agent_results(procs: list[tuple[subprocess.Popen[bytes], str]]) -> list[dict[str, Any]]:
    results = []
    for proc, out in procs:
        if proc.wait(600) != 0:
            raise RuntimeError(f"an agent failed ({proc.returncode})")
        results.append(json.loads(Path(out).read_text()))
    return results


def phase(
    runtime: Runtime, target: str, mode: Mode, pair_with: str | None, tmp: str
) -> dict[str, Any]:
    """The agents on ``target`` while the runtime churns; what each side did."""
    before = runtime.ask(op="take")
    runtime.ask(op="churn", rate=CHURN)
    until = time.monotonic() + mode.seconds
    procs = start_agents(target, until, mode, pair_with, tmp)
    time.sleep(max(0.0, until - time.monotonic()))
    runtime.ask(op="churn", rate=0)
    agents = agent_results(procs)
    after = runtime.ask(op="take")
    upstream_of = "podcache" if pair_with else None
    window = parse_duration(mode.cache_period or SERVE_PERIOD)
    return summary(before, after, agents, upstream_of, window)


def summary(
    before: dict[str, Any],
    after: dict[str, Any],
    agents: list[dict[str, Any]],
    via: str | None,
    window: float,
) -> dict[str, Any]:
    """A phase's figures from the runtime's logs and counts and the agents' results;
    ``via``: the caller whose status calls are upstream (None: every agent's); ``window``:
    how long after an event a call naming it counts as its."""
    calls = [c for c in after["status"] if (c[5] in (via, OWN_WIRE) if via else c[5] != PAIR_AGENT)]
    events = after["events"]
    socket_calls = [c for c in calls if c[5] != OWN_WIRE]
    return {
        "runtime_calls": runtime_calls(before, after, calls),
        "upstream_status": dict(Counter(c[1] for c in calls)),
        "upstream_verbose": dict(Counter(c[1] for c in calls if c[6])),
        "upstream_not_found": dict(Counter(c[1] for c in calls if not c[3])),
        "upstream_container_status_of_sandboxes": _of_sandboxes(events, calls),
        "agent_calls": agent_calls(agents),
        "per_event": per_event(events, socket_calls, window),
        "own_status_calls": dict(Counter(c[1] for c in calls if c[5] == OWN_WIRE)),
        "events": len(events),
        "deleted": dict(sum((Counter(a["deleted"]) for a in agents), Counter())),
        "deleted_unanswered": [u for a in agents for u in a["unanswered"]][:20],
        "agent_events": {a["name"]: _events_of(a) for a in agents},
        "latency_ms": latency(agents),
        "pairs": pair_verdicts(agents, events),
    }


def _of_sandboxes(events: list[list[Any]], calls: list[list[Any]]) -> int:
    """The ContainerStatus calls naming a sandbox (Falco asks one for each sandbox event)."""
    sandboxes = {sandbox_id for _, _, _, sandbox_id, _ in events}
    return sum(1 for c in calls if c[1] == "ContainerStatus" and c[2] in sandboxes)


def _events_of(agent: dict[str, Any]) -> dict[str, Any]:
    """An agent's event counts, and (a Falco one) its lag behind them: p99 and most, ms."""
    lag = agent["lag_ms"]
    return {
        **agent["events"],
        **({"lag_p99_ms": percentile(lag, 0.99), "lag_max_ms": max(lag)} if lag else {}),
    }


def runtime_calls(
    before: dict[str, Any], after: dict[str, Any], status: list[list[Any]]
) -> dict[str, dict[str, int]]:
    """The runtime's list calls (its counters), status calls (the log) and ImageStatus calls
    in the phase: calls and answer bytes by method."""
    out: dict[str, dict[str, int]] = {}
    for method in LIST_METHODS:
        kinds = ("filtered", "unfiltered")
        calls = sum(
            after["calls"][method][k]["calls"] - before["calls"][method][k]["calls"] for k in kinds
        )
        size = sum(
            after["calls"][method][k]["bytes"] - before["calls"][method][k]["bytes"] for k in kinds
        )
        out[method] = {"calls": calls, "bytes": size}
    for method in STATUS_METHODS:
        mine = [c for c in status if c[1] == method]
        out[method] = {"calls": len(mine), "bytes": sum(c[4] for c in mine)}
    images = after["unimplemented"].get(IMAGE_STATUS_PATH, 0)
    out["ImageStatus"] = {"calls": images - before["unimplemented"].get(IMAGE_STATUS_PATH, 0)}
    return out


def agent_calls(agents: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The agents' calls by method and answer code, summed."""
    total: dict[str, Counter[str]] = defaultdict(Counter)
    for agent in agents:
        for method, codes in agent["calls"].items():
            total[method].update(codes)
    return {method: dict(codes) for method, codes in sorted(total.items())}


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)] if ordered else float("nan")


def latency(agents: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """p50 and p99 of the agents' status calls, by method."""
    out = {}
    for method in STATUS_METHODS:
        values = [v for a in agents for v in a["latency_ms"].get(method, [])]
        out[method] = {"p50": percentile(values, 0.5), "p99": percentile(values, 0.99)}
    return out


# -- per event -------------------------------------------------------------------------------
def per_event(
    events: list[list[Any]], calls: list[list[Any]], window: float
) -> dict[str, dict[str, Any]]:
    """Per status method: the upstream calls naming an event's container (its sandbox for
    PodSandboxStatus) within ``window`` s after it and before the next event naming the same,
    per event; the most any one ID drew per event (and any one not a sandbox's: Falco asks
    ContainerStatus for a sandbox event's ID too, which the runtime answers NOT_FOUND); the
    plain calls after events that carried the status asked for (an event carries no verbose
    ``info``)."""
    out = {}
    sandboxes = {sandbox_id for _, _, _, sandbox_id, _ in events}
    for method in STATUS_METHODS:
        windows: dict[str, list[tuple[float, bool]]] = defaultdict(list)
        for at, kind, container_id, sandbox_id, carried in events:
            if method == "ContainerStatus":
                windows[container_id].append((at, carried))
            elif sandbox_id:  # carried unless the event deleted the sandbox itself
                gone = kind == pb.CONTAINER_DELETED_EVENT and container_id == sandbox_id
                windows[sandbox_id].append((at, not gone))
        drawn: Counter[str] = Counter()
        after_carried = 0
        for at, called, named, _, _, _, verbose in calls:
            if called != method or named not in windows:
                continue
            found = _window_of(windows[named], at, window)
            if found is not None:
                drawn[named] += 1
                after_carried += found[1] and not verbose
        ratios = {key: drawn[key] / len(times) for key, times in windows.items()}
        out[method] = {
            "events": sum(len(times) for times in windows.values()),
            "calls": sum(drawn.values()),
            "max_per_event": max(ratios.values(), default=0.0),
            "max_per_event_not_sandbox": max(
                (r for key, r in ratios.items() if key not in sandboxes), default=0.0
            ),
            "ids_over_one": sum(r > 1 for r in ratios.values()),
            "after_carrying_event": after_carried,
        }
    return out


def _window_of(
    times: list[tuple[float, bool]], at: float, window: float
) -> tuple[float, bool] | None:
    """The last event at or before ``at`` (``times`` in the order the runtime sent them: of
    events logged at one instant, as a pod's removal is, the last sent), if ``at`` is within
    ``window`` s of it."""
    index = bisect.bisect_right(times, at, key=lambda each: each[0]) - 1
    if index < 0 or at - times[index][0] > window:
        return None
    return times[index]


def pair_verdicts(agents: list[dict[str, Any]], events: list[list[Any]]) -> dict[str, int]:
    """The socket's answers repeated on the runtime during churn: equal, departed, differ
    when no event named the pod around them; changed in between otherwise."""
    pod_of = {container_id: sandbox_id for _, _, container_id, sandbox_id, _ in events}
    times: dict[str, list[float]] = defaultdict(list)
    for at, _, container_id, sandbox_id, _ in events:
        times[sandbox_id or container_id].append(at)
    out: Counter[str] = Counter()
    for began, ended, _, named, found in (p for a in agents for p in a["pairs"]):
        pod = times.get(pod_of.get(named, named), [])
        start = bisect.bisect_left(pod, began - PAIR_MARGIN)
        quiet = start == len(pod) or pod[start] > ended
        out[found if quiet or found == "departed" else "changed in between"] += 1
    return dict(out)


# -- quiescence ------------------------------------------------------------------------------
def settle(socket: Client, direct: Client) -> bool:
    """Wait (at most 30 s) until the socket lists the containers the runtime lists."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        a, b = socket.call("ListContainers", b""), direct.call("ListContainers", b"")
        if a.data is not None and b.data is not None and same("ListContainers", a, b):
            return True
        time.sleep(0.2)
    return False


def requests_at_rest(direct: Client) -> list[tuple[str, bytes]]:
    """Every status request the agents make, for every container and sandbox listed."""
    listed = pb.ListContainersResponse.FromString(direct.call("ListContainers", b"").data or b"")
    sandboxes = pb.ListPodSandboxResponse.FromString(direct.call("ListPodSandbox", b"").data or b"")
    out = [
        ("ImageStatus", image_status(image)) for image in {c.image.image for c in listed.containers}
    ]
    for container in listed.containers:
        for verbose in (True, False):
            out.append(("ContainerStatus", container_status(verbose, container.id)))
    for sandbox in sandboxes.items:
        for verbose in (True, False):
            out.append(("PodSandboxStatus", sandbox_status(verbose, sandbox.id)))
    return out


def compare_at_rest(socket_target: str, direct_target: str) -> dict[str, Any]:
    """At quiescence: every status request through the socket and direct, compared."""
    socket, direct = Client(socket_target, "bench-compare"), Client(direct_target, PAIR_AGENT)
    settled = settle(socket, direct)
    compared: Counter[str] = Counter()
    differing: list[str] = []
    for method, request in requests_at_rest(direct):
        found = verdict(method, socket.call(method, request), direct.call(method, request))
        compared[f"{method} {found}"] += 1
        if found != "equal" and len(differing) < 5:
            differing.append(f"{method} {request.hex()[:40]}")
    socket.close()
    direct.close()
    return {"settled": settled, "compared": dict(compared), "examples": differing}


LATENCY_SET = 50
"""Containers whose statuses are timed, over and over: within the period, the socket answers
them from the cache."""


def latency_side_by_side(socket_target: str, direct_target: str, samples: int) -> dict[str, Any]:
    """Status calls alternately through the socket and direct (ms, p50 and p99), cycling over
    ``LATENCY_SET`` containers after a round through the socket that is not timed (the first
    ask of a verbose status after the period goes to the runtime: the agents' own latencies
    in each phase show that mix)."""
    warm = Client(socket_target, "bench-compare")
    listed = pb.ListContainersResponse.FromString(warm.call("ListContainers", b"").data or b"")
    containers = list(listed.containers)[:LATENCY_SET]
    for container in containers:
        warm.call("ContainerStatus", container_status(True, container.id))
        warm.call("PodSandboxStatus", sandbox_status(False, container.pod_sandbox_id))
    warm.close()
    socket, direct = Client(socket_target, "bench-compare"), Client(direct_target, PAIR_AGENT)
    for i in range(samples):
        container = containers[i % len(containers)]
        for client in (socket, direct) if i % 2 == 0 else (direct, socket):
            client.call("ContainerStatus", container_status(True, container.id))
            client.call("PodSandboxStatus", sandbox_status(False, container.pod_sandbox_id))
    out = {
        side: {
            method: {
                "p50": percentile(client.latency_ms[method], 0.5),
                "p99": percentile(client.latency_ms[method], 0.99),
            }
            for method in STATUS_METHODS
        }
        for side, client in (("socket", socket), ("direct", direct))
    }
    socket.close()
    direct.close()
    return out


# -- podcache's own start --------------------------------------------------------------------
def start_cost(pods: int, extra: list[str]) -> dict[str, Any]:
    """podcache serve's start on a node of ``pods`` pods: its upstream calls by method until
    they stop (no call for 2 s, at most 120 s), its CPU and memory then."""
    runtime = Runtime(pods, seed=13)
    try:
        with tempfile.TemporaryDirectory(prefix="pc-agents-") as tmp:
            before = runtime.ask(op="take")
            began = time.monotonic()
            with serve(runtime.endpoint, os.path.join(tmp, "cri.sock"), extra) as proc:
                answering = time.monotonic() - began
                calls, after = _until_quiet(runtime, began)
                usage = process_usage(proc.pid)
        return {
            "pods": pods,
            "answering_s": round(answering, 2),
            "quiet_after_s": round(after - began, 2),
            "runtime_calls": runtime_calls(before, runtime.ask(op="take") | {"status": []}, calls),
            **usage,
        }
    finally:
        runtime.stop()


def _until_quiet(runtime: Runtime, began: float) -> tuple[list[list[Any]], float]:
    """The status calls podcache makes from its start until 2 s pass without one."""
    calls: list[list[Any]] = []
    last = time.monotonic()
    while time.monotonic() - last < 2.0 and time.monotonic() - began < 120:
        time.sleep(0.5)
        taken = runtime.ask(op="take")["status"]
        calls += taken
        if taken:
            last = time.monotonic()
    return calls, last


# -- on real containerd ----------------------------------------------------------------------
CONTAINERD_DIR = Path(os.environ.get("BENCH_CONTAINERD_DIR", "/tmp/podcache-bench-agents"))


def on_containerd(version: str, pods: int, samples: int) -> dict[str, Any]:
    """A private containerd ``version`` (``scripts/containerd-up``) with ``pods`` pods of one
    running container each, made as the kubelet makes them: every status request compared
    through the socket and direct at rest, then the status latency side by side. containerd
    builds each answer (the verbose one with its OCI spec as JSON); the simulator keeps its
    answers encoded, so on its node both sides answer from kept bytes."""
    sys.path[:0] = [str(HERE.parent), str(HERE)]
    from bench_perpod_containerd import node_of_pods

    with node_of_pods(CONTAINERD_DIR, version, pods, "agents", "podcachebenchagents") as endpoint:
        return {"containerd": version, "pods": pods, **_served_at_rest(endpoint, samples)}


def _served_at_rest(endpoint: str, samples: int) -> dict[str, Any]:
    extra = ["--cri-keep-departed", KEEP_DEPARTED] if serve_has("--cri-keep-departed") else []
    with tempfile.TemporaryDirectory(prefix="pc-agents-") as tmp:
        socket_path = os.path.join(tmp, "cri.sock")
        with serve(endpoint, socket_path, extra):
            time.sleep(2.0)  # the event stream is open
            target = f"unix://{socket_path}"
            return {
                "at_rest": compare_at_rest(target, endpoint),
                "latency": latency_side_by_side(target, endpoint, samples),
            }


def containerd_markdown(result: dict[str, Any]) -> list[str]:
    at_rest, latency = result["at_rest"], result["latency"]
    compared = ", ".join(f"{n:,} {kind}" for kind, n in sorted(at_rest["compared"].items()))
    return [
        f"containerd {result['containerd']}, {result['pods']:,} pods: at rest (settled: "
        f"{at_rest['settled']}): {compared}.",
        "",
        "| status latency at rest, side by side | socket p50 / p99 ms | containerd p50 / p99 ms |",
        "|---|---:|---:|",
        *(
            f"| {m} | {_latency_cell(latency['socket'][m])} | "
            f"{_latency_cell(latency['direct'][m])} |"
            for m in STATUS_METHODS
        ),
    ]


# -- the whole run ---------------------------------------------------------------------------
def measure(mode: Mode) -> dict[str, Any]:
    """Direct, then through a cold and a warm podcache; compare at rest; podcache's start."""
    keep = serve_has("--cri-keep-departed")
    extra = ["--cri-keep-departed", KEEP_DEPARTED] if keep else []
    extra += ["--cache-period", mode.cache_period] if mode.cache_period else []
    runtime = Runtime(mode.pods)
    try:
        with tempfile.TemporaryDirectory(prefix="pc-agents-") as tmp:
            result: dict[str, Any] = {"direct": phase(runtime, runtime.endpoint, mode, None, tmp)}
            socket_path = os.path.join(tmp, "cri.sock")
            target = f"unix://{socket_path}"
            before = runtime.ask(op="take")
            with serve(runtime.endpoint, socket_path, extra):
                began = time.monotonic()
                status, _ = _until_quiet(runtime, began)
                result["serve_start"] = runtime_calls(before, runtime.ask(op="take"), status)
                result["socket_cold"] = phase(runtime, target, mode, runtime.endpoint, tmp)
                result["socket_warm"] = phase(runtime, target, mode, runtime.endpoint, tmp)
                result["at_rest"] = compare_at_rest(target, runtime.endpoint)
                result["latency"] = latency_side_by_side(
                    target, runtime.endpoint, mode.latency_samples
                )
    finally:
        runtime.stop()
    result["start_cost"] = start_cost(mode.start_cost_pods, extra)
    result["config"] = {
        "pods": mode.pods,
        "seconds": mode.seconds,
        "churn": CHURN,
        "agents": list(AGENTS),
        "poll_period": mode.poll_period,
        "keep_departed": KEEP_DEPARTED if keep else None,
        "cache_period": mode.cache_period or "serve's default",
        "load_average": os.getloadavg(),
    }
    result["targets"] = targets(result)
    return result


def upstream(phase_result: dict[str, Any]) -> int:
    return sum(phase_result["upstream_status"].values())


def asked(phase_result: dict[str, Any]) -> int:
    """The agents' status calls in a phase (ContainerStatus and PodSandboxStatus)."""
    calls = phase_result["agent_calls"]
    return sum(sum(calls.get(method, {}).values()) for method in STATUS_METHODS)


def forwarded_share(phase_result: dict[str, Any]) -> float:
    """Upstream status calls per status call of the agents: 1 direct."""
    return upstream(phase_result) / max(1, asked(phase_result))


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with the figure and whether it is met."""
    return [
        *_call_targets(result),
        *_event_targets(result),
        *_deleted_targets(result),
        *_answer_targets(result),
        *_latency_targets(result),
    ]


def _call_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Upstream status calls, socket against direct, per status call the agents made (an
    agent slowed by its answers makes fewer calls in the same time: the raw counts would
    flatter the slower side)."""
    direct = forwarded_share(result["direct"])
    cold = forwarded_share(result["socket_cold"]) / direct
    warm = forwarded_share(result["socket_warm"]) / direct
    return [
        _target(
            "upstream status calls per agent call, first agents: socket/direct <= 1/2.5",
            cold,
            cold <= 0.4,
        ),
        _target(
            "upstream status calls per agent call, agents restarted: socket/direct <= 1/10",
            warm,
            warm <= 0.1,
        ),
    ]


def _event_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name in SOCKET_PHASES:
        for method, figures in result[name]["per_event"].items():
            most = figures["max_per_event"]
            out.append(_target(f"{name}: {method} upstream calls per event <= 1", most, most <= 1))
            if method == "ContainerStatus":
                most = figures["max_per_event_not_sandbox"]
                what = f"{name}: {method} upstream calls per event <= 1, sandbox IDs left out"
                out.append(_target(what, most, most <= 1))
            carried = figures["after_carrying_event"]
            what = f"{name}: {method} upstream calls after an event that carried it = 0"
            out.append(_target(what, carried, carried == 0))
    return out


def _deleted_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name in PHASES:
        deleted = result[name]["deleted"]
        share = deleted.get("answered", 0) / max(1, deleted.get("asked", 0))
        wanted = 1.0 if name != "direct" and result["config"]["keep_departed"] else 0.0
        what = f"{name}: DELETED containers' ContainerStatus answered = {wanted:.0%}"
        out.append(_target(what, share, share == wanted))
    return out


def _answer_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    at_rest = result["at_rest"]["compared"]
    differ = sum(n for kind, n in at_rest.items() if not kind.endswith(" equal"))
    during = sum(result[name]["pairs"].get("differ", 0) for name in SOCKET_PHASES)
    return [
        _target("answers that differ at rest = 0", differ, differ == 0),
        _target("comparable answers that differ during churn = 0", during, during == 0),
    ]


def _latency_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for method in STATUS_METHODS:
        for q in ("p50", "p99"):
            sock, own = (result["latency"][side][method][q] for side in ("socket", "direct"))
            what = f"{method} {q} through the socket <= the runtime's own (ratio)"
            out.append(_target(what, sock / own, sock <= own))
    return out


def _target(name: str, value: float, met: bool) -> dict[str, Any]:
    return {"target": name, "value": round(value, 4), "met": met}


# -- printing --------------------------------------------------------------------------------
def markdown(result: dict[str, Any]) -> list[str]:
    """The figures as markdown: the phases side by side, then at rest, then the targets."""
    config = result["config"]
    lines = [
        f"{config['pods']:,} pods, churn {config['churn']:g}/s, {config['seconds']:g} s a phase, "
        f"agents {', '.join(config['agents'])}, `--cri-keep-departed {config['keep_departed']}`, "
        f"`--cache-period` {config['cache_period']}, load average "
        + " / ".join(f"{x:.1f}" for x in config["load_average"]),
        "",
        "| | " + " | ".join(PHASES) + " |",
        "|---|" + "---:|" * len(PHASES),
        *_phase_rows(result),
        "",
        *_at_rest_lines(result),
        "",
        "| target | value | met |",
        "|---|---:|---|",
        *(
            f"| {t['target']} | {t['value']:g} | {'yes' if t['met'] else '**no**'} |"
            for t in result["targets"]
        ),
    ]
    return lines


def _phase_rows(result: dict[str, Any]) -> list[str]:
    def row(name: str, cell: Any) -> str:
        return f"| {name} | " + " | ".join(cell(result[p]) for p in PHASES) + " |"

    rows = [
        row(f"runtime {method} calls", lambda r, m=method: f"{r['runtime_calls'][m]['calls']:,}")
        for method in (*LIST_METHODS, *STATUS_METHODS, "ImageStatus")
    ]
    rows += [
        row("agents' status calls", lambda r: f"{asked(r):,}"),
        row("upstream status calls", lambda r: f"{upstream(r):,}"),
        row("upstream per agent status call", lambda r: f"{forwarded_share(r):.3f}"),
        row(
            "upstream verbose (ContainerStatus + PodSandboxStatus)",
            lambda r: _count(r["upstream_verbose"]),
        ),
        row("upstream answered NOT_FOUND (the same)", lambda r: _count(r["upstream_not_found"])),
        row("upstream ContainerStatus naming a sandbox", lambda r: _count(r, ALL_SANDBOXES)),
        row(
            "of them, podcache's caches' own (ContainerStatus + PodSandboxStatus: new pods' IPs)",
            lambda r: _count(r.get("own_status_calls", {})),
        ),
    ]
    for method in STATUS_METHODS:
        what = (
            f"{method} upstream per event (most for one ID, one not a sandbox; plain after a "
            "carrying event)"
        )
        rows.append(row(what, lambda r, m=method: _per_event_cell(r["per_event"][m])))
        rows.append(
            row(
                f"{method} agents' p50 / p99 ms",
                lambda r, m=method: _latency_cell(r["latency_ms"][m]),
            )
        )
    rows.append(
        row("DELETED containers' ContainerStatus answered", lambda r: _deleted_cell(r["deleted"]))
    )
    rows.append(row("during churn: pairs compared", lambda r: _pairs_cell(r.get("pairs", {}))))
    rows.append(row("Falco agents' events handled; lag p99 ms; start burst s", _events_cell))
    return rows


ALL_SANDBOXES = "upstream_container_status_of_sandboxes"


def _count(values: dict[str, Any], key: str | None = None) -> str:
    if key is not None:
        return f"{values[key]:,}"
    return " + ".join(f"{values.get(m, 0):,}" for m in STATUS_METHODS)


def _pairs_cell(pairs: dict[str, int]) -> str:
    return ", ".join(f"{n:,} {kind}" for kind, n in sorted(pairs.items())) or "-"


def _events_cell(phase_result: dict[str, Any]) -> str:
    falcos = [e for name, e in phase_result["agent_events"].items() if name.startswith("falco")]
    handled = " + ".join(str(e.get("processed", 0)) for e in falcos)
    lag = max((e.get("lag_p99_ms", 0.0) for e in falcos), default=0.0)
    burst = max((e.get("start burst ms", 0) for e in falcos), default=0) / 1000
    return f"{handled}; {lag:,.0f}; {burst:.1f}"


def _at_rest_lines(result: dict[str, Any]) -> list[str]:
    at_rest, latency, start = result["at_rest"], result["latency"], result["start_cost"]
    compared = ", ".join(f"{n:,} {kind}" for kind, n in sorted(at_rest["compared"].items()))
    calls = start["runtime_calls"]
    start_calls = ", ".join(f"{m} {calls[m]['calls']:,}" for m in calls if calls[m]["calls"])
    serve_calls = result["serve_start"]
    before = ", ".join(
        f"{m} {serve_calls[m]['calls']:,}" for m in serve_calls if serve_calls[m]["calls"]
    )
    return [
        f"At rest (settled: {at_rest['settled']}): {compared}.",
        "",
        "| status latency at rest, side by side | socket p50 / p99 ms | runtime p50 / p99 ms |",
        "|---|---:|---:|",
        *(
            f"| {m} | {_latency_cell(latency['socket'][m])} | "
            f"{_latency_cell(latency['direct'][m])} |"
            for m in STATUS_METHODS
        ),
        "",
        f"podcache's start before the first agents, the runtime's calls: {before or 'none'}.",
        f"podcache's start at {start['pods']:,} pods: answering after {start['answering_s']} s, "
        f"its calls over after {start['quiet_after_s']} s ({start_calls}); serve then "
        f"{start['cpu_s']:.2f} s of CPU, {start['rss_mib']:.0f} MiB resident.",
    ]


def _per_event_cell(figures: dict[str, Any]) -> str:
    per_event = figures["calls"] / max(1, figures["events"])
    most = f"{figures['max_per_event']:.2f}, {figures['max_per_event_not_sandbox']:.2f}"
    return f"{per_event:.2f} ({most}; {figures['after_carrying_event']})"


def _latency_cell(figures: dict[str, float]) -> str:
    return f"{figures['p50']:.2f} / {figures['p99']:.2f}"


def _deleted_cell(deleted: dict[str, int]) -> str:
    return f"{deleted.get('answered', 0)} of {deleted.get('asked', 0)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 pods, 10 s a phase")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--cache-period", metavar="DURATION", help="serve's --cache-period (default: its own)"
    )
    parser.add_argument(
        "--containerd",
        metavar="VERSION",
        help="instead: answers and status latency at rest on a private containerd (root)",
    )
    parser.add_argument("--containerd-pods", type=int, default=100, metavar="N")
    parser.add_argument("--role", choices=("runtime", "agent"), help=argparse.SUPPRESS)
    for hidden in (
        "--grace",
        "--pods",
        "--seed",
        "--name",
        "--target",
        "--until",
        "--period",
        "--out",
        "--pair-with",
    ):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "runtime":
        runtime_child(int(args.pods), int(args.seed))
        return 0
    if args.role == "agent":
        args.until, args.period, args.grace = (
            float(args.until),
            float(args.period),
            float(args.grace),
        )
        agent_child(args)
        return 0
    mode = dataclasses.replace(QUICK if args.quick else FULL, cache_period=args.cache_period)
    if args.containerd:
        result = on_containerd(args.containerd, args.containerd_pods, mode.latency_samples)
        result["markdown"] = containerd_markdown(result)
    else:
        result = measure(mode)
        result["markdown"] = markdown(result)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(result["markdown"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
