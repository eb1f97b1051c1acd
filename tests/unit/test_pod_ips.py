"""``Pod.ips``, ``Pod.host_network`` and ``PodList.by_ip``, held to ``ipaddress``
and to a plain scan: any spelling of an address normalises to one canonical text (an
IPv4-mapped IPv6 address to the IPv4 one it maps); ``by_ip`` answers what a
newest-first scan that skips host-network pods finds; JSON carries both fields.
"""

from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podcache import Pod, PodList
from podcache.jsonview import pod_to_json
from podcache.model import normalise_ip

V4 = st.ip_addresses(v=4)
V6 = st.ip_addresses(v=6)
ADDRESSES = st.one_of(V4, V6)


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def host(address: Address) -> Address:
    """The host an address names: an IPv4-mapped IPv6 address is its IPv4 address."""
    mapped = getattr(address, "ipv4_mapped", None)
    return address if mapped is None else mapped


@st.composite
def spelling(draw: st.DrawFn, address: Address) -> str:
    """One of the texts ``ipaddress`` reads as ``address``, or as the IPv4-mapped IPv6 address
    of an IPv4 one (``::ffff:10.0.0.7``, ``0:0:0:0:0:FFFF:0A00:0007``...)."""
    if isinstance(address, ipaddress.IPv4Address):
        mapped = ipaddress.IPv6Address(f"::ffff:{address}")
        forms = [str(address), f"::ffff:{address}", mapped.compressed, mapped.exploded]
        text = draw(st.sampled_from(forms))
        return text.upper() if draw(st.booleans()) else text
    forms = [address.compressed, address.exploded, address.exploded.upper()]
    if address.ipv4_mapped is not None:
        forms.append(f"::ffff:{address.ipv4_mapped}")
    text = draw(st.sampled_from(forms))
    return text.upper() if draw(st.booleans()) else text


@given(ADDRESSES, st.data())
def test_every_spelling_normalises_to_the_compressed_text(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, data: st.DataObject
) -> None:
    text = data.draw(spelling(address))
    assert normalise_ip(text) == host(address).compressed
    assert normalise_ip(normalise_ip(text)) == host(address).compressed  # idempotent


@given(st.text(max_size=60))
def test_text_that_is_not_an_address_is_a_value_error_naming_it(text: str) -> None:
    try:
        expected = ipaddress.ip_address(text)
    except ValueError:
        expected = None
    if expected is None or getattr(expected, "scope_id", None) is not None:
        with pytest.raises(ValueError, match="is not an IP address") as caught:
            normalise_ip(text)
        assert repr(text) in str(caught.value)
    else:
        assert normalise_ip(text) == host(expected).compressed


@pytest.mark.parametrize("text", ["fe80::1%eth0", "10.0.0.0/8", "10.0.0.256", "", " 10.0.0.1"])
def test_scope_ids_prefixes_and_junk_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not an IP address"):
        normalise_ip(text)


def test_a_pod_keeps_its_ips_canonical_in_order_each_once() -> None:
    pod = Pod(id="u", ips=["2001:DB8::0:1", "10.0.0.7", "2001:db8::1"])
    assert pod.ips == ("2001:db8::1", "10.0.0.7")
    assert type(pod.ips) is tuple
    assert Pod(id="u").ips == () and Pod(id="u").host_network is False
    with pytest.raises(ValueError, match="'nope' is not an IP address"):
        Pod(id="u", ips=["nope"])


@st.composite
def pod_lists(draw: st.DrawFn) -> PodList:
    """Pods sharing addresses from a small pool (reuse), some on the host network."""
    pool = draw(st.lists(ADDRESSES, min_size=1, max_size=6, unique=True))
    pods = []
    for index in range(draw(st.integers(0, 12))):
        ips = draw(st.lists(st.sampled_from(pool), max_size=3))
        host = draw(st.booleans()) if draw(st.integers(0, 4)) == 0 else False
        pods.append(Pod(id=f"uid-{index}", ips=[str(ip) for ip in ips], host_network=host))
    return PodList(pods)


def reference_by_ip(pods: PodList, ip: str) -> Pod | None:
    wanted = host(ipaddress.ip_address(ip))
    for pod in pods:  # newest first: the first holder wins
        if not pod.host_network and any(host(ipaddress.ip_address(i)) == wanted for i in pod.ips):
            return pod
    return None


@settings(max_examples=300)
@given(pod_lists(), st.data())
def test_by_ip_answers_what_a_newest_first_scan_skipping_host_network_finds(
    pods: PodList, data: st.DataObject
) -> None:
    held = [ipaddress.ip_address(ip) for pod in pods for ip in pod.ips]
    address = data.draw(st.one_of(ADDRESSES, st.sampled_from(held)) if held else ADDRESSES)
    text = data.draw(spelling(address))
    found = pods.by_ip(text)
    expected = reference_by_ip(pods, text)
    assert found is expected


@settings(max_examples=200)
@given(pod_lists(), st.data())
def test_an_ipv4_mapped_address_finds_what_its_ipv4_address_finds(
    pods: PodList, data: st.DataObject
) -> None:
    held = [ipaddress.ip_address(ip) for pod in pods for ip in pod.ips]
    v4 = [address for address in held if address.version == 4]
    address = data.draw(st.sampled_from(v4) if v4 else V4)
    assert pods.by_ip(f"::ffff:{address}") is pods.by_ip(str(address))
    assert pods.by_ip(f"::FFFF:{ipaddress.IPv6Address(f'::ffff:{address}').exploded[-9:]}") is (
        pods.by_ip(str(address))
    )


def test_a_pod_given_a_mapped_address_holds_the_ipv4_one() -> None:
    pod = Pod(id="u", ips=["::ffff:10.0.0.7", "10.0.0.7", "fd00::7"])
    assert pod.ips == ("10.0.0.7", "fd00::7")
    assert PodList([pod]).by_ip("10.0.0.7") is pod


@given(pod_lists())
def test_by_ip_refuses_what_is_not_an_address(pods: PodList) -> None:
    with pytest.raises(ValueError, match=re.escape("'10.1' is not an IP address")):
        pods.by_ip("10.1")


def test_json_carries_ips_and_host_network() -> None:
    pod = Pod(id="u", ips=["fd00::7", "10.0.0.7"])
    document = pod_to_json(pod)
    assert document["ips"] == ["fd00::7", "10.0.0.7"]
    assert document["host_network"] is False
    assert pod_to_json(Pod(id="h", host_network=True))["host_network"] is True
