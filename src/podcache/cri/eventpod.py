"""The pod an event describes: its sandbox status and container statuses as a ``model.Pod``;
no I/O.

An event is a fact about its pod as the runtime reported it at that moment (docs/architecture.md
§7, "Events are facts"): the cache remembers it (``cache/departed.py``) even when no listing
ever sees the pod. This module builds that pod from the fields ``eventwire`` read, by the
listing's rules where they apply (``convert.container_state``, ``convert.sandbox_state``,
``networks.network_of``) and these of its own:

- no pod without its UID (``pod_sandbox_status.metadata.uid``): containerd 1.7 sends a
  sandbox's DELETED with an empty sandbox status;
- the sandbox is the status's ``id``, its state READY or NOTREADY, its ``attempt`` unknown (0);
- a container is each of ``containers_statuses`` with an ID that passes the event's own ID
  check (others are left out, never an error: the event is still a hint), in the event's
  sandbox; its ``image_id`` is its ``image_ref``, as the listing's rule for an empty
  ``image_id`` has it;
- ``created_at`` is the sandbox's; a time before the epoch (containerd 2.x sends Go's zero time
  on a sandbox's DELETED) is 0, unknown;
- the IPs are the valid ones, none on the host network;
- every text is cut to ``MAX_FACT_TEXT`` characters, so what one event can make the cache
  remember is bounded (``fact_bytes``).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from podcache.cri.convert import container_state, sandbox_state
from podcache.cri.eventwire import ContainerFields, EventFields
from podcache.cri.networks import network_of
from podcache.model import Container, ContainerID, Pod

__all__ = ["MAX_FACT_TEXT", "pod_of_event"]

MAX_FACT_TEXT = 1024
"""Longest name, namespace, image or image reference kept from an event (Kubernetes names are
at most 253 characters, image references rarely past a few hundred)."""


def _container(runtime: str, fields: ContainerFields, sandbox_id: str) -> Container:
    ident, name, attempt, state, _, image, image_ref = fields
    return Container(
        id=ContainerID(runtime, ident),
        sandbox_id=sandbox_id,
        name=name[:MAX_FACT_TEXT],
        image=image[:MAX_FACT_TEXT],
        image_id=image_ref[:MAX_FACT_TEXT],
        image_ref=image_ref[:MAX_FACT_TEXT],
        state=container_state(state),
        attempt=attempt,
    )


def pod_of_event(fields: EventFields, runtime: str, valid_id: Callable[[str], bool]) -> Pod | None:
    """The pod ``fields`` describe (module docstring), its IDs qualified by ``runtime``; None
    without a UID. ``valid_id`` checks a container status's ID as the event's own are checked."""
    if not fields.pod_uid:
        return None
    network, _ = network_of(fields)
    sandboxes: tuple[Container, ...] = ()
    if fields.sandbox_id:
        sandbox = Container(
            id=ContainerID(runtime, fields.sandbox_id), state=sandbox_state(fields.sandbox_state)
        )
        sandboxes = (sandbox,)
    containers = tuple(
        _container(runtime, status, fields.sandbox_id)
        for status in fields.containers
        if valid_id(status[0])
    )
    pod = Pod(
        id=fields.pod_uid,
        name=fields.pod_name[:MAX_FACT_TEXT],
        namespace=fields.pod_namespace[:MAX_FACT_TEXT],
        created_at=max(fields.sandbox_created_at, 0),
        containers=containers,
        sandboxes=sandboxes,
        host_network=network.host_network,
    )
    if network.ips:  # canonical and each once already (network_of): not normalised again
        msgspec.structs.force_setattr(pod, "ips", network.ips)
    return pod
