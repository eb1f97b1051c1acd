"""The simulator's pod IP pool and the population's use of it: addresses from
the configured CIDR, freed ones handed out before fresh ones (oldest freed first), none twice
at once, "" when the CIDR is used up; host-network pods hold none."""

from __future__ import annotations

import ipaddress
import re

import pytest

from podcache.sim import AddressPool, PodShape, Population, SimSandboxState


def test_fresh_addresses_skip_the_network_and_gateway_and_freed_ones_come_first() -> None:
    pool = AddressPool("10.9.0.0/29")  # .0 network, .1 gateway, .7 broadcast: .2-.6 usable
    first = [pool.allocate() for _ in range(3)]
    assert first == ["10.9.0.2", "10.9.0.3", "10.9.0.4"]
    pool.release("10.9.0.3")
    pool.release("10.9.0.2")
    assert pool.allocate() == "10.9.0.3"  # the oldest freed, before any fresh one
    assert pool.allocate() == "10.9.0.2"
    assert [pool.allocate() for _ in range(3)] == ["10.9.0.5", "10.9.0.6", ""]  # used up
    assert pool.exhausted == 1
    pool.release("10.9.0.99")  # not held: ignored
    assert pool.allocate() == ""


def test_ipv6_cidrs_work_and_a_bad_cidr_names_itself() -> None:
    pool = AddressPool("fd00:10::/120")
    assert pool.allocate() == "fd00:10::2"
    with pytest.raises(ValueError, match=re.escape("'10.0.0.1/8' is not a network")):
        AddressPool("10.0.0.1/8")


def test_the_population_holds_each_address_once_and_reuses_freed_ones() -> None:
    population = Population(300, seed=4, pod_cidr="10.77.0.0/22", host_network=0.2)
    sandboxes = population.snapshot().sandboxes
    ready = [s for s in sandboxes if s.state is SimSandboxState.READY]
    held = [s.ip for s in ready if not s.host_network]
    assert len(held) == len(set(held)) > 150
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network("10.77.0.0/22") for ip in held)
    assert all(s.ip == "" for s in ready if s.host_network)
    assert sum(s.host_network for s in ready) > 20
    victim = next(s for s in ready if s.ip)
    population.remove_pod(victim.uid)
    for _ in range(50):
        uid, _ = population.create_pod(PodShape.RUNNING)
        got = [s for s in population.snapshot().sandboxes if s.uid == uid and s.ip]
        if got:
            assert got[0].ip == victim.ip
            break
    else:
        raise AssertionError("no pod on the pod network was created")


def test_networking_draws_leave_the_other_draws_as_they_were() -> None:
    """Same seed, other network settings: the same pods (names, IDs, times)."""
    a = Population(40, seed=9, clock=lambda: 10**18, host_network=0.0)
    b = Population(40, seed=9, clock=lambda: 10**18, host_network=1.0, pod_cidr="fd00::/64")
    strip = [(s.id, s.uid, s.name, s.created_at) for s in a.snapshot().sandboxes]
    assert strip == [(s.id, s.uid, s.name, s.created_at) for s in b.snapshot().sandboxes]
