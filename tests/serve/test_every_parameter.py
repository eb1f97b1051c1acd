"""Every parameter of the OpenAPI document, driven by hypothesis against a real ``podcache
serve`` over a real socket: no value any client can send gets a 5xx.

schemathesis (``test_fuzz.py``) draws whole requests from the document's schemas, which rarely
reach a parameter's edges (a date-time whose UTC falls in year 0 or 10000, a leap second, an
unencoded ``+``). Here each (route, parameter) pair gets its own run: the parameter under test
takes hostile values (its schema's edges, junk, encodings) while the route's other path
parameters name something real. A parameter the document gains without a strategy here fails
``test_every_parameter_of_the_document_has_hostile_values``.
"""

from __future__ import annotations

import socket
import string
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podcache.serve.openapi import document
from tests.serve.conftest import Client, ServeProcess, free_port

EXAMPLES = 50

_JUNK = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40
)  # any text, control characters and non-ASCII included
_HARD_TIMES = [
    "9999-12-31T23:59:59-01:00",  # UTC in year 10000
    "0001-01-01T00:00:00+01:00",  # UTC in year 0
    "9999-12-31T23:59:60Z",
    "2016-12-31T23:59:60Z",  # a real leap second
    "2016-12-31T12:59:60Z",
    "2026-12-03T12:36:50+00:00",  # sent raw: the + arrives as a space
    "2026-12-03T12:36:50 00:00",
    "2026-02-30T00:00:00Z",
    "2026-12-03T24:00:00Z",
    "2026-12-03T12:36:50+24:00",
    "2026-12-03T12:36:50.1234567891Z",
    "99999999999.999999999",
    "0",
]
_OFFSETS = st.sampled_from(["Z", "z", "+00:00", "-00:00", "+23:59", "-23:59", " 05:30", "+14:00"])
_TIMES = st.builds(
    lambda year, month, day, hour, minute, second, fraction, offset: (
        f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}{fraction}{offset}"
    ),
    st.integers(0, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 24),
    st.integers(0, 60),
    st.integers(0, 61),
    st.sampled_from(["", ".5", ".123456789"]),
    _OFFSETS,
)
_NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["1e309", "-0", "0x10", "1_000", "١٢٣", "+1", ".", "1e-400", " 1"]),
)
_BOOLEANS = st.sampled_from(["1", "true", "0", "false", "TRUE", "yes", "", "2", "1 "])
_NAMES = st.one_of(
    _JUNK,
    st.sampled_from(["a" * 254, "a_b", "a/b", "..", "%00", "containerd://", "://x", "x://"]),
)
_IPS = st.one_of(
    st.ip_addresses().map(str),
    st.ip_addresses(v=4).map(lambda a: f"::ffff:{a}"),
    st.sampled_from(["10.0.0.256", "fe80::1%eth0", "10.0.0.0/8", "[::1]", "::ffff:1.2.3"]),
    _JUNK,
)

VALUES: dict[str, st.SearchStrategy[str]] = {
    "namespace": _NAMES,
    "name": _NAMES,
    "uid": _NAMES,
    "id": _NAMES,
    "label": st.one_of(
        _JUNK, st.sampled_from(["app=web", "a==b", "k", "=v", "a" * 64 + "=b", "x/y=z"])
    ),
    "all": st.one_of(_BOOLEANS, _JUNK),
    "fresh": st.one_of(_BOOLEANS, _JUNK),
    "watch": st.one_of(_BOOLEANS, _JUNK),
    "departed": st.one_of(_BOOLEANS, _JUNK),
    "newer_than": st.one_of(_NUMBERS, _JUNK),
    "X-Podcache-Newer-Than": _NUMBERS,
    "since": st.one_of(_NUMBERS, _JUNK),
    "If-None-Match": st.sampled_from(["*", 'W/"x"', '"a", W/"b"', "", ",,,", 'W/""']),
    "at": st.one_of(st.sampled_from(_HARD_TIMES), _TIMES, _NUMBERS, _JUNK),
    "ip": _IPS,
    "pid": st.one_of(_NUMBERS, _JUNK, st.sampled_from(["1", "4194304", "4194305", "01"])),
}
"""Hostile values for each parameter the document names, by name."""


