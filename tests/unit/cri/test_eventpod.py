"""The pod an event describes (``cri.eventpod``; docs/architecture.md §7, "Events are facts"):
the listing's rules where they apply, its own where not, and the bound of what one event can
make the cache remember (``MAX_FACT_TEXT``, ``MAX_EVENT_CONTAINERS``) at and past its limit."""

from __future__ import annotations

import pytest

from podcache import ContainerState
from podcache.cri.eventpod import MAX_FACT_TEXT, pod_of_event
from podcache.cri.eventstream import _valid_id
from podcache.cri.eventwire import MAX_EVENT_CONTAINERS, ContainerFields, EventFields

SANDBOX = "s" * 64


def fields(
    *,
    uid: str = "uid-1",
    name: str = "web-0",
    containers: tuple[ContainerFields, ...] = (),
    network_mode: int = 0,
    ip: str = "10.0.0.1",
    created_at: int = 5_000_000_000,
) -> EventFields:
    return EventFields(
        1,
        "c" * 64,
        7,
        SANDBOX,
        uid,
        0,
        ip,
        ("fd00::1", "not an ip", "10.0.0.1"),
        0,
        network_mode,
        name,
        "default",
        created_at,
        containers,
        0,
    )


def status(ident: str = "c" * 64, name: str = "app", image: str = "img:1") -> ContainerFields:
    return (ident, name, 2, 1, 9, image, "sha256:" + "0" * 64)


def test_an_event_without_a_uid_describes_no_pod() -> None:
    assert pod_of_event(fields(uid=""), "containerd", _valid_id) is None


def test_the_pod_is_its_sandbox_its_containers_and_its_valid_ips() -> None:
    pod = pod_of_event(fields(containers=(status(),)), "containerd", _valid_id)
    assert pod is not None
    assert (pod.id, pod.name, pod.namespace, pod.created_at) == ("uid-1", "web-0", "default", 5e9)
    assert pod.sandboxes[0].id.qualified == f"containerd://{SANDBOX}"
    assert pod.sandboxes[0].state is ContainerState.RUNNING
    item = pod.containers[0]
    assert (item.name, item.image, item.attempt, item.state) == (
        "app",
        "img:1",
        2,
        ContainerState.RUNNING,
    )
    assert item.image_id == item.image_ref and item.sandbox_id == SANDBOX
    assert pod.ips == ("10.0.0.1", "fd00::1")  # canonical, each once, the invalid one left out


def test_a_host_network_pod_has_no_ips_and_a_time_before_the_epoch_is_unknown() -> None:
    pod = pod_of_event(fields(network_mode=2, created_at=-6795364578871345152), "c", _valid_id)
    assert pod is not None and pod.ips == () and pod.host_network and pod.created_at == 0


def test_a_container_status_with_an_id_that_fails_the_check_is_left_out() -> None:
    statuses = (status("bad id!"), status(""), status("x" * 257), status("ok"))
    pod = pod_of_event(fields(containers=statuses), "containerd", _valid_id)
    assert pod is not None and [c.id.id for c in pod.containers] == ["ok"]


@pytest.mark.parametrize("length", [MAX_FACT_TEXT, MAX_FACT_TEXT + 1, 100_000])
def test_texts_are_cut_at_max_fact_text(length: int) -> None:
    text = "n" * length
    pod = pod_of_event(
        fields(name=text, containers=(status(name=text, image=text),)), "c", _valid_id
    )
    assert pod is not None
    kept = min(length, MAX_FACT_TEXT)
    assert len(pod.name) == len(pod.containers[0].name) == len(pod.containers[0].image) == kept


def test_at_most_max_event_containers_are_described() -> None:
    statuses = tuple(status(f"c{n}") for n in range(MAX_EVENT_CONTAINERS))
    pod = pod_of_event(fields(containers=statuses), "containerd", _valid_id)
    assert pod is not None and len(pod.containers) == MAX_EVENT_CONTAINERS
