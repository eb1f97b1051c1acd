"""deploy/base/daemonset.yaml's pod on a real containerd, run through CRI as the kubelet runs it.

The kubelet turns a pod spec into RunPodSandbox, then CreateContainer and StartContainer for
each init container (waiting for it to exit 0) and then for each container. ``run_pod`` does the
same for every field the DaemonSet's pod uses: hostPath volumes (their ``type`` checked, or for
``DirectoryOrCreate`` the directory made root:root 0755 as the kubelet makes it), emptyDir
volumes (group fsGroup, setgid), volumeMounts and their ``readOnly``, command and args, the
pod's and each container's securityContext (user, group, supplemental groups with fsGroup
added, runAsNonRoot refused for uid 0, capabilities, allowPrivilegeEscalation as no_new_privs,
read-only root, seccomp RuntimeDefault) and cpu/memory resources. ``probe`` runs an exec probe
with ExecSync, as the kubelet does.

Where a test machine is not a node, and so the pod differs:
- host paths are mapped into the test's own directories (``HostPaths``): the node's
  /run/containerd is the private containerd's directory, /run/podcache a temporary one;
- the sandbox is on the host network, as every pod of the harness (no CNI here), where the
  DaemonSet's pod has a network namespace of its own; its unix socket is reached through the
  host directory either way;
- the image is the one the test built (the manifest names a release tag).
Fields ``run_pod`` does not know fail it, so the manifest cannot outgrow the test unnoticed.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from tests.containerd import criwire
from tests.containerd.harness import ContainerRecord, CRIHarness, SandboxRecord

Manifest = dict[str, Any]

KNOWN_CONTAINER_KEYS = {
    "name", "image", "imagePullPolicy", "command", "args", "securityContext", "resources",
    "volumeMounts", "livenessProbe", "readinessProbe",
}  # fmt: skip
KNOWN_VOLUME_KEYS = {"name", "hostPath", "emptyDir"}
CPU_PERIOD = 100_000  # the kubelet's CFS period (microseconds)
INIT_TIMEOUT = 60.0


@dataclass(frozen=True)
class HostPaths:
    """Node paths -> this machine's: the longest matching prefix is replaced."""

    mapping: Mapping[str, str]

    def resolve(self, path: str) -> str:
        node = PurePosixPath(path)
        for prefix in sorted(self.mapping, key=len, reverse=True):
            if node == PurePosixPath(prefix) or PurePosixPath(prefix) in node.parents:
                return str(PurePosixPath(self.mapping[prefix]) / node.relative_to(prefix))
        raise LookupError(f"hostPath {path} has no place on this machine ({dict(self.mapping)})")


@dataclass
class RunningPod:
    """The pod as it runs: its sandbox, its containers by name, their specs and volumes."""

    sandbox: SandboxRecord
    containers: dict[str, ContainerRecord] = field(default_factory=dict)
    specs: dict[str, Manifest] = field(default_factory=dict)
    volumes: dict[str, str] = field(default_factory=dict)
    """Volume name -> the host directory or file behind it."""


def quantity(value: str | int) -> float:
    text = str(value)
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1e3, "M": 1e6, "G": 1e9}
    for suffix, scale in units.items():
        if text.endswith(suffix):
            return float(text.removesuffix(suffix)) * scale
    return float(text)


def _volume_path(volume: Manifest, paths: HostPaths, scratch: Path, fs_group: int | None) -> str:
    unknown = set(volume) - KNOWN_VOLUME_KEYS
    if unknown:
        raise ValueError(f"volume {volume['name']}: fields {sorted(unknown)} are not run here")
    if "emptyDir" in volume:
        path = scratch / "empty-dir" / volume["name"]
        path.mkdir(parents=True)
        if fs_group is not None:  # the kubelet's volume ownership: group fsGroup, g+rwx, setgid
            os.chown(path, -1, fs_group)
        path.chmod(0o2777)
        return str(path)
    source = volume["hostPath"]
    host = paths.resolve(source["path"])
    kind = source.get("type", "")
    if kind == "DirectoryOrCreate" and not os.path.exists(host):
        os.makedirs(host, mode=0o755)
    checks = {"Directory": stat.S_ISDIR, "DirectoryOrCreate": stat.S_ISDIR, "Socket": stat.S_ISSOCK}
    if kind in checks and not checks[kind](os.stat(host).st_mode):
        raise ValueError(f"hostPath {source['path']} ({host}) is not of type {kind}")
    return host


def _security(spec: Manifest, pod: Manifest) -> tuple[criwire.Security, bool, bool]:
    """The container's security context as the kubelet sends it: container fields over pod
    fields, fsGroup among the supplemental groups; then readonly_rootfs and no_new_privs."""
    mine, theirs = spec.get("securityContext", {}), pod.get("securityContext", {})

    def pick(key: str) -> Any:
        return mine.get(key, theirs.get(key))

    user = pick("runAsUser")
    if pick("runAsNonRoot") and user in (0, None):
        raise ValueError(f"container {spec['name']}: runAsNonRoot with uid {user}")
    groups = [*theirs.get("supplementalGroups", [])]
    if "fsGroup" in theirs:
        groups.append(theirs["fsGroup"])
    caps = mine.get("capabilities", {})
    seccomp = pick("seccompProfile") or {}
    if seccomp and seccomp != {"type": "RuntimeDefault"}:
        raise ValueError(f"container {spec['name']}: seccomp {seccomp} is not run here")
    security = criwire.Security(
        run_as_user=user,
        run_as_group=pick("runAsGroup"),
        supplemental_groups=tuple(groups),
        add_capabilities=tuple(caps.get("add", [])),
        drop_capabilities=tuple(caps.get("drop", [])),
        seccomp_runtime_default=bool(seccomp),
    )
    if mine.get("privileged"):
        raise ValueError(f"container {spec['name']}: privileged is not run here")
    no_new_privs = mine.get("allowPrivilegeEscalation") is False
    return security, bool(mine.get("readOnlyRootFilesystem")), no_new_privs