def _parameters() -> list[tuple[str, dict[str, Any]]]:
    """Every (route, parameter) pair of the document, as the server serves it."""
    pairs = []
    for route, operations in document(auth=False, version="test")["paths"].items():
        for operation in operations.values():
            pairs += [(route, parameter) for parameter in operation.get("parameters", [])]
    return pairs


PAIRS = _parameters()


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Client, dict[str, str]]]:
    """A real serve over a 20-pod simulation, and a real value for each path parameter."""
    port = free_port()
    args = ["--sim", "--sim-pods", "20", "--listen", f"127.0.0.1:{port}", "--cache-period", "1s"]
    with ServeProcess(args) as process:
        client = Client(port=port)
        pod = next(p for p in client.get("/pods").json()["items"] if p["ips"] and p["containers"])
        real = {
            "uid": pod["id"],
            "namespace": pod["namespace"],
            "name": pod["name"],
            "id": pod["containers"][0]["id"],
            "ip": pod["ips"][0],
            "pid": "1",
        }
        yield client, real
        assert process.process is not None and process.process.poll() is None, "server died"
    assert "Traceback" not in process.stderr, process.stderr
    assert "internal error" not in process.stderr, process.stderr


def _status(port: int, request: bytes) -> int:
    """Send one request; the status of its answer (read up to the end of the head: a watch's
    stream is never read)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        head = b""
        while b"\r\n" not in head:
            chunk = sock.recv(65536)
            if not chunk:
                break
            head += chunk
    status_line = head.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.1 "), head[:200]
    return int(status_line.split()[1])


MISSING = {
    "uid": "no-such-uid",
    "namespace": "nosuch",
    "name": "nosuch",
    "id": "0123456789abcdef",
    "ip": "192.0.2.1",
    "pid": "4194304",
}
"""For each path parameter, a value nothing holds (the lookups' 404s are answers too)."""


def _request(
    route: str, parameter: dict[str, Any], value: str, real: dict[str, str], raw: bool
) -> bytes:
    """The request for ``route`` with ``value`` in ``parameter`` (percent-encoded, or ``raw``:
    as typed into a URL, where only what would break the request line is encoded); the
    route's other path parameters from ``real``."""
    where, name = parameter["in"], parameter["name"]
    safe = string.ascii_letters + string.digits + "-._~:+=/@!$'()*,;" if raw else ""
    encoded = quote(value, safe=safe)
    path = route
    for key, known in real.items():
        path = path.replace(f"{{{key}}}", encoded if where == "path" and key == name else known)
    headers = ["Host: 127.0.0.1", "Connection: close"]
    if where == "query":
        path += f"?{name}={encoded}"
    elif where == "header":
        printable = "".join(c for c in value if " " <= c <= "~")
        headers.append(f"{name}: {printable}")
    return ("\r\n".join([f"GET {path} HTTP/1.1", *headers]) + "\r\n\r\n").encode()


def test_every_parameter_of_the_document_has_hostile_values() -> None:
    assert {parameter["name"] for _, parameter in PAIRS} <= set(VALUES)
    assert len(PAIRS) >= 40


@pytest.mark.parametrize(
    ("route", "parameter"), PAIRS, ids=[f"{route} {p['name']}" for route, p in PAIRS]
)
def test_no_value_of_any_parameter_gets_a_5xx(
    server: tuple[Client, dict[str, str]], route: str, parameter: dict[str, Any]
) -> None:
    client, real = server
    assert client.port is not None

    @settings(max_examples=EXAMPLES, database=None)
    @given(value=VALUES[parameter["name"]], raw=st.booleans(), known=st.booleans())
    def check(value: str, raw: bool, known: bool) -> None:
        others = real if known else MISSING
        status = _status(client.port, _request(route, parameter, value, others, raw))  # type: ignore[arg-type]
        assert status < 500, (route, parameter["name"], value, status)

    check()


def test_the_served_document_is_the_one_driven(server: tuple[Client, dict[str, str]]) -> None:
    client, _ = server
    served = client.get("/openapi.json").json()
    routes = {route for route, _ in PAIRS}
    assert routes <= set(served["paths"])
    for route, parameter in PAIRS:
        names = {
            p["name"]
            for operation in served["paths"][route].values()
            for p in operation.get("parameters", [])
        }
        assert parameter["name"] in names
