"""Hostile-runtime attacks (deadlines, floods) on podcache's own HTTP/2 client, before and
after a fix, in one run (docs/architecture.md §7 rule 6).

    .venv/bin/python benchmarks/bench_h2_attacks.py --before /path/to/old/src
                                                    [--quick] [--rounds N] [--only deadline,floods]
                                                    [--json]

``--before`` names another checkout's ``src`` (the tree before the fix; its C extension built
or copied in): every measurement runs once with it and once with this checkout's, interleaved,
``--rounds`` times. Three kinds of process, as on a node: the hostile runtime (``--hostile`` mode
of this file), podcache (a measuring client, or ``podcache serve``), and this one, which drives
them and reads ``/proc`` and serve's ``/metrics``.

The hostile runtime runs the simulator (110 pods, churning) on a socket of its own and a relay
on the socket podcache is given. grpcio's connections are relayed byte for byte. podcache's own
client is recognised by its SETTINGS frame, and its connections get the attack:

- ``deadline``, on the connections of the filtered list calls (``get_pod``):
  ``ping-noread``: PINGs without end, and nothing read, ever;
  ``ping-slowread``: the same, reading 1 KiB every 8 s.
  Measured in a client process: how long ``CRIRuntime(timeout=2).get_pod`` takes and its
  error; how long after ``close()`` a call stuck in it returns; how many per-pod relists a
  ``RuntimeCache`` with events on finishes (done or failed) in 20 s.
- ``floods``, on the GetContainerEvents connection, relayed from the simulator with the flood
  injected between its frames: ``continuation`` (a header block of empty CONTINUATIONs without
  end), ``ping``, ``settings``, ``rst`` (RST_STREAM on streams never opened) and
  ``size-update`` (header blocks of an HPACK table size update). The client's answers to the
  injected frames are dropped, not relayed. Measured on ``podcache serve --events on``
  (``--cache-period 2s``) over 10 s: serve's CPU share, events read
  (``podcache_events_received_total``), resubscriptions, and the share of 0.25 s samples of
  ``podcache_events_state`` that said "subscribed".

Figures: min/median/max over the rounds, printed and written to
``benchmarks/results/h2_attacks.json``; nothing is judged here.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST, SETTINGS, PING, CONT = 0, 1, 3, 4, 6, 9
OURS = struct.pack(">HIHIHI", 0x2, 0, 0x4, 32 * 1024 * 1024, 0x6, 64 * 1024)
"""The payload of the SETTINGS frame podcache's own client opens with (before and after)."""
HOSTILE_PING = b"hostile!"
UNARY_ATTACKS = ("ping-noread", "ping-slowread")
FLOODS = ("continuation", "ping", "settings", "rst", "size-update")


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3) + bytes((kind, flags)) + stream.to_bytes(4) + payload


# -- the hostile runtime's process ---------------------------------------------------------------
class _Frames:
    """Whole frames read from a socket (the raw bytes of each)."""

    def __init__(self, sock: socket.socket, buffered: bytes = b"") -> None:
        self.sock = sock
        self.buffer = bytearray(buffered)

    def _need(self, size: int) -> None:
        while len(self.buffer) < size:
            chunk = self.sock.recv(262144)
            if not chunk:
                raise EOFError
            self.buffer += chunk

    def exact(self, size: int) -> bytes:
        self._need(size)
        out = bytes(self.buffer[:size])
        del self.buffer[:size]
        return out

    def next(self) -> bytes:
        self._need(9)
        length = int.from_bytes(self.buffer[:3])
        return self.exact(9 + length)


