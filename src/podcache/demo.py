"""A short demonstration of the cache on the in-memory fake runtime (until the CLI lands)."""

from __future__ import annotations

import time

from podcache import Container, ContainerID, ContainerState, FakeRuntime, Pod, RuntimeCache


def main() -> None:
    """Fill a cache from a slow fake runtime, then show hits, a forced refresh and the stats."""
    pods = [
        Pod(
            id=f"uid-{n}",
            name=f"web-{n}",
            namespace="default",
            created_at=n,
            containers=[
                Container(
                    id=ContainerID("containerd", f"{n + 0xA1:02x}" * 32),
                    name="app",
                    image="nginx:1.27",
                    state=ContainerState.RUNNING,
                )
            ],
        )
        for n in range(3)
    ]
    runtime = FakeRuntime(pods, latency=0.05)
    cache = RuntimeCache(runtime, 2.0, stats=True)
    began = time.perf_counter()
    snapshot = cache.get_pods()
    print(f"first get_pods: {len(snapshot)} pods in {1e3 * (time.perf_counter() - began):.1f} ms")
    began = time.perf_counter()
    for _ in range(100_000):
        cache.get_pods()
    print(f"100,000 hits: {1e9 * (time.perf_counter() - began) / 100_000:.0f} ns each")
    found = snapshot.by_container_id("a2a2a2")
    if found:
        print(f"container prefix a2a2a2 -> pod {found[0].full_name}, container {found[1].id}")
    cache.force_update_if_older(time.monotonic())
    print(f"stats: {cache.stats()}")
    print(f"runtime calls: {runtime.calls}")


if __name__ == "__main__":
    main()
