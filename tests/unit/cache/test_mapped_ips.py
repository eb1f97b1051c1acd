"""An IPv4-mapped IPv6 address names the IPv4 host: ``find(ip=...)``, now, at a
time and for pods that left, answers for ``::ffff:10.0.0.9`` exactly what it answers for
``10.0.0.9``, on both twins (docs/architecture.md §3 rule 12)."""

from __future__ import annotations

import asyncio
import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st

from podcache import AsyncFakeRuntime, AsyncRuntimeCache, FakeRuntime, Pod, RuntimeCache
from tests.unit.cache.drivers import FakeClock

ADDRESS = "10.0.0.9"


def spellings(address: str) -> list[str]:
    """The IPv4-mapped spellings of an IPv4 address."""
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    return [f"::ffff:{address}", mapped.compressed, mapped.exploded.upper()]


def holder(n: int, created: float) -> Pod:
    return Pod(
        id=f"uid-{n}", name=f"p{n}", namespace="ns", created_at=int(created * 1e9), ips=(ADDRESS,)
    )


@settings(max_examples=60)
@given(
    lives=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 5)), min_size=1, max_size=6),
    probes=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6),
    asyn=st.booleans(),
)
def test_find_by_a_mapped_address_answers_as_by_the_ipv4_address(
    lives: list[tuple[int, int]], probes: list[float], asyn: bool
) -> None:
    wall = [1_700_000_000.0]
    begin = wall[0]
    clock = FakeClock()
    loop = asyncio.new_event_loop()
    fake: FakeRuntime | AsyncFakeRuntime = AsyncFakeRuntime() if asyn else FakeRuntime()
    cache_type = AsyncRuntimeCache if asyn else RuntimeCache
    cache = cache_type(fake, 1e9, clock=clock, wall_clock=lambda: wall[0])  # type: ignore[arg-type]

    def show(pods: list[Pod]) -> None:
        fake.set_pods(pods)
        clock.advance(1.0)
        done = cache.force_update_if_older(clock.now)
        if asyn:
            loop.run_until_complete(done)  # type: ignore[arg-type]

    def find(**kw: object) -> object:
        answer = cache.find(**kw)  # type: ignore[arg-type]
        return loop.run_until_complete(answer) if asyn else answer  # type: ignore[arg-type]

    for n, (held, gap) in enumerate(lives):  # each holder in turn: held, then nobody for gap
        show([holder(n, wall[0])])
        wall[0] += held
        show([])
        wall[0] += gap
    end = wall[0]
    for fraction in probes:
        at = begin + fraction * (end - begin)
        expected = find(ip=ADDRESS, at=at)
        for text in spellings(ADDRESS):
            assert find(ip=text, at=at) == expected, (text, at)
    for text in spellings(ADDRESS):
        assert find(ip=text) == find(ip=ADDRESS)
    loop.close()
