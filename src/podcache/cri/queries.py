"""What the getters ask for: the list requests, and the owner of an ID in a filtered answer.

Holds the kubelet's list filters (running only, or none), their narrowing to one pod (the
kubelet's pod-UID label) or to one ID, and the checks of a pod UID and of the item a filtered
answer names. Deliberately not here: making the calls (the getters) and converting their
answers (``convert``).
"""

from __future__ import annotations

from podcache.cri.proto import api_pb2 as pb
from podcache.model import PodList

__all__ = ["CRI_VERSION", "POD_UID_LABEL"]

CRI_VERSION = "0.1.0"
"""The version podcache sends in VersionRequest (the kubelet's)."""


def _list_requests(all: bool) -> tuple[pb.ListPodSandboxRequest, pb.ListContainersRequest]:
    """The kubelet's filters: running only (READY sandboxes, RUNNING containers), or none."""
    if all:
        return pb.ListPodSandboxRequest(), pb.ListContainersRequest(filter=pb.ContainerFilter())
    return (
        pb.ListPodSandboxRequest(
            filter=pb.PodSandboxFilter(state=pb.PodSandboxStateValue(state=pb.SANDBOX_READY))
        ),
        pb.ListContainersRequest(
            filter=pb.ContainerFilter(state=pb.ContainerStateValue(state=pb.CONTAINER_RUNNING))
        ),
    )


POD_UID_LABEL = "io.kubernetes.pod.uid"
"""The kubelet's label naming a sandbox's or container's pod (``get_pod``'s filter)."""


def _pod_requests(uid: str, all: bool) -> tuple[pb.ListPodSandboxRequest, pb.ListContainersRequest]:
    """``_list_requests`` narrowed to one pod: the kubelet's pod-UID label as a selector, so
    every sandbox and container the kubelet would group into that pod is listed."""
    sandbox_request, container_request = _list_requests(all)
    sandbox_request.filter.label_selector[POD_UID_LABEL] = uid
    container_request.filter.label_selector[POD_UID_LABEL] = uid
    return sandbox_request, container_request


def _id_requests(ident: str) -> tuple[pb.ListPodSandboxRequest, pb.ListContainersRequest]:
    """Both list calls filtered by one ID, in every state: a container or a sandbox."""
    return (
        pb.ListPodSandboxRequest(filter=pb.PodSandboxFilter(id=ident)),
        pb.ListContainersRequest(filter=pb.ContainerFilter(id=ident)),
    )


def _check_uid(uid: object) -> str:
    if not isinstance(uid, str) or not uid:
        raise ValueError(f"uid must be a non-empty pod UID string, not {uid!r}")
    return uid


def _owner_of(pods: PodList, ident: str) -> str | None:
    """The UID of the pod of ``ident`` in a listing filtered by that ID (the runtime's filter
    is not trusted: the ID must be the item's own)."""
    for pod in pods:
        if any(part.id.id == ident for part in (*pod.containers, *pod.sandboxes)):
            return pod.id
    return None
