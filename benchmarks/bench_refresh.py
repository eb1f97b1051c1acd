"""Benchmark one cache refresh: CRI list decode vs decode + convert + index; not a test.

Builds ListPodSandbox/ListContainers responses shaped like a kubelet-managed node (labels and
annotations as the kubelet writes them), serialises them once, then times in one run,
interleaved, best of N, in process CPU time: the bare protobuf decode of both responses; a cold
refresh as the getter makes it (the answers' bytes read by the C list reader, converted to a
PodList, all its lookup indexes built, nothing remembered); a steady refresh (the same, for a
listing with 1% of the pods replaced, converted with the ``Memo`` of the previous listing, as a
live getter does); and, for reference, the cold refresh through protobuf's decoder and the
message reader (what runs where the C extension is not built). Reports the ratios to the decode
(target: at most 10x) and the tracemalloc size of a cold snapshot per container (target: at
most 1,800 bytes), beside the heap the decoded protobuf messages hold (upb keeps them in arenas
from C malloc, which tracemalloc does not see: measured as the growth of glibc's ``mallinfo2``).

A second shape, label-heavy (``--labels``, default 100 sandboxes of 4,000 distinct labels each,
the kind one tenant can create), times the cold refresh through the C reader against the one
through protobuf's decoder and the message reader: the C path must never be the slower one, on
this shape or on any size above.

    python benchmarks/bench_refresh.py [--quick] [--sizes 10,50,100] [--labels 100x4000] [--json]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import random
import sys
import time
import tracemalloc
import uuid
from collections.abc import Callable

from google.protobuf.internal import api_implementation

from podcache.cri.convert import WIRE_READER, Memo, pods_from_responses, pods_from_wire
from podcache.cri.proto import api_pb2 as pb
from podcache.model import PodList

RUNTIME = "containerd"
SIZES = (100, 1_000, 5_000)
CONTAINERS_PER_POD = 3
RATIO_TARGET = 10.0
C_VS_PROTOBUF_TARGET = 1.0
LABEL_HEAVY = (100, 4_000)
BYTES_TARGET = 1_800
CHURN = 0.01

_NAMESPACES = [
    "default",
    "kube-system",
    "monitoring",
    "logging",
    "ingress-nginx",
    "cert-manager",
    *(f"team-{i:02d}" for i in range(14)),
]
_APPS = [f"svc{i:03d}" for i in range(200)]
_IMAGES = [f"registry.example.com/apps/svc{i:03d}" for i in range(120)]
_CONTAINER_NAMES = ["app", "sidecar", "metrics", "proxy", "init-config"]


def _hex(rng: random.Random, n: int) -> str:
    return f"{rng.getrandbits(4 * n):0{n}x}"


def make_responses(
    n_pods: int, per_pod: int = CONTAINERS_PER_POD, seed: int = 1
) -> tuple[pb.ListPodSandboxResponse, pb.ListContainersResponse]:
    """Responses for ``n_pods`` ready pods with ``per_pod`` running containers each."""
    rng = random.Random(seed)
    sandboxes = pb.ListPodSandboxResponse()
    containers = pb.ListContainersResponse()
    now = 1_760_000_000_000_000_000
    for _ in range(n_pods):
        app = rng.choice(_APPS)
        template_hash = _hex(rng, 10)[:9]
        name = f"{app}-{template_hash}-{_hex(rng, 5)}"
        namespace = rng.choice(_NAMESPACES)
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        created = now - rng.randrange(10**15)
        sandbox_id = _hex(rng, 64)
        pod_keys = {
            "io.kubernetes.pod.name": name,
            "io.kubernetes.pod.namespace": namespace,
            "io.kubernetes.pod.uid": uid,
        }
        sandbox = sandboxes.items.add(
            id=sandbox_id,
            state=pb.SANDBOX_READY,
            created_at=created,
            runtime_handler="",
        )
        sandbox.metadata.name = name
        sandbox.metadata.namespace = namespace
        sandbox.metadata.uid = uid
        sandbox.labels.update(pod_keys)
        sandbox.labels.update({"app": app, "pod-template-hash": template_hash})
        sandbox.annotations.update(
            {
                "kubernetes.io/config.seen": "2025-10-09T12:00:00.000000000Z",
                "kubernetes.io/config.source": "api",
            }
        )
        for c in range(per_pod):
            cname = _CONTAINER_NAMES[c % len(_CONTAINER_NAMES)]
            image = rng.choice(_IMAGES)
            digest = f"sha256:{_hex(rng, 64)}" if c else f"sha256:{image.encode().hex()[:64]}"
            container = containers.containers.add(
                id=_hex(rng, 64),
                pod_sandbox_id=sandbox_id,
                image_ref=f"{image}@{digest}",
                image_id=digest,
                state=pb.CONTAINER_RUNNING,
                created_at=created + (c + 1) * 1_000_000,
            )
            container.metadata.name = cname
            container.image.image = f"{image}:1.{c}.0"
            container.labels.update(pod_keys)
            container.labels["io.kubernetes.container.name"] = cname
            container.annotations.update(
                {
                    "io.kubernetes.container.hash": f"{rng.getrandbits(32):x}",
                    "io.kubernetes.container.restartCount": "0",
                    "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
                    "io.kubernetes.container.terminationMessagePolicy": "File",
                    "io.kubernetes.pod.terminationGracePeriod": "30",
                }
            )
    return sandboxes, containers


def make_label_heavy(
    n_sandboxes: int, n_labels: int, seed: int = 3
) -> tuple[pb.ListPodSandboxResponse, pb.ListContainersResponse]:
    """``n_sandboxes`` ready pods, each carrying ``n_labels`` distinct labels of its own (keys of
    11 bytes, values of 8 to 19), one container each: the shape one tenant's pods can take."""
    sandboxes, containers = make_responses(n_sandboxes, per_pod=1, seed=seed)
    rng = random.Random(seed)
    for sandbox in sandboxes.items:
        sandbox.labels.update(
            {f"label-{i:05d}": _hex(rng, rng.randrange(8, 20)) for i in range(n_labels)}
        )
    return sandboxes, containers


