"""Endpoint parsing and crictl's resolution order: argument, environment, config file, defaults."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from podcache.cri.endpoint import (
    DEFAULT_ENDPOINTS,
    Endpoint,
    load_crictl_config,
    parse_endpoint,
    resolve_endpoint,
)
from podcache.errors import EndpointNotFoundError, PodcacheError

# -- parsing ----------------------------------------------------------------------------------

VALID = [
    (
        "unix:///run/containerd/containerd.sock",
        Endpoint(
            url="unix:///run/containerd/containerd.sock",
            target="unix:///run/containerd/containerd.sock",
            path="/run/containerd/containerd.sock",
        ),
    ),
    (
        "/run/crio/crio.sock",
        Endpoint(
            url="unix:///run/crio/crio.sock",
            target="unix:///run/crio/crio.sock",
            path="/run/crio/crio.sock",
        ),
    ),
    (
        "tcp://127.0.0.1:7070",
        Endpoint(url="tcp://127.0.0.1:7070", target="127.0.0.1:7070", address=("127.0.0.1", 7070)),
    ),
    (
        "tcp://127.3.2.1:1",
        Endpoint(url="tcp://127.3.2.1:1", target="127.3.2.1:1", address=("127.3.2.1", 1)),
    ),
    (
        "tcp://localhost:65535",
        Endpoint(
            url="tcp://localhost:65535", target="localhost:65535", address=("localhost", 65535)
        ),
    ),
    (
        "localhost:7070",
        Endpoint(url="tcp://localhost:7070", target="localhost:7070", address=("localhost", 7070)),
    ),
    (
        "127.0.0.1:7070",
        Endpoint(url="tcp://127.0.0.1:7070", target="127.0.0.1:7070", address=("127.0.0.1", 7070)),
    ),
    (
        "tcp://[::1]:7070",
        Endpoint(url="tcp://[::1]:7070", target="ipv6:[::1]:7070", address=("::1", 7070)),
    ),
]


@pytest.mark.parametrize(("text", "expected"), VALID, ids=[v[0] for v in VALID])
def test_parse_valid(text: str, expected: Endpoint) -> None:
    assert parse_endpoint(text) == expected
    assert str(parse_endpoint(text)) == expected.url


INVALID = [
    ("", "empty"),
    ("unix://", "empty socket path"),
    ("unix://run/containerd.sock", "relative"),
    ("run/containerd.sock", "relative"),
    ("containerd.sock", "relative"),
    ("./containerd.sock", "relative"),
    ("npipe:////./pipe/containerd", "scheme 'npipe'"),
    ("http://127.0.0.1:80", "scheme 'http'"),
    ("tcp://10.0.0.1:7070", "loopback only"),
    ("tcp://example.com:7070", "loopback only"),
    ("node1:7070", "loopback only"),
    ("tcp://127.0.0.1", "expected tcp://HOST:PORT"),
    ("tcp://127.0.0.1:0", "out of range"),
    ("tcp://127.0.0.1:65536", "out of range"),
    ("tcp://[127.0.0.1]:80", "IPv6 only"),
    ("unix:///tmp/" + "x" * 120 + ".sock", "longer than 107 bytes"),
    ("/tmp/a\0b.sock", "NUL"),
]


@pytest.mark.parametrize(("text", "why"), INVALID, ids=[repr(v[0])[:40] for v in INVALID])
def test_parse_invalid_names_the_value(text: str, why: str) -> None:
    with pytest.raises(ValueError, match="runtime endpoint") as info:
        parse_endpoint(text)
    assert repr(text) in str(info.value)
    assert why in str(info.value)


# -- crictl config ----------------------------------------------------------------------------


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_config_reads_endpoint_and_timeout(tmp_path: Path) -> None:
    path = write(
        tmp_path / "crictl.yaml",
        "runtime-endpoint: unix:///run/x.sock\nimage-endpoint: unix:///y\ntimeout: 10\n"
        "debug: false\n",
    )
    config = load_crictl_config(path)
    assert (config.runtime_endpoint, config.timeout, config.path) == (
        "unix:///run/x.sock",
        10.0,
        path,
    )


@pytest.mark.parametrize(
    ("text", "endpoint", "timeout"),
    [
        ("", None, None),
        ("debug: true\n", None, None),
        ('runtime-endpoint: ""\n', None, None),
        ("timeout: 2.5\n", None, 2.5),
        ('timeout: "3"\n', None, 3.0),
    ],
)
def test_config_optional_keys(
    tmp_path: Path, text: str, endpoint: str | None, timeout: float | None
) -> None:
    config = load_crictl_config(write(tmp_path / "c.yaml", text))
    assert (config.runtime_endpoint, config.timeout) == (endpoint, timeout)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("runtime-endpoint: [1, 2\n", "not valid YAML"),
        ("- a\n- b\n", "expected a mapping"),
        ("runtime-endpoint: 5\n", "must be a string"),
        ("timeout: soon\n", "number of seconds"),
        ("timeout: true\n", "number of seconds"),
        ("timeout: -1\n", "must not be negative"),
    ],
)
def test_bad_config_is_a_value_error_naming_the_file(tmp_path: Path, text: str, why: str) -> None:
    path = write(tmp_path / "bad.yaml", text)
    with pytest.raises(ValueError, match=why) as info:
        load_crictl_config(path)
    assert path in str(info.value)


# -- resolution order -------------------------------------------------------------------------


def no_sockets(path: str) -> bool:
    return False


def test_explicit_endpoint_wins(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "runtime-endpoint: unix:///from/config.sock\n")
    resolved = resolve_endpoint(
        "/from/argument.sock",
        env={"CONTAINER_RUNTIME_ENDPOINT": "unix:///from/env.sock"},
        config_path=config,
        exists=no_sockets,
    )
    assert (resolved.endpoint.url, resolved.source) == ("unix:///from/argument.sock", "argument")


def test_environment_before_config(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "runtime-endpoint: unix:///from/config.sock\n")
    resolved = resolve_endpoint(
        env={"CONTAINER_RUNTIME_ENDPOINT": "unix:///from/env.sock"},
        config_path=config,
        exists=no_sockets,
    )
    assert (resolved.endpoint.url, resolved.source) == (
        "unix:///from/env.sock",
        "CONTAINER_RUNTIME_ENDPOINT",
    )


def test_config_path_argument_before_environment_config(tmp_path: Path) -> None:
    mine = write(tmp_path / "mine.yaml", "runtime-endpoint: unix:///mine.sock\n")
    theirs = write(tmp_path / "theirs.yaml", "runtime-endpoint: unix:///theirs.sock\n")
    resolved = resolve_endpoint(env={"CRI_CONFIG_FILE": theirs}, config_path=mine)
    assert resolved.endpoint.url == "unix:///mine.sock"
    assert resolved.source == f"runtime-endpoint in {mine}"


def test_config_from_cri_config_file_variable(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "runtime-endpoint: /run/k3s/containerd.sock\n")
    resolved = resolve_endpoint(env={"CRI_CONFIG_FILE": config}, exists=no_sockets)
    assert resolved.endpoint.url == "unix:///run/k3s/containerd.sock"


def test_empty_environment_variable_counts_as_unset(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "runtime-endpoint: unix:///c.sock\n")
    resolved = resolve_endpoint(env={"CONTAINER_RUNTIME_ENDPOINT": ""}, config_path=config)
    assert resolved.endpoint.url == "unix:///c.sock"


def test_first_existing_default_socket(tmp_path: Path) -> None:
    existing = {"/run/crio/crio.sock", "/var/run/cri-dockerd.sock"}
    resolved = resolve_endpoint(
        env={"CRI_CONFIG_FILE": str(tmp_path / "absent.yaml")}, exists=existing.__contains__
    )
    assert (resolved.endpoint.url, resolved.source) == ("unix:///run/crio/crio.sock", "default")


def test_defaults_are_crictls() -> None:
    assert DEFAULT_ENDPOINTS == (
        "unix:///run/containerd/containerd.sock",
        "unix:///run/crio/crio.sock",
        "unix:///var/run/cri-dockerd.sock",
    )


def test_config_without_endpoint_falls_through_to_defaults(tmp_path: Path) -> None:
    config = write(tmp_path / "c.yaml", "timeout: 5\n")
    resolved = resolve_endpoint(
        env={}, config_path=config, exists={"/run/containerd/containerd.sock"}.__contains__
    )
    assert resolved.endpoint.url == "unix:///run/containerd/containerd.sock"


def test_nothing_found_lists_what_was_tried_and_how_to_configure(tmp_path: Path) -> None:
    absent = str(tmp_path / "absent.yaml")
    with pytest.raises(EndpointNotFoundError) as info:
        resolve_endpoint(env={"CRI_CONFIG_FILE": absent}, exists=no_sockets)
    message = str(info.value)
    for expected in (
        *DEFAULT_ENDPOINTS,
        absent,
        "CONTAINER_RUNTIME_ENDPOINT",
        "-r/--runtime-endpoint",
        "runtime-endpoint",
    ):
        assert expected in message
    assert info.value.endpoint is None
    assert len(info.value.tried) == 2 + len(DEFAULT_ENDPOINTS)
    assert isinstance(info.value, PodcacheError)


def test_explicit_config_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        resolve_endpoint(env={}, config_path=str(tmp_path / "absent.yaml"), exists=no_sockets)


@pytest.mark.parametrize(
    ("env", "config", "names"),
    [
        ({"CONTAINER_RUNTIME_ENDPOINT": "tcp://10.1.2.3:1"}, None, "CONTAINER_RUNTIME_ENDPOINT"),
        ({}, "runtime-endpoint: relative.sock\n", "crictl config"),
    ],
)
def test_malformed_endpoint_from_a_source_names_the_source(
    tmp_path: Path, env: dict[str, str], config: str | None, names: str
) -> None:
    path = write(tmp_path / "c.yaml", config or "")
    with pytest.raises(ValueError, match=names):
        resolve_endpoint(env=env, config_path=path, exists=no_sockets)


def test_explicit_empty_endpoint_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="empty"):
        resolve_endpoint("", env={}, exists=no_sockets)


def test_endpoint_not_found_survives_pickling() -> None:
    error = EndpointNotFoundError(
        ["CONTAINER_RUNTIME_ENDPOINT (unset)", "/x.sock (no such socket)"]
    )
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.tried, str(copy)) == (type(error), error.tried, str(error))
