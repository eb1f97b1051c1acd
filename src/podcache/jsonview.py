"""The pod JSON shape shared by ``podcache`` output and the HTTP API: model -> plain dicts only.

It holds the one mapping from the model to JSON-ready builtins (dicts, lists, str, int, so the
result can go to ``json``, ``msgspec.json`` or YAML alike) and deliberately no encoding, no I/O
and nothing derived that the model does not hold (no "ready" flag, no ages: readers compute
those from ``created_at`` and the states). The shape::

    {"items": [                                   # pods_document: pods in the snapshot's order
      {"id": "<pod UID>", "name": "...", "namespace": "...",
       "created_at": 1735689600000000000,         # ns since the epoch (int64)
       "labels": {"app": "web", ...},             # the pod's own labels, sorted by key
       "ips": ["10.244.1.7", "fd00::7"],          # primary first; [] when unknown
       "host_network": false,                     # on the node's network (then no ips)
       "containers": [                            # newest first, as the model holds them
         {"id": "containerd://3f2a...",           # ContainerID as ``type://id``
          "name": "web", "image": "...", "image_id": "...", "image_ref": "...",
          "image_runtime_handler": "", "hash": 1234, "state": "running",
          "attempt": 0}],                         # CRI metadata attempt (restarts)
       "sandboxes": [ ...same shape as containers... ]}]}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from podcache.model import Container, Pod

__all__ = ["PID_MISS_REASONS", "container_to_json", "pod_to_json", "pods_document"]

PID_MISS_REASONS = {
    "no_process": "no_process",
    "not_in_container": "not_in_container",
    "unknown": "container_unknown",
}
"""Why a PID has no pod, machine-readably (``"reason"`` in a ``/pids/{pid}`` 404 and in
``podcache which -o json``), by ``podcache.cache.pids.PodLookup`` outcome: no such process; its
cgroup names no container or pod; it names one the runtime does not list."""


def container_to_json(container: Container) -> dict[str, Any]:
    """One container or sandbox: its ID as ``type://id`` and its state as a lower-case string."""
    return {
        "id": container.id.qualified,
        "name": container.name,
        "image": container.image,
        "image_id": container.image_id,
        "image_ref": container.image_ref,
        "image_runtime_handler": container.image_runtime_handler,
        "hash": container.hash,
        "state": container.state.value,
        "attempt": container.attempt,
    }


def pod_to_json(pod: Pod) -> dict[str, Any]:
    """One pod with its containers and sandboxes (in the model's order) and labels as an object."""
    return {
        "id": pod.id,
        "name": pod.name,
        "namespace": pod.namespace,
        "created_at": pod.created_at,
        "labels": pod.label_map(),
        "ips": list(pod.ips),
        "host_network": pod.host_network,
        "containers": [container_to_json(c) for c in pod.containers],
        "sandboxes": [container_to_json(s) for s in pod.sandboxes],
    }


def pods_document(pods: Iterable[Pod]) -> dict[str, Any]:
    """``{"items": [pod, ...]}`` in the given order (a PodList's: newest first)."""
    return {"items": [pod_to_json(pod) for pod in pods]}