def churned(
    sandboxes: pb.ListPodSandboxResponse,
    containers: pb.ListContainersResponse,
    fraction: float = CHURN,
    per_pod: int = CONTAINERS_PER_POD,
) -> tuple[pb.ListPodSandboxResponse, pb.ListContainersResponse]:
    """The next listing: the same node with ``fraction`` of its pods replaced by new ones."""
    n_pods = len(sandboxes.items)
    replaced = max(1, round(n_pods * fraction))
    fresh_sandboxes, fresh_containers = make_responses(replaced, per_pod, seed=n_pods + 7)
    next_sandboxes = pb.ListPodSandboxResponse()
    next_sandboxes.items.extend(sandboxes.items[replaced:])
    next_sandboxes.items.extend(fresh_sandboxes.items)
    next_containers = pb.ListContainersResponse()
    next_containers.containers.extend(containers.containers[replaced * per_pod :])
    next_containers.containers.extend(fresh_containers.containers)
    return next_sandboxes, next_containers


def _decode(
    wire: tuple[bytes, bytes],
) -> tuple[pb.ListPodSandboxResponse, pb.ListContainersResponse]:
    return pb.ListPodSandboxResponse.FromString(wire[0]), pb.ListContainersResponse.FromString(
        wire[1]
    )


def _refresh(wire: tuple[bytes, bytes], memo: Memo | None = None) -> PodList:
    """One refresh as the getter does it: read the answers' bytes, convert, then build every
    lookup index."""
    pods = pods_from_wire(RUNTIME, *wire, memo)
    pods.by_container_id("0000")  # builds every index (a miss still needs them all)
    return pods


def _refresh_from_messages(wire: tuple[bytes, bytes]) -> PodList:
    """The same through protobuf's decoder and the message reader (the fallback without C)."""
    pods = pods_from_responses(RUNTIME, *_decode(wire))
    pods.by_container_id("0000")
    return pods


def _timed(fn: Callable[[], object], wall: list[float], cpu: list[float]) -> None:
    gc.collect()
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    fn()
    cpu.append(time.process_time() - start_cpu)
    wall.append(time.perf_counter() - start_wall)


def _snapshot_bytes(wire: tuple[bytes, bytes]) -> int:
    """Bytes tracemalloc sees held by one PodList (index built), decode messages dropped."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        pods = _refresh(wire)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(pods) > 0
    return after - before


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _malloc_in_use() -> Callable[[], int] | None:
    """Bytes in use from C malloc (glibc >= 2.33 ``mallinfo2``), or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2

    def in_use() -> int:
        info = mallinfo2()
        return int(info.uordblks + info.hblkhd)

    return in_use


