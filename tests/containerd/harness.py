"""A kubelet-like CRI client for tests: make and remove real pods and containers, remember them.

It talks to the runtime with the generated stubs directly (never through podcache), shapes its
requests the way the kubelet does (sandbox metadata and labels, container labels and
annotations, a cgroup parent per pod) and records what it made: IDs, names, hashes, images,
sandbox IDs, the runtime's created_at, and the state each object should be in now. Tests build
the pods they expect from these records, independently of podcache's conversion code.

Host network by default: the instances run without CNI, so a pod uses NamespaceOption(network=
NODE) and sets no hostname (containerd refuses a hostname without a private UTS namespace).
``run_pod(..., pod_network=True)`` asks for a network namespace of the pod's own instead, for
the one instance that has CNI (tests/containerd/test_cni.py); it then gets a hostname too.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import grpc

from podcache.cri.proto import api_pb2, services
from tests.containerd import criwire

BUSYBOX_IMAGE = "localhost/busybox:test"
PAUSE_IMAGE = "localhost/pause:test"
CGROUP_PARENT_PREFIX = "podcachetest"


def instance_cgroup_parent(socket_path: str) -> str:
    """The cgroup parent of one instance's pods: ``podcachetest-`` and the first 12 hex digits
    of the SHA-256 of the instance's directory (the socket's), as scripts/containerd-down
    computes it. One shared parent let any instance's teardown kill every instance's pods
    (containerd-down kills the processes left under its parent)."""
    directory = os.path.dirname(os.path.abspath(socket_path))
    return f"{CGROUP_PARENT_PREFIX}-{hashlib.sha256(directory.encode()).hexdigest()[:12]}"


LABEL_POD_NAME = "io.kubernetes.pod.name"
LABEL_POD_NAMESPACE = "io.kubernetes.pod.namespace"
LABEL_POD_UID = "io.kubernetes.pod.uid"
LABEL_CONTAINER_NAME = "io.kubernetes.container.name"
ANNOTATION_HASH = "io.kubernetes.container.hash"
ANNOTATION_RESTART_COUNT = "io.kubernetes.container.restartCount"

SANDBOX_READY = api_pb2.SANDBOX_READY
SANDBOX_NOTREADY = api_pb2.SANDBOX_NOTREADY
CONTAINER_CREATED = api_pb2.CONTAINER_CREATED
CONTAINER_RUNNING = api_pb2.CONTAINER_RUNNING
CONTAINER_EXITED = api_pb2.CONTAINER_EXITED

RUNNING_COMMAND = ("sleep", "3600")
EXITING_COMMAND = ("true",)


@dataclass
class SandboxRecord:
    """A sandbox the harness ran; ``state`` and ``removed`` follow what the harness did to it."""

    id: str
    name: str
    namespace: str
    uid: str
    attempt: int
    labels: dict[str, str]
    created_at: int
    config: api_pb2.PodSandboxConfig = field(repr=False)
    state: int = SANDBOX_READY
    removed: bool = False


@dataclass
class ContainerRecord:
    """A container the harness created; ``state`` and ``removed`` follow what was done to it."""

    id: str
    name: str
    attempt: int
    sandbox_id: str
    pod_uid: str
    pod_name: str
    pod_namespace: str
    image: str
    hash_hex: str
    command: tuple[str, ...]
    """The command given (empty: the image's entrypoint), followed by ``args``."""
    args: tuple[str, ...]
    created_at: int
    state: int = CONTAINER_CREATED
    removed: bool = False

    @property
    def hash(self) -> int:
        """The annotation's value as the kubelet reads it: hexadecimal."""
        return int(self.hash_hex, 16)


def container_hash(uid: str, name: str, attempt: int) -> str:
    """A deterministic 64-bit hex hash for a container spec (the kubelet's are hex uint64s)."""
    return hashlib.sha256(f"{uid}/{name}/{attempt}".encode()).hexdigest()[:16]


class CRIHarness:
    """Makes pods and containers through CRI like the kubelet; remembers all of them."""

    def __init__(
        self,
        socket_path: str,
        *,
        cgroup_parent: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.socket_path = socket_path
        self.cgroup_parent = (
            cgroup_parent
            or os.environ.get("CONTAINERD_TEST_CGROUP_PARENT")
            or instance_cgroup_parent(socket_path)
        )
        self.timeout = timeout
        # Tests SIGKILL and restart the runtime: reconnect quickly, and let every call wait for
        # the connection (within its deadline) instead of failing while gRPC backs off.
        self._channel = grpc.insecure_channel(
            "unix://" + socket_path,
            options=[
                ("grpc.max_receive_message_length", 16 << 20),
                ("grpc.use_local_subchannel_pool", 1),  # never share podcache's subchannel
                ("grpc.initial_reconnect_backoff_ms", 50),
                ("grpc.min_reconnect_backoff_ms", 50),
                ("grpc.max_reconnect_backoff_ms", 500),
            ],
        )
        # The generated stubs are untyped: results are typed where they are read below.
        self.runtime: Any = services.stub(self._channel)
        self.images: Any = services.stub(self._channel, "ImageService")
        # CreateContainer with fields beyond the subset: the request is serialized here.
        self._create_raw: Any = self._channel.unary_unary(
            criwire.CREATE_CONTAINER,
            request_serializer=None,
            response_deserializer=api_pb2.CreateContainerResponse.FromString,
        )
        self.sandboxes: dict[str, SandboxRecord] = {}
        self.containers: dict[str, ContainerRecord] = {}

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> CRIHarness:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- queries ----------------------------------------------------------------------------
    def version(self) -> api_pb2.VersionResponse:
        response: api_pb2.VersionResponse = self.runtime.Version(
            api_pb2.VersionRequest(version="0.1.0"), timeout=self.timeout, wait_for_ready=True
        )
        return response

    def image_id(self, image: str = BUSYBOX_IMAGE) -> str:
        """The runtime's ID of a local image (ImageStatus; an empty answer is an error)."""
        response = self.images.ImageStatus(
            api_pb2.ImageStatusRequest(image=api_pb2.ImageSpec(image=image)),
            timeout=self.timeout,
            wait_for_ready=True,
        )
        if not response.image.id:
            raise LookupError(f"image {image} is not in the runtime (run scripts/containerd-up)")
        return str(response.image.id)

    def list_sandboxes(self) -> list[api_pb2.PodSandbox]:
        return list(
            self.runtime.ListPodSandbox(
                api_pb2.ListPodSandboxRequest(), timeout=self.timeout, wait_for_ready=True
            ).items
        )

    def list_containers(self) -> list[api_pb2.Container]:
        return list(
            self.runtime.ListContainers(
                api_pb2.ListContainersRequest(), timeout=self.timeout, wait_for_ready=True
            ).containers
        )

    def container_status(self, container_id: str) -> api_pb2.ContainerStatus:
        status: api_pb2.ContainerStatus = self.runtime.ContainerStatus(
            api_pb2.ContainerStatusRequest(container_id=container_id),
            timeout=self.timeout,
            wait_for_ready=True,
        ).status
        return status

    def live_sandboxes(self) -> list[SandboxRecord]:
        return [s for s in self.sandboxes.values() if not s.removed]

    def live_containers(self) -> list[ContainerRecord]:
        return [c for c in self.containers.values() if not c.removed]

    # -- sandboxes --------------------------------------------------------------------------
    def run_pod(
        self,
        name: str,
        namespace: str = "default",
        *,
        uid: str | None = None,
        attempt: int = 0,
        labels: Mapping[str, str] | None = None,
        pod_network: bool = False,
    ) -> SandboxRecord:
        """RunPodSandbox as the kubelet shapes it (host network, no hostname, own cgroup; with
        ``pod_network``, the pod's own network namespace, set up by CNI, and a hostname)."""
        uid = uid or str(uuid.uuid4())
        pod_labels = dict(labels or {})
        pod_labels.update(
            {LABEL_POD_NAME: name, LABEL_POD_NAMESPACE: namespace, LABEL_POD_UID: uid}
        )
        namespaces = api_pb2.NamespaceOption(
            network=api_pb2.POD if pod_network else api_pb2.NODE,
            pid=api_pb2.CONTAINER,
            ipc=api_pb2.POD,
        )
        config = api_pb2.PodSandboxConfig(
            metadata=api_pb2.PodSandboxMetadata(
                name=name, uid=uid, namespace=namespace, attempt=attempt
            ),
            hostname=name if pod_network else "",
            labels=pod_labels,
            annotations={
                "kubernetes.io/config.source": "api",
                "kubernetes.io/config.seen": "2024-01-01T00:00:00Z",
            },
            linux=api_pb2.LinuxPodSandboxConfig(
                cgroup_parent=f"/{self.cgroup_parent}/pod{uid}",
                security_context=api_pb2.LinuxSandboxSecurityContext(namespace_options=namespaces),
            ),
        )
        sandbox_id = self.runtime.RunPodSandbox(
            api_pb2.RunPodSandboxRequest(config=config), timeout=self.timeout, wait_for_ready=True
        ).pod_sandbox_id
        status = self.runtime.PodSandboxStatus(
            api_pb2.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id),
            timeout=self.timeout,
            wait_for_ready=True,
        ).status
        record = SandboxRecord(
            id=sandbox_id,
            name=name,
            namespace=namespace,
            uid=uid,
            attempt=attempt,
            labels=pod_labels,
            created_at=status.created_at,
            config=config,
        )
        self.sandboxes[sandbox_id] = record
        return record

    def stop_pod(self, sandbox: SandboxRecord) -> None:
        """StopPodSandbox: the sandbox turns NOTREADY and every container in it EXITED.

        Returns once the runtime reports the sandbox NOTREADY: containerd 2.x's StopPodSandbox
        returns before it does (its exit monitor sets the state, then sends the STOPPED
        event), so a listing made as the call returns may still show it READY."""
        self.runtime.StopPodSandbox(
            api_pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox.id),
            timeout=self.timeout,
            wait_for_ready=True,
        )
        self.wait_sandbox_state(sandbox.id, SANDBOX_NOTREADY)
        sandbox.state = SANDBOX_NOTREADY
        for c in self.containers.values():
            if c.sandbox_id == sandbox.id and c.state == CONTAINER_RUNNING:
                c.state = CONTAINER_EXITED

    def remove_pod(self, sandbox: SandboxRecord) -> None:
        """Stop (if needed) and remove the sandbox; its containers go with it."""
        if sandbox.state == SANDBOX_READY:
            self.stop_pod(sandbox)
        self.runtime.RemovePodSandbox(
            api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sandbox.id),
            timeout=self.timeout,
            wait_for_ready=True,
        )
        sandbox.removed = True
        for c in self.containers.values():
            if c.sandbox_id == sandbox.id:
                c.removed = True

    # -- containers -------------------------------------------------------------------------
    def create_container(
        self,
        sandbox: SandboxRecord,
        name: str,
        *,
        command: Sequence[str] = RUNNING_COMMAND,
        args: Sequence[str] = (),
        attempt: int = 0,
        image: str = BUSYBOX_IMAGE,
        hash_hex: str | None = None,
        start: bool = True,
        extras: criwire.ContainerExtras | None = None,
        readonly_rootfs: bool = False,
        no_new_privs: bool = False,
        envs: Mapping[str, str] | None = None,
    ) -> ContainerRecord:
        """CreateContainer (and StartContainer unless ``start=False``) as the kubelet does.

        ``extras``: the mounts, users, capabilities and resources the proto subset has no
        fields for, merged into the request's config (see ``criwire``)."""
        hash_hex = hash_hex or container_hash(sandbox.uid, name, attempt)
        config = api_pb2.ContainerConfig(
            metadata=api_pb2.ContainerMetadata(name=name, attempt=attempt),
            image=api_pb2.ImageSpec(image=image),
            command=list(command),
            args=list(args),
            envs=[api_pb2.KeyValue(key=k, value=v.encode()) for k, v in (envs or {}).items()],
            labels={
                LABEL_POD_NAME: sandbox.name,
                LABEL_POD_NAMESPACE: sandbox.namespace,
                LABEL_POD_UID: sandbox.uid,
                LABEL_CONTAINER_NAME: name,
            },
            annotations={
                ANNOTATION_HASH: hash_hex,
                ANNOTATION_RESTART_COUNT: str(attempt),
                "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
                "io.kubernetes.container.terminationMessagePolicy": "File",
                "io.kubernetes.pod.terminationGracePeriod": "30",
            },
            linux=api_pb2.LinuxContainerConfig(
                security_context=api_pb2.LinuxContainerSecurityContext(
                    namespace_options=sandbox.config.linux.security_context.namespace_options,
                    readonly_rootfs=readonly_rootfs,
                    no_new_privs=no_new_privs,
                )
            ),
        )
        request = api_pb2.CreateContainerRequest(
            pod_sandbox_id=sandbox.id, config=config, sandbox_config=sandbox.config
        )
        if extras is None:
            container_id = self.runtime.CreateContainer(
                request, timeout=self.timeout, wait_for_ready=True
            ).container_id
        else:
            container_id = self._create_raw(
                criwire.create_request(request.SerializeToString(), extras),
                timeout=self.timeout,
                wait_for_ready=True,
            ).container_id
        record = ContainerRecord(
            id=container_id,
            name=name,
            attempt=attempt,
            sandbox_id=sandbox.id,
            pod_uid=sandbox.uid,
            pod_name=sandbox.name,
            pod_namespace=sandbox.namespace,
            image=image,
            hash_hex=hash_hex,
            command=tuple(command),
            args=tuple(args),
            created_at=self.container_status(container_id).created_at,
        )
        self.containers[container_id] = record
        if start:
            self.start_container(record)
        return record

    def start_container(self, container: ContainerRecord) -> None:
        self.runtime.StartContainer(
            api_pb2.StartContainerRequest(container_id=container.id),
            timeout=self.timeout,
            wait_for_ready=True,
        )
        container.state = CONTAINER_RUNNING

    def wait_sandbox_state(self, sandbox_id: str, state: int, timeout: float = 10.0) -> None:
        """Wait until the runtime reports the sandbox in ``state`` (PodSandboxStatus)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.runtime.PodSandboxStatus(
                api_pb2.PodSandboxStatusRequest(pod_sandbox_id=sandbox_id),
                timeout=self.timeout,
                wait_for_ready=True,
            ).status
            if status.state == state:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"sandbox {sandbox_id} still in state "
                    f"{api_pb2.PodSandboxState.Name(status.state)} after {timeout} s"
                )
            time.sleep(0.005)

    def wait_exited(self, container: ContainerRecord, timeout: float = 10.0) -> int:
        """Wait until the runtime reports the container EXITED; return its exit code."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.container_status(container.id)
            if status.state == CONTAINER_EXITED:
                container.state = CONTAINER_EXITED
                return int(status.exit_code)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"container {container.name} ({container.id}) still in state "
                    f"{api_pb2.ContainerState.Name(status.state)} after {timeout} s"
                )
            time.sleep(0.02)

    def exec_sync(
        self, container: ContainerRecord, command: Sequence[str], timeout: int = 10
    ) -> criwire.ExecResult:
        """ExecSync in the container, as the kubelet runs an exec probe (``timeout`` seconds)."""
        return criwire.exec_sync(
            self._channel, container.id, list(command), timeout, self.timeout + timeout
        )

    def stop_container(self, container: ContainerRecord, timeout: int = 0) -> None:
        self.runtime.StopContainer(
            api_pb2.StopContainerRequest(container_id=container.id, timeout=timeout),
            timeout=self.timeout + timeout,
            wait_for_ready=True,
        )
        if container.state == CONTAINER_RUNNING:
            container.state = CONTAINER_EXITED

    def remove_container(self, container: ContainerRecord) -> None:
        """Stop (if running) and remove the container."""
        if container.state == CONTAINER_RUNNING:
            self.stop_container(container)
        self.runtime.RemoveContainer(
            api_pb2.RemoveContainerRequest(container_id=container.id),
            timeout=self.timeout,
            wait_for_ready=True,
        )
        container.removed = True

    # -- cleanup ----------------------------------------------------------------------------
    def remove_all(self, sandbox_ids: Iterable[str] | None = None) -> None:
        """Stop and remove sandboxes (all in the runtime, by default), recorded or not."""
        ids = (
            list(sandbox_ids) if sandbox_ids is not None else [s.id for s in self.list_sandboxes()]
        )
        for sandbox_id in ids:
            self.runtime.StopPodSandbox(
                api_pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox_id),
                timeout=self.timeout,
                wait_for_ready=True,
            )
            self.runtime.RemovePodSandbox(
                api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sandbox_id),
                timeout=self.timeout,
                wait_for_ready=True,
            )
            record = self.sandboxes.get(sandbox_id)
            if record is not None:
                record.state = SANDBOX_NOTREADY
                record.removed = True
        for c in self.containers.values():
            if c.sandbox_id in ids:
                c.removed = True
        if sandbox_ids is None:
            # Containers whose sandbox is gone already (there should be none) go as well.
            for listed in self.list_containers():
                self.runtime.RemoveContainer(
                    api_pb2.RemoveContainerRequest(container_id=listed.id),
                    timeout=self.timeout,
                    wait_for_ready=True,
                )