def _close_all(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(262144):
            sink.sendall(chunk)
    _close_all(source, sink)


def _relay(client: socket.socket, sim_path: str, already: bytes) -> None:
    sim = socket.socket(socket.AF_UNIX)
    sim.connect(sim_path)
    sim.sendall(already)
    threading.Thread(target=_copy, args=(sim, client), daemon=True).start()
    _copy(client, sim)


def _method_of(headers_frame: bytes) -> str:
    import hpack

    try:
        found = dict(hpack.Decoder().decode(headers_frame[9:], raw=True))
    except Exception:
        return ""
    return found.get(b":path", b"").decode().rsplit("/", 1)[-1]


def _unary_attack(client: socket.socket, attack: str) -> None:
    """PINGs without end; nothing read, or 1 KiB every 8 s."""
    if attack == "ping-slowread":

        def slow() -> None:
            with contextlib.suppress(OSError):
                while client.recv(1024):
                    time.sleep(8.0)

        threading.Thread(target=slow, daemon=True).start()
    pings = b"".join(frame(PING, 0, 0, n.to_bytes(8)) for n in range(100))
    with contextlib.suppress(OSError):
        while True:
            client.sendall(pings)


def _flood_frames(attack: str) -> bytes:
    one = {
        "ping": frame(PING, 0, 0, HOSTILE_PING),
        "settings": frame(SETTINGS, 0, 0),
        "rst": frame(RST, 0, 3, (8).to_bytes(4)),
        "size-update": frame(HEADERS, 0x4, 1, b"\x3f\xe1\x1f"),
        "continuation": frame(CONT, 0, 1),
    }[attack]
    return one * 100


class _FloodRelay:
    """The event stream relayed from the simulator, ``attack``'s frames injected between its
    frames; the client's answers to them (PING and SETTINGS acknowledgements) dropped."""

    def __init__(self, client: socket.socket, sim_path: str, attack: str) -> None:
        self.client = client
        self.sim = socket.socket(socket.AF_UNIX)
        self.sim.connect(sim_path)
        self.attack = attack
        self.lock = threading.Lock()
        self.answering = threading.Event()  # the simulator's response headers went out
        self.sim_settings = 0
        self.acks_relayed = 0

    def run(self, client_frames: _Frames, already: bytes) -> None:
        self.sim.sendall(already)
        threading.Thread(target=self._from_sim, daemon=True).start()
        threading.Thread(target=self._from_client, args=(client_frames,), daemon=True).start()
        with contextlib.suppress(OSError):
            if not self.answering.wait(30):
                return
            chunk = _flood_frames(self.attack)
            if self.attack == "continuation":
                with self.lock:  # a header block may not be interrupted: nothing else goes out
                    self.client.sendall(frame(HEADERS, 0, 1, b""))
                    while True:
                        self.client.sendall(chunk)
            while True:
                with self.lock:
                    self.client.sendall(chunk)
        _close_all(self.client, self.sim)

    def _from_sim(self) -> None:
        frames = _Frames(self.sim)
        with contextlib.suppress(OSError, EOFError):
            while True:
                raw = frames.next()
                if raw[3] == SETTINGS and not raw[4] & 1:
                    self.sim_settings += 1
                with self.lock:
                    self.client.sendall(raw)
                if raw[3] == HEADERS and raw[4] & 0x4 and not raw[4] & 0x1:
                    self.answering.set()
        _close_all(self.client, self.sim)

    def _from_client(self, frames: _Frames) -> None:
        with contextlib.suppress(OSError, EOFError):
            while True:
                raw = frames.next()
                if raw[3] == PING and raw[4] & 1 and raw[9:] == HOSTILE_PING:
                    continue
                if raw[3] == SETTINGS and raw[4] & 1:
                    if self.acks_relayed >= self.sim_settings:
                        continue
                    self.acks_relayed += 1
                self.sim.sendall(raw)
        _close_all(self.client, self.sim)


def _handle(client: socket.socket, sim_path: str, attack: str) -> None:
    with contextlib.suppress(OSError, EOFError):
        frames = _Frames(client)
        seen = frames.exact(len(PREFACE))
        first = frames.next()
        seen += first
        if first[9:] != OURS:
            _relay(client, sim_path, seen + bytes(frames.buffer))
            return
        while True:  # the client's frames up to its first HEADERS: which call it is
            raw = frames.next()
            seen += raw
            if raw[3] == HEADERS:
                break
        method = _method_of(raw)
        if attack in UNARY_ATTACKS and method not in {"GetContainerEvents", ""}:
            _unary_attack(client, attack)
        elif attack in FLOODS and method == "GetContainerEvents":
            _FloodRelay(client, sim_path, attack).run(frames, seen)
        else:
            _relay(client, sim_path, seen + bytes(frames.buffer))
    _close_all(client)


def run_hostile(listen: str, attack: str) -> None:
    from podcache.sim import SimRuntime

    sim_path = listen + ".sim"
    with SimRuntime(110, socket=sim_path, seed=3, churn=2.0):
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(listen)
        listener.listen(64)
        print("ready", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        while True:
            client, _ = listener.accept()
            threading.Thread(target=_handle, args=(client, sim_path, attack), daemon=True).start()


@contextlib.contextmanager
def hostile(attack: str) -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="pc-h2-")
    path = f"{directory}/cri.sock"
    args = [sys.executable, __file__, "--hostile", path, "--attack", attack]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        if "ready" not in process.stdout.readline():
            raise RuntimeError("the hostile runtime did not start")
        yield f"unix://{path}"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


# -- deadline: the measuring client's process ----------------------------------------------------
CAP = 45.0
"""Seconds the client waits for a stuck call before it reports it as stuck."""


def _timed(action: Callable[[], object], cap: float) -> tuple[float, str]:
    """Seconds ``action`` took (``cap`` if it had not returned by then) and its error."""
    outcome: list[str] = []

    def run() -> None:
        try:
            action()
            outcome.append("no error")
        except Exception as error:
            outcome.append(f"{type(error).__name__}: {error}")

    began = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(cap)
    took = time.monotonic() - began
    return took, outcome[0] if outcome else f"still running after {cap:g} s"


def run_client(endpoint: str, quick: bool) -> None:
    from podcache import RuntimeCache
    from podcache.cri import CRIRuntime

    result: dict[str, object] = {}
    with CRIRuntime(endpoint, timeout=2.0) as runtime:
        uid = runtime.get_pods()[0].id
        took, error = _timed(lambda: runtime.get_pod(uid), CAP)
        result["get_pod_s"], result["get_pod_error"] = round(took, 2), error[:300]
    runtime = CRIRuntime(endpoint, timeout=2.0)
    uid = runtime.get_pods()[0].id
    closed_at = [0.0]

    def close_later() -> None:
        time.sleep(0.5)
        closed_at[0] = time.monotonic()
        runtime.close()

    closer = threading.Thread(target=close_later)
    started = time.monotonic()
    closer.start()
    took, error = _timed(lambda: runtime.get_pod(uid), CAP)
    closer.join()
    result["freed_after_close_s"] = round(started + took - closed_at[0], 2)
    result["after_close_error"] = error[:300]
    seconds = 10.0 if quick else 20.0
    with CRIRuntime(endpoint, timeout=2.0) as runtime:
        cache = RuntimeCache(runtime, 60.0, events=True)
        cache.get_pods()
        time.sleep(seconds)
        stats = cache.stats()
        result[f"relists_done_in_{seconds:g}s"] = stats.pod_relists + stats.pod_relist_errors
        cache.close()
    print(json.dumps(result), flush=True)
    os._exit(0)  # a stuck call's thread may still hold the process


def client_run(src: str, endpoint: str, quick: bool) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=src)
    args = [sys.executable, __file__, "--client", endpoint] + (["--quick"] if quick else [])
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"failed": done.stderr[-2000:]}
    found: dict[str, object] = json.loads(lines[-1])
    return found