def _message_bytes(wire: tuple[bytes, bytes]) -> int | None:
    """Heap held by the two decoded response messages: their upb arenas (C malloc, outside
    tracemalloc's view) plus the Python objects tracemalloc sees; None without ``mallinfo2``."""
    in_use = _malloc_in_use()
    if in_use is None:
        return None
    gc.collect()
    before = in_use()
    messages = _decode(wire)
    held = in_use() - before
    del messages
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        messages = _decode(wire)
        held += tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(messages[0].items) > 0
    return held


def _memo_bytes(wire: tuple[bytes, bytes]) -> int:
    """Bytes a getter's Memo holds beyond the snapshot it shares its objects with."""
    gc.collect()
    tracemalloc.start()
    try:
        memo = Memo()
        pods = _refresh(wire, memo)
        gc.collect()
        with_memo = tracemalloc.get_traced_memory()[0]
        del memo
        gc.collect()
        without = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(pods) > 0
    return with_memo - without


def measure(n_pods: int, rounds: int) -> dict[str, float]:
    """Decode, cold refresh and steady refresh for one size: best of ``rounds``, interleaved."""
    sandboxes, containers = make_responses(n_pods)
    previous = (sandboxes.SerializeToString(), containers.SerializeToString())
    following = churned(sandboxes, containers)
    wire = (following[0].SerializeToString(), following[1].SerializeToString())
    del sandboxes, containers, following
    memo = Memo()
    assert _refresh(wire) == _refresh(wire, memo)  # warm-up, and the memo changes nothing

    def steady() -> None:
        _refresh(wire, memo)

    assert _refresh(wire) == _refresh_from_messages(wire)
    times: dict[str, tuple[list[float], list[float]]] = {
        k: ([], []) for k in ("decode", "cold", "steady", "messages")
    }
    for _ in range(rounds):
        _timed(lambda: _decode(wire), *times["decode"])
        _timed(lambda: _refresh(wire), *times["cold"])
        _timed(lambda: _refresh_from_messages(wire), *times["messages"])
        _refresh(previous, memo)  # the memo holds the previous listing, as in a live getter
        _timed(steady, *times["steady"])
    best = {k: (min(w), min(c)) for k, (w, c) in times.items()}
    n_containers = n_pods * CONTAINERS_PER_POD
    message_bytes = _message_bytes(wire)
    return {
        "pods": n_pods,
        "containers": n_containers,
        "wire_kib": (len(wire[0]) + len(wire[1])) / 1024,
        "decode_ms": best["decode"][1] * 1e3,
        "cold_ms": best["cold"][1] * 1e3,
        "steady_ms": best["steady"][1] * 1e3,
        "cold_ratio": best["cold"][1] / best["decode"][1],
        "messages_ms": best["messages"][1] * 1e3,
        "messages_ratio": best["messages"][1] / best["decode"][1],
        "steady_ratio": best["steady"][1] / best["decode"][1],
        "cold_wall_ratio": best["cold"][0] / best["decode"][0],
        "bytes_per_container": _snapshot_bytes(wire) / n_containers,
        "memo_per_container": _memo_bytes(wire) / n_containers,
        "message_bytes_per_container": (
            float("nan") if message_bytes is None else message_bytes / n_containers
        ),
    }


def measure_label_heavy(n_sandboxes: int, n_labels: int, rounds: int) -> dict[str, float]:
    """Cold refresh of the label-heavy shape: the C reader's path against protobuf's path."""
    sandboxes, containers = make_label_heavy(n_sandboxes, n_labels)
    wire = (sandboxes.SerializeToString(), containers.SerializeToString())
    del sandboxes, containers
    assert _refresh(wire) == _refresh_from_messages(wire)
    times: dict[str, tuple[list[float], list[float]]] = {
        k: ([], []) for k in ("decode", "cold", "messages")
    }
    for _ in range(rounds):
        _timed(lambda: _decode(wire), *times["decode"])
        _timed(lambda: _refresh(wire), *times["cold"])
        _timed(lambda: _refresh_from_messages(wire), *times["messages"])
    best = {k: min(c) for k, (_, c) in times.items()}
    return {
        "sandboxes": n_sandboxes,
        "labels_per_sandbox": n_labels,
        "wire_kib": (len(wire[0]) + len(wire[1])) / 1024,
        "decode_ms": best["decode"] * 1e3,
        "cold_ms": best["cold"] * 1e3,
        "messages_ms": best["messages"] * 1e3,
        "c_vs_protobuf": best["cold"] / best["messages"],
    }


