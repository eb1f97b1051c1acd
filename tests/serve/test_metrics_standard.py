"""``/metrics`` of a real ``podcache serve``, parsed by prometheus_client's own
parser: the standard process and Python collectors; request durations by route template
(``podcache_http_request_duration_seconds``), whose series stay bounded however many paths
are asked and agree with ``podcache_http_requests_total``; no series with ``_created``, for
counters and histograms alike."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from podcache.serve.openapi import document
from tests.serve.conftest import Client, ServeProcess, free_port

ROUTES = set(document(auth=False, version="test")["paths"]) | {"unmatched"}


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    port = free_port()
    with ServeProcess(["--sim", "--sim-pods", "5", "--listen", f"127.0.0.1:{port}"]):
        yield Client(port=port)


def samples(client: Client) -> tuple[str, list[Sample]]:
    text = client.get("/metrics").body.decode()
    return text, [s for family in text_string_to_metric_families(text) for s in family.samples]


def test_the_standard_process_and_python_collectors_are_there(client: Client) -> None:
    _, found = samples(client)
    names = {sample.name for sample in found}
    for name in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
        "python_info",
        "python_gc_objects_collected_total",
    ):
        assert name in names, name


def test_request_durations_are_by_route_template_bounded_and_agree_with_the_counts(
    client: Client,
) -> None:
    for n in range(150):  # 150 distinct paths: the series must not follow them
        client.get(f"/pods/no-such-{n}")
        client.get(f"/containers/abcd{n:04d}")
        client.get(f"/nowhere/{n}")
    client.get("/pods")
    _, found = samples(client)
    durations = [s for s in found if s.name == "podcache_http_request_duration_seconds_count"]
    routes = {s.labels["route"] for s in durations}
    assert {"/pods/{uid}", "/containers/{id}", "unmatched", "/pods"} <= routes <= ROUTES
    counted: Counter[str] = Counter()
    for sample in found:
        if sample.name == "podcache_http_requests_total":
            counted[sample.labels["route"]] += int(sample.value)
    for sample in durations:
        assert sample.value == counted[sample.labels["route"]], sample
    buckets = [
        s
        for s in found
        if s.name == "podcache_http_request_duration_seconds_bucket"
        and s.labels["route"] == "/pods/{uid}"
    ]
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value >= 150
    assert [b.value for b in buckets] == sorted(b.value for b in buckets)  # cumulative


def test_no_series_has_a_created_sample(client: Client) -> None:
    client.get("/pods")
    text, found = samples(client)
    assert not [s.name for s in found if s.name.endswith("_created")]
    assert "_created" not in text
    histograms = {s.name for s in found if s.name.endswith("_bucket")}
    assert {
        "podcache_refresh_duration_seconds_bucket",
        "podcache_pod_relist_duration_seconds_bucket",
        "podcache_http_request_duration_seconds_bucket",
    } <= histograms
