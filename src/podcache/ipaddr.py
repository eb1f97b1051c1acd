"""Pod IP text in one canonical spelling; imports nothing but ``ipaddress``.

Its own module so that the CLI can read an IP argument before the model (and msgspec) are
imported: ``podcache which IP`` sends its calls first and imports the model while the runtime
answers (docs/architecture.md §6 rule 1). ``podcache.model`` re-exports ``normalise_ip``.
"""

from __future__ import annotations

import ipaddress

__all__ = ["normalise_ip"]


def normalise_ip(text: str) -> str:
    """``text`` as an IP address's canonical text (``ipaddress``'s compressed form: IPv6 in
    lower case with the longest zero run folded). An IPv4-mapped IPv6 address
    (``::ffff:10.0.0.7``, RFC 4291 2.5.5.2) is the IPv4 address it maps (``10.0.0.7``): a
    dual-stack socket reports IPv4 peers that way, and they are the same host. A ValueError
    naming ``text`` when it is not an IPv4 or IPv6 address (no scope IDs, no prefix lengths)."""
    if not isinstance(text, str):
        raise TypeError(f"IP address must be a str, not {type(text).__name__}")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an IP address") from None
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
        raise ValueError(f"{text!r} is not an IP address: a pod IP has no scope ID")
    mapped = getattr(address, "ipv4_mapped", None)
    return (address if mapped is None else mapped).compressed
