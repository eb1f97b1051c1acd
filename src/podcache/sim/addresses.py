"""The simulator's pod IP addresses: a pool over one CIDR, freed addresses handed out first.

``AddressPool(cidr)`` gives each READY, non-host-network sandbox an address; when the sandbox
stops (its network is torn down) the address goes back. Freed addresses are reused before any
fresh one, oldest freed first, so a test can make an IP pass from one pod to the next. The
network's own address and the first host (a bridge gateway's) are never handed out, nor, for
IPv4, the broadcast address. An exhausted pool answers "" (the sandbox has no address).
"""

from __future__ import annotations

import collections
import ipaddress

__all__ = ["DEFAULT_POD_CIDR", "AddressPool"]

DEFAULT_POD_CIDR = "10.244.0.0/16"
"""The simulated node's pod CIDR (a common kubeadm/flannel cluster range)."""


class AddressPool:
    """Addresses of one CIDR (IPv4 or IPv6), as canonical text. Not thread-safe: the
    population calls it with its lock held."""

    def __init__(self, cidr: str = DEFAULT_POD_CIDR) -> None:
        try:
            self.network = ipaddress.ip_network(cidr, strict=True)
        except ValueError as exc:
            raise ValueError(f"pod CIDR {cidr!r} is not a network: {exc}") from None
        last = self.network.num_addresses - (1 if self.network.version == 4 else 0)
        self._next = 2  # offset of the next fresh address (0: the network, 1: the gateway)
        self._end = last
        self._freed: collections.deque[str] = collections.deque()
        self._held: set[str] = set()
        self.exhausted = 0
        """Allocations that found no address left."""

    def __len__(self) -> int:
        """Addresses held now."""
        return len(self._held)

    def allocate(self) -> str:
        """A free address (a freed one first), or "" when none is left."""
        if self._freed:
            address = self._freed.popleft()
        elif self._next < self._end:
            address = str(self.network.network_address + self._next)
            self._next += 1
        else:
            self.exhausted += 1
            return ""
        self._held.add(address)
        return address

    def release(self, address: str) -> None:
        """Give ``address`` back (one not held, or "", is ignored)."""
        if address in self._held:
            self._held.remove(address)
            self._freed.append(address)
