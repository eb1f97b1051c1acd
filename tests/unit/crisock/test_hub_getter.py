"""The caches' getter behind ``--cri-listen`` (``HubGetter``) names the runtime, not itself."""

from __future__ import annotations

from podcache.cache.shared import endpoint_name
from podcache.serve.allview import all_pods_getter
from podcache.serve.eventhub import EventHub, HubGetter


class _Runtime:
    endpoint = "unix:///var/run/crio/crio.sock"


def test_the_caches_log_lines_name_the_runtimes_endpoint() -> None:
    runtime = _Runtime()
    getter = HubGetter(runtime, EventHub(runtime))
    assert endpoint_name(getter) == "unix:///var/run/crio/crio.sock"


def test_the_all_view_over_the_hub_names_the_runtimes_endpoint() -> None:
    runtime = _Runtime()
    view = all_pods_getter(HubGetter(runtime, EventHub(runtime)))
    assert endpoint_name(view) == "unix:///var/run/crio/crio.sock (?all=1 view)"