# -- floods: serve under a flood ------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _metrics(port: int) -> dict[str, float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def serve_run(src: str, endpoint: str, seconds: float) -> dict[str, object]:
    port = _free_port()
    args = [sys.executable, "-m", "podcache.serve", "-r", endpoint, "--events", "on"]
    args += ["--listen", f"127.0.0.1:{port}", "--cache-period", "2s"]
    env = dict(os.environ, PYTHONPATH=src)
    process = subprocess.Popen(
        args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 60
        while "listening on" not in process.stderr.readline():
            if time.monotonic() > deadline or process.poll() is not None:
                return {"failed": "serve did not start"}
        threading.Thread(target=process.stderr.read, daemon=True).start()
        time.sleep(2.0)
        before, cpu = _metrics(port), _cpu(process.pid)
        subscribed = samples = 0
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            now = _metrics(port)
            subscribed += now.get('podcache_events_state{state="subscribed"}', 0.0) == 1.0
            samples += 1
            time.sleep(0.25)
        after, used = _metrics(port), _cpu(process.pid) - cpu

        def grew(name: str) -> float:
            return after.get(name, 0.0) - before.get(name, 0.0)

        return {
            "cpu_share": round(used / seconds, 3),
            "events_read": grew("podcache_events_received_total"),
            "resubscriptions": grew("podcache_event_resubscriptions_total"),
            "subscribed_share": round(subscribed / max(1, samples), 2),
        }
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


# -- the run ------------------------------------------------------------------------------------
def _spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def _summary(runs: list[dict[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key in runs[0]:
        values = [run[key] for run in runs if key in run]
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        out[key] = _spread(numbers) if len(numbers) == len(values) else values[-1]
    return out


def bench(
    attacks: tuple[str, ...], runner: Callable[[str, str], dict[str, object]], trees: dict[str, str]
) -> dict[str, object]:
    results: dict[str, object] = {}
    for attack in attacks:
        with hostile(attack) as endpoint:
            runs: dict[str, list[dict[str, object]]] = {name: [] for name in trees}
            for _ in range(ROUNDS[0]):
                for name, src in trees.items():  # interleaved: before, after, before, after
                    runs[name].append(runner(src, endpoint))
        results[attack] = {name: _summary(found) for name, found in runs.items()}
        print(json.dumps({attack: results[attack]}), file=sys.stderr, flush=True)
    return results


ROUNDS = [3]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--before", help="another checkout's src/, the tree before the fix")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="deadline,floods")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--hostile", metavar="SOCKET", help=argparse.SUPPRESS)
    parser.add_argument("--attack", help=argparse.SUPPRESS)
    parser.add_argument("--client", metavar="ENDPOINT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hostile:
        run_hostile(args.hostile, args.attack)
        return 0
    if args.client:
        run_client(args.client, args.quick)
        return 0
    ROUNDS[0] = args.rounds
    trees = {"after": str(ROOT / "src")}
    if args.before:
        trees = {"before": args.before, **trees}
    results: dict[str, object] = {}
    only = args.only.split(",")
    if "deadline" in only:
        results["deadline"] = bench(
            UNARY_ATTACKS, lambda src, endpoint: client_run(src, endpoint, args.quick), trees
        )
    if "floods" in only:
        seconds = 5.0 if args.quick else 10.0
        results["floods"] = bench(
            FLOODS, lambda src, endpoint: serve_run(src, endpoint, seconds), trees
        )
    results["load_average"] = os.getloadavg()
    (ROOT / "benchmarks" / "results" / "h2_attacks.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