def _shape(text: str) -> tuple[int, int]:
    sandboxes, _, labels = text.partition("x")
    return int(sandboxes), int(labels)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a markdown table; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (smoke run)")
    parser.add_argument(
        "--sizes",
        type=lambda text: tuple(int(n) for n in text.split(",")),
        default=SIZES,
        help="comma-separated pod counts (default: %(default)s; targets judged at the last)",
    )
    parser.add_argument(
        "--labels",
        type=_shape,
        default=LABEL_HEAVY,
        help="the label-heavy shape, SANDBOXESxLABELS (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else 15
    sizes: tuple[int, ...] = args.sizes
    heavy_shape: tuple[int, int] = args.labels
    backend = api_implementation.Type()
    if args.json:
        print(
            json.dumps(
                {
                    "backend": backend,
                    "reader": WIRE_READER,
                    "python": sys.version.split()[0],
                    "rounds": rounds,
                    "containers_per_pod": CONTAINERS_PER_POD,
                    "churn": CHURN,
                    "sizes": [measure(n, rounds) for n in sizes],
                    "label_heavy": measure_label_heavy(*heavy_shape, rounds),
                },
                indent=2,
            )
        )
        return 0
    print(
        f"protobuf backend: {backend} (must be upb); list reader: {WIRE_READER}; "
        f"python {sys.version.split()[0]}"
    )
    print(
        f"best of {rounds} rounds, interleaved; process CPU time (robust to other load on a "
        f"shared machine); {CONTAINERS_PER_POD} containers per pod; steady = the next listing "
        f"with {CHURN:.0%} of pods replaced, converted with the memo of the previous one\n"
    )
    print(
        "| pods | containers | wire KiB | decode ms | cold: read+convert+index ms | cold ratio "
        "| (wall) | steady ms | steady ratio | via protobuf messages ms | ratio "
        "| snapshot B/container | memo B/container |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    results = []
    for n in sizes:
        r = measure(n, rounds)
        results.append(r)
        print(
            f"| {r['pods']:,} | {r['containers']:,} | {r['wire_kib']:,.0f} "
            f"| {r['decode_ms']:.1f} | {r['cold_ms']:.1f} | {r['cold_ratio']:.1f}x "
            f"| {r['cold_wall_ratio']:.1f}x | {r['steady_ms']:.1f} | {r['steady_ratio']:.1f}x "
            f"| {r['messages_ms']:.1f} | {r['messages_ratio']:.1f}x "
            f"| {r['bytes_per_container']:,.0f} | {r['memo_per_container']:,.0f} |"
        )
    heavy = measure_label_heavy(*heavy_shape, rounds)
    print(
        "\nlabel-heavy: | sandboxes | labels each | wire KiB | decode ms | C path ms "
        "| protobuf path ms | C / protobuf |"
    )
    print(
        f"| {heavy['sandboxes']:,} | {heavy['labels_per_sandbox']:,} | {heavy['wire_kib']:,.0f} "
        f"| {heavy['decode_ms']:.1f} | {heavy['cold_ms']:.1f} | {heavy['messages_ms']:.1f} "
        f"| {heavy['c_vs_protobuf']:.2f}x |"
    )
    last = results[-1]
    c_ratios = [r["cold_ms"] / r["messages_ms"] for r in results] + [heavy["c_vs_protobuf"]]
    verdicts = {
        "backend is upb": backend == "upb",
        "list reader is the C extension": WIRE_READER == "c",
        f"steady refresh <= {RATIO_TARGET:g}x decode": last["steady_ratio"] <= RATIO_TARGET,
        f"cold refresh <= {RATIO_TARGET:g}x decode": last["cold_ratio"] <= RATIO_TARGET,
        f"snapshot <= {BYTES_TARGET:,} B/container": last["bytes_per_container"] <= BYTES_TARGET,
        "C path <= protobuf path on every shape": max(c_ratios) <= C_VS_PROTOBUF_TARGET,
    }
    print(f"\ntargets at {sizes[-1]:,} pods:")
    for name, ok in verdicts.items():
        print(f"- {name}: {'met' if ok else 'NOT met'}")
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