def _resources(spec: Manifest) -> criwire.Resources:
    """Limits as CFS quota and memory limit; the cpu request as shares (1 cpu = 1024)."""
    resources = spec.get("resources", {})
    limits, requests = resources.get("limits", {}), resources.get("requests", {})
    cpu_limit = quantity(limits["cpu"]) if "cpu" in limits else 0.0
    return criwire.Resources(
        cpu_period=CPU_PERIOD if cpu_limit else 0,
        cpu_quota=int(cpu_limit * CPU_PERIOD),
        cpu_shares=max(2, int(quantity(requests.get("cpu", 0)) * 1024)),
        memory_limit_in_bytes=int(quantity(limits.get("memory", 0))),
    )


def _create(
    harness: CRIHarness, pod: RunningPod, spec: Manifest, pod_spec: Manifest, image: str
) -> ContainerRecord:
    unknown = set(spec) - KNOWN_CONTAINER_KEYS
    if unknown:
        raise ValueError(f"container {spec['name']}: fields {sorted(unknown)} are not run here")
    mounts = tuple(
        criwire.Mount(m["mountPath"], pod.volumes[m["name"]], bool(m.get("readOnly")))
        for m in spec.get("volumeMounts", [])
    )
    security, readonly_rootfs, no_new_privs = _security(spec, pod_spec)
    record = harness.create_container(
        pod.sandbox,
        spec["name"],
        command=spec.get("command", ()),
        args=spec.get("args", ()),
        image=image,
        extras=criwire.ContainerExtras(mounts, security, _resources(spec)),
        readonly_rootfs=readonly_rootfs,
        no_new_privs=no_new_privs,
    )
    pod.containers[spec["name"]] = record
    pod.specs[spec["name"]] = spec
    return record


def run_pod(
    harness: CRIHarness,
    daemonset: Manifest,
    *,
    image: str,
    paths: HostPaths,
    scratch: Path,
    name: str,
) -> RunningPod:
    """The DaemonSet's pod, named ``name``: sandbox, init containers (each must exit 0), then
    the containers, started. ``scratch`` holds the emptyDir volumes."""
    template = daemonset["spec"]["template"]
    pod_spec = template["spec"]
    sandbox = harness.run_pod(
        name, daemonset["metadata"]["namespace"], labels=template["metadata"]["labels"]
    )
    pod = RunningPod(sandbox)
    fs_group = pod_spec.get("securityContext", {}).get("fsGroup")
    for volume in pod_spec["volumes"]:
        pod.volumes[volume["name"]] = _volume_path(volume, paths, scratch, fs_group)
    for spec in pod_spec.get("initContainers", []):
        record = _create(harness, pod, spec, pod_spec, image)
        code = harness.wait_exited(record, INIT_TIMEOUT)
        if code != 0:
            raise RuntimeError(f"init container {spec['name']} exited {code}")
    for spec in pod_spec["containers"]:
        _create(harness, pod, spec, pod_spec, image)
    return pod


def import_image(archive: Path, socket_path: str, env: Mapping[str, str]) -> None:
    """``ctr images import`` of an image archive into the runtime's CRI namespace (k8s.io);
    ``env`` names the ctr to use (a privately fetched containerd's comes first on PATH)."""
    done = subprocess.run(
        ["ctr", "--address", socket_path, "-n", "k8s.io", "images", "import", str(archive)],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"ctr images import {archive}: {done.stderr.strip()}")


def wait_for_image(harness: CRIHarness, image: str, timeout: float = 60.0) -> None:
    """Wait until CRI's ImageStatus finds ``image``: containerd's CRI plugin learns of an
    imported image from an event, after ``ctr images import`` has returned (2.1 on a loaded
    machine answered "not found" just after an import)."""

    def known() -> bool:
        try:
            harness.image_id(image)
        except LookupError:
            return False
        return True

    wait_until(known, f"CRI ImageStatus of the imported {image}", timeout)


def socket_on_host(pod: RunningPod, container: str = "podcache") -> str:
    """Where the container's ``--listen unix:PATH`` socket is on the host: PATH under the host
    directory of the volume mounted over it."""
    spec = pod.specs[container]
    args = spec["args"]
    listen = args[args.index("--listen") + 1].removeprefix("unix:")
    for mount in spec.get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if listen.startswith(prefix):
            return os.path.join(pod.volumes[mount["name"]], listen.removeprefix(prefix))
    raise LookupError(f"--listen {listen} is on no volume of the pod")


def probe(harness: CRIHarness, pod: RunningPod, container: str, kind: str) -> criwire.ExecResult:
    """Run the container's ``kind`` probe (``livenessProbe``...) once, as the kubelet does."""
    spec = pod.specs[container][kind]
    return harness.exec_sync(
        pod.containers[container], spec["exec"]["command"], int(spec.get("timeoutSeconds", 1))
    )


def wait_until(predicate: Any, what: str, timeout: float, interval: float = 0.02) -> float:
    """Poll ``predicate`` until true; return the monotonic time it first was. The timeout only
    keeps a broken run from hanging: it is never the property tested."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout} s")
        time.sleep(interval)
