"""A simulated CRI runtime (real gRPC over a churning pod population); no client, cache or CLI.

It shares only the generated protobuf with ``podcache.cri``; it never imports the client, the
cache or the conversion code, so it can check them independently (docs/architecture.md §2).
"""

from podcache.sim.addresses import DEFAULT_POD_CIDR, AddressPool
from podcache.sim.churn import ChurnPause
from podcache.sim.command import cli_main, sim_command
from podcache.sim.faults import Faults, Malformed, malformed_items, malformed_uid
from podcache.sim.flavor import CONTAINERD, CRIO, FLAVORS, Flavor
from podcache.sim.population import (
    DEFAULT_HOST_NETWORK,
    DEFAULT_NAMESPACES,
    LogicalClock,
    PodShape,
    Population,
    SimContainer,
    SimContainerState,
    SimEvent,
    SimEventType,
    SimSandbox,
    SimSandboxState,
    Snapshot,
)
from podcache.sim.runtime import SimRuntime
from podcache.sim.server import RUNTIME_NAME

__all__ = [
    "CONTAINERD",
    "CRIO",
    "DEFAULT_HOST_NETWORK",
    "DEFAULT_NAMESPACES",
    "DEFAULT_POD_CIDR",
    "FLAVORS",
    "RUNTIME_NAME",
    "AddressPool",
    "ChurnPause",
    "Faults",
    "Flavor",
    "LogicalClock",
    "Malformed",
    "PodShape",
    "Population",
    "SimContainer",
    "SimContainerState",
    "SimEvent",
    "SimEventType",
    "SimRuntime",
    "SimSandbox",
    "SimSandboxState",
    "Snapshot",
    "cli_main",
    "malformed_items",
    "malformed_uid",
    "sim_command",
]
