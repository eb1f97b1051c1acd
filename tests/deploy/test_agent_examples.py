"""deploy/README.md's agent examples: every YAML block parses, and those that
configure an agent for the CRI socket say what the agents' own code needs.

What each agent needs was read in its code (deploy/README.md names the files): the Falco
container plugin turns every engine on by default and its ``containerd`` engine speaks
containerd's own API, so only ``cri`` may name podcache's socket and the others are turned off;
Falco's chart mounts every socket an enabled engine lists; the Datadog agent switches to
containerd's API when ``cri_socket_path`` contains "containerd" (and to CRI-O's support on
"crio").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_readme import blocks

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_README = ROOT / "deploy" / "README.md"
YAML_BLOCKS = blocks(DEPLOY_README.read_text(encoding="utf-8"), "yaml")
SOCKET_DIR = "/run/podcache-cri"
OTHER_SOCKET_ENGINES = ("containerd", "docker", "podman")  # each holds a socket of its own


def cri_socket() -> str:
    """The base's --cri-listen, read from the DaemonSet as written."""
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "base" / "daemonset.yaml").read_text()))
    (daemonset,) = [d for d in docs if d and d["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    args: list[str] = container["args"]
    socket: str = args[args.index("--cri-listen") + 1]
    return socket


def documents() -> list[tuple[int, Any]]:
    return [(line, yaml.safe_load(code)) for line, code in YAML_BLOCKS]


def the_block(where: str, has: str) -> Any:
    """The one YAML block whose top level holds the key ``has``."""
    found = [doc for _, doc in documents() if isinstance(doc, dict) and has in doc]
    assert len(found) == 1, f"{where}: {len(found)} YAML blocks with {has!r}"
    return found[0]


@pytest.mark.parametrize("code", [c for _, c in YAML_BLOCKS], ids=[f"L{n}" for n, _ in YAML_BLOCKS])
def test_every_yaml_block_of_the_deploy_readme_parses(code: str) -> None:
    assert yaml.safe_load(code) is not None


def test_the_examples_name_the_socket_the_daemonset_serves() -> None:
    assert cri_socket() == f"{SOCKET_DIR}/cri.sock"


def assert_only_the_cri_engine_on_the_socket(engines: dict[str, Any]) -> None:
    assert engines["cri"] == {"enabled": True, "sockets": [cri_socket()]}
    for name in OTHER_SOCKET_ENGINES:
        assert engines[name]["enabled"] is False, name  # on by default, with default sockets
    for name, engine in engines.items():
        if name != "cri":
            assert cri_socket() not in engine.get("sockets", []), name


def test_falcos_container_plugin_uses_only_its_cri_engine_on_the_socket() -> None:
    config = the_block("falco.yaml, 0.41+", "plugins")
    (plugin,) = config["plugins"]
    assert (plugin["name"], plugin["library_path"]) == ("container", "libcontainer.so")
    assert config["load_plugins"] == ["container"]
    assert_only_the_cri_engine_on_the_socket(plugin["init_config"]["engines"])


def test_falcos_chart_values_enable_only_the_cri_engine_so_no_runtime_socket_is_mounted() -> None:
    values = the_block("the falco chart's values", "collectors")
    container_engine = values["collectors"]["containerEngine"]
    assert container_engine["enabled"] is True
    engines = container_engine["engines"]
    assert_only_the_cri_engine_on_the_socket(engines)
    # The chart mounts every socket of every enabled engine: only podcache's is left.
    mounted = [s for e in engines.values() if e.get("enabled") for s in e.get("sockets", [])]
    assert mounted == [cri_socket()]


def test_falco_039_and_040_name_the_socket_in_container_engines() -> None:
    engines = the_block("falco.yaml, 0.39-0.40", "container_engines")["container_engines"]
    assert engines["cri"] == {"enabled": True, "sockets": [cri_socket()]}
    assert "containerd" not in engines  # that engine is the container plugin's (0.41+)
    for name in ("docker", "podman"):
        assert engines[name]["enabled"] is False, name


def test_datadogs_cri_socket_path_turns_on_only_its_cri_check() -> None:
    container = the_block("the Datadog agent's container", "env")
    (setting,) = [e for e in container["env"] if e["name"] == "DD_CRI_SOCKET_PATH"]
    path = setting["value"]
    # The agent's detectCriRuntimes: "containerd" in the path means containerd's own API,
    # "crio" CRI-O's support; neither leaves the cri check alone.
    assert "containerd" not in path and "crio" not in path, path
    (mount,) = container["volumeMounts"]
    assert mount["readOnly"] is True
    assert path == f"{mount['mountPath']}/{Path(cri_socket()).name}"


def test_the_agents_volume_is_directory_or_create_as_podcaches() -> None:
    """With `Directory`, an agent pod started first on a new node waits."""
    volumes = [v for _, doc in documents() if isinstance(doc, dict) for v in doc.get("volumes", [])]
    host_paths = {v["hostPath"]["path"]: v["hostPath"]["type"] for v in volumes if "hostPath" in v}
    assert host_paths == {SOCKET_DIR: "DirectoryOrCreate", "/run/podcache": "DirectoryOrCreate"}


def test_crictls_configuration_points_at_the_socket() -> None:
    config = the_block("crictl.yaml", "runtime-endpoint")
    assert config["runtime-endpoint"] == config["image-endpoint"] == f"unix://{cri_socket()}"
