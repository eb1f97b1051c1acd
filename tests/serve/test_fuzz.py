"""Fuzzing a real ``podcache serve``: schemathesis from its own /openapi.json (positive and
negative cases, responses checked against the document), then hypothesis over raw request
lines, paths, queries and headers. No case may get a 5xx or crash the server.
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.serve.conftest import Client, ServeProcess, free_port

CASES = {"schemathesis": 0, "raw": 0}
# Over-long queries and headers are refused with 414 and 431, which schemathesis does not count
# as rejections by default.
CONFIG = schemathesis.Config.from_dict(
    {
        "checks": {
            "negative_data_rejection": {
                "expected-statuses": [400, 401, 403, 404, 405, 406, 409, 414, 415, 422, 431]
            }
        }
    }
)
SCHEMATHESIS_EXAMPLES = 80
RAW_EXAMPLES = 600


@pytest.fixture(scope="module")
def fuzzed() -> Iterator[Client]:
    """A server over a 30-pod simulation (a short cache period: refreshes happen too)."""
    port = free_port()
    args = ["--sim", "--sim-pods", "30", "--listen", f"127.0.0.1:{port}", "--cache-period", "1s"]
    with ServeProcess(args) as server:
        yield Client(port=port)
        assert server.process is not None and server.process.poll() is None, "server died"
    assert server.returncode == 0, server.stderr
    assert "Traceback" not in server.stderr, server.stderr
    assert "internal error" not in server.stderr, server.stderr
    print(f"\nfuzz cases: {CASES}")


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_the_api_conforms_to_its_document_and_never_fails(fuzzed: Client, mode: str) -> None:
    api = schemathesis.openapi.from_url(
        f"http://127.0.0.1:{fuzzed.port}/openapi.json", config=CONFIG
    )
    results: list[Any] = list(api.get_all_operations())
    operations = [result.ok() for result in results]
    assert len(operations) >= 7  # schemathesis leaves out the document's own path
    for operation in operations:
        if mode == "negative" and not list(operation.iter_parameters()):
            continue  # no parameters to break: no negative case exists
        strategy = operation.as_strategy(generation_mode=GenerationMode(mode))

        @settings(
            max_examples=SCHEMATHESIS_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy)
        def run(case: Any) -> None:
            if str((case.query or {}).get("watch", "")).lower() in ("1", "true"):
                return  # a watch streams until closed: tests/serve/test_watch_stream.py
            CASES["schemathesis"] += 1
            response = case.call_and_validate()
            assert response.status_code < 500, response.text

        run()


_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
_SEGMENT = st.one_of(
    st.sampled_from(["pods", "containers", "namespaces", "healthz", "readyz", "metrics",
                     "openapi.json", "", ".", "..", "%2F", "%00", "%FF", "%", "containerd:"]),
    st.text(alphabet=string.ascii_letters + string.digits + "-_.~%:@!$&'()*+,;=", max_size=30),
)  # fmt: skip
_PATH = st.lists(_SEGMENT, min_size=1, max_size=6).map(lambda parts: "/" + "/".join(parts))
_QUERY = st.lists(
    st.tuples(
        st.sampled_from(["namespace", "label", "newer_than", "fresh", "x", "", "label%3D"]),
        st.one_of(
            st.from_regex(r"[0-9.eE+\-]{0,20}", fullmatch=True),
            st.text(alphabet=string.printable, max_size=30),
        ),
    ),
    max_size=6,
).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))
_HEADER_NAMES = st.sampled_from(
    ["Authorization", "If-None-Match", "X-Podcache-Newer-Than", "Accept", "X-Other", "Range"]
)
_HEADERS = st.lists(
    st.tuples(_HEADER_NAMES, st.text(alphabet=string.printable.strip(), max_size=60)),
    max_size=5,
)
_METHOD = st.sampled_from(["GET", "GET", "GET", "HEAD", "POST", "DELETE", "BREW", "get"])


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


@settings(
    max_examples=RAW_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(method=_METHOD, path=_PATH, query=_QUERY, headers=_HEADERS, junk=_TEXT)
def test_raw_requests_never_get_a_5xx(
    fuzzed: Client,
    *,
    method: str,
    path: str,
    query: str,
    headers: list[tuple[str, str]],
    junk: str,
) -> None:
    CASES["raw"] += 1
    target = path + ("?" + query if query else "")
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers]
    if junk:
        lines.append(f"X-Junk: {junk}")
    answer = fuzzed.raw(_encode("\r\n".join(lines) + "\r\n\r\n"))
    status_line = answer.split(b"\r\n", 1)[0]
    if not answer:
        return  # the server refused to parse it and closed: not a crash (checked below)
    assert status_line.startswith(b"HTTP/1.1 "), answer[:200]
    status = int(status_line.split()[1])
    assert status < 500, answer[:400]
    json_error = b"content-type: application/json" in answer.lower() and status >= 400
    if json_error and method != "HEAD":
        assert b'"error"' in answer


def test_the_server_still_answers_after_fuzzing(fuzzed: Client) -> None:
    assert fuzzed.get("/healthz").status == 200
    metrics = fuzzed.get("/metrics").body.decode()
    assert 'code="500"' not in metrics
