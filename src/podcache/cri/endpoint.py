"""Where the CRI runtime listens: endpoint parsing and crictl-style resolution; never connects.

Accepted endpoints: ``unix:///abs/path.sock`` or a bare absolute socket path (the runtime's
usual home), and loopback TCP (``tcp://127.0.0.1:PORT``, ``tcp://localhost:PORT``,
``tcp://[::1]:PORT`` or the same without ``tcp://``) for simulators and tests. Anything else
(another scheme, a relative path, an empty string, a non-loopback host) is a ValueError that
names the value: podcache only ever talks to the runtime of the node it runs on.

Resolution order: crictl's (docs/architecture.md §4, "Endpoint"). Everything is a parameter
(environment, config path, default list, existence check) so it can be tested.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from podcache.errors import EndpointNotFoundError

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_ENDPOINTS",
    "ENDPOINT_ENV",
    "MAX_SOCKET_PATH_BYTES",
    "CrictlConfig",
    "Endpoint",
    "ResolvedEndpoint",
    "RuntimeAddress",
    "check_timeout",
    "load_crictl_config",
    "parse_endpoint",
    "resolve_endpoint",
]

ENDPOINT_ENV = "CONTAINER_RUNTIME_ENDPOINT"
CONFIG_ENV = "CRI_CONFIG_FILE"
DEFAULT_CONFIG_PATH = "/etc/crictl.yaml"
DEFAULT_ENDPOINTS = (
    "unix:///run/containerd/containerd.sock",
    "unix:///run/crio/crio.sock",
    "unix:///var/run/cri-dockerd.sock",
)
MAX_SOCKET_PATH_BYTES = 107
"""Longest unix socket path the kernel accepts (``sun_path`` is 108 bytes with its NUL)."""

_HOST_PORT = re.compile(r"^(?:\[(?P<ip6>[^\]]*)\]|(?P<host>[^:/\[\]]+)):(?P<port>[0-9]+)$")


class Endpoint(NamedTuple):
    """A parsed runtime endpoint: its canonical URL, the gRPC target, and how to reach it.

    Exactly one of ``path`` (a unix socket) and ``address`` (loopback host and port) is set.
    This module's records are NamedTuples: msgspec imported here would come before a one-shot
    read's first send (docs/architecture.md §6 rule 1).
    """

    url: str
    target: str
    path: str | None = None
    address: tuple[str, int] | None = None

    def __str__(self) -> str:
        return self.url


class CrictlConfig(NamedTuple):
    """The keys podcache reads from a crictl config file (None when a key is absent)."""

    path: str
    runtime_endpoint: str | None = None
    timeout: float | None = None


class ResolvedEndpoint(NamedTuple):
    """An endpoint and where it came from (``source``: for messages and ``--debug`` output)."""

    endpoint: Endpoint
    source: str


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _unix(value: str, path: str) -> Endpoint:
    if not path:
        raise ValueError(f"malformed runtime endpoint {value!r}: empty socket path")
    if not path.startswith("/"):
        raise ValueError(
            f"malformed runtime endpoint {value!r}: socket path {path!r} is relative; "
            "give an absolute path (unix:///run/containerd/containerd.sock)"
        )
    if "\0" in path:
        raise ValueError(f"malformed runtime endpoint {value!r}: NUL byte in socket path")
    if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
        raise ValueError(
            f"malformed runtime endpoint {value!r}: socket path is longer than "
            f"{MAX_SOCKET_PATH_BYTES} bytes, the kernel's limit"
        )
    return Endpoint(url=f"unix://{path}", target=f"unix://{path}", path=path)


def _tcp(value: str, host_port: str) -> Endpoint:
    match = _HOST_PORT.match(host_port)
    if match is None:
        raise ValueError(f"malformed runtime endpoint {value!r}: expected tcp://HOST:PORT")
    ip6 = match["ip6"]
    if ip6 is not None and ":" not in ip6:
        raise ValueError(f"malformed runtime endpoint {value!r}: brackets are for IPv6 only")
    host = ip6 if ip6 is not None else match["host"]
    port = int(match["port"])
    if not 0 < port < 65536:
        raise ValueError(f"malformed runtime endpoint {value!r}: port {port} out of range")
    if not _is_loopback(host):
        raise ValueError(
            f"unsupported runtime endpoint {value!r}: TCP is accepted on loopback only "
            "(127.0.0.1, localhost, [::1]); a node's runtime listens on a unix socket"
        )
    shown = f"[{host}]" if ip6 is not None else host
    target = f"ipv6:[{host}]:{port}" if ip6 is not None else f"{host}:{port}"
    return Endpoint(url=f"tcp://{shown}:{port}", target=target, address=(host, port))


def parse_endpoint(value: str) -> Endpoint:
    """Parse ``unix:///path``, an absolute path, or loopback ``[tcp://]HOST:PORT``.

    A malformed or unsupported value is a ValueError that quotes it.
    """
    if not isinstance(value, str):
        raise TypeError(f"runtime endpoint must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError("malformed runtime endpoint '': empty")
    if value.startswith("unix://"):
        return _unix(value, value[len("unix://") :])
    if value.startswith("tcp://"):
        return _tcp(value, value[len("tcp://") :])
    if "://" in value:
        scheme = value.split("://", 1)[0]
        raise ValueError(
            f"unsupported runtime endpoint {value!r}: scheme {scheme!r} "
            "(use unix:///path, an absolute socket path, or loopback tcp://HOST:PORT)"
        )
    if value.startswith("/"):
        return _unix(value, value)
    if _HOST_PORT.match(value):
        return _tcp(value, value)
    raise ValueError(
        f"malformed runtime endpoint {value!r}: not unix:///path, an absolute socket path, "
        "or loopback HOST:PORT (a relative path?)"
    )


def load_crictl_config(path: str) -> CrictlConfig:
    """Read ``runtime-endpoint`` and ``timeout`` from a crictl YAML config file.

    A missing file raises FileNotFoundError; invalid YAML, a top level that is not a mapping,
    or a key of the wrong type is a ValueError naming the file. An empty file is an empty config.
    """
    with open(path, encoding="utf-8") as f:
        text = f.read()
    import yaml  # noqa: PLC0415 -- only when a config file exists: start-up stays fast

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"crictl config {path}: not valid YAML: {e}") from e
    if data is None:
        return CrictlConfig(path=path)
    if not isinstance(data, dict):
        raise ValueError(f"crictl config {path}: expected a mapping of keys, got {data!r}")
    endpoint = data.get("runtime-endpoint")
    if endpoint is not None and not isinstance(endpoint, str):
        raise ValueError(f"crictl config {path}: runtime-endpoint must be a string: {endpoint!r}")
    timeout = data.get("timeout")
    seconds = None if timeout is None else _config_seconds(path, timeout)
    return CrictlConfig(path=path, runtime_endpoint=endpoint or None, timeout=seconds)


def _config_seconds(path: str, timeout: Any) -> float:
    """A config's ``timeout`` as seconds, at least 0 (a ValueError naming the file)."""
    try:
        if isinstance(timeout, bool):
            raise ValueError
        seconds = float(timeout)
    except (TypeError, ValueError):
        raise ValueError(
            f"crictl config {path}: timeout must be a number of seconds: {timeout!r}"
        ) from None
    if not seconds >= 0:  # also rejects NaN
        raise ValueError(f"crictl config {path}: timeout must not be negative: {timeout!r}")
    return seconds


def _config_path(config_path: str | None, env: Mapping[str, str]) -> str:
    return config_path or env.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH


def resolve_endpoint(
    endpoint: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    config_path: str | None = None,
    defaults: Sequence[str] = DEFAULT_ENDPOINTS,
    exists: Callable[[str], bool] = os.path.exists,
) -> ResolvedEndpoint:
    """Find the runtime endpoint the way crictl does (docs/architecture.md §4, "Endpoint").

    ``env`` defaults to ``os.environ``; an empty variable or config value counts as unset.
    An explicit ``config_path`` that does not exist is a FileNotFoundError (the environment's
    or the default one is skipped). A malformed endpoint from any source is a ValueError naming
    the source; no source and no existing default socket is an EndpointNotFoundError listing
    what was tried.
    """
    if env is None:
        env = os.environ
    if endpoint is not None:
        return ResolvedEndpoint(parse_endpoint(endpoint), "argument")

    from_env = env.get(ENDPOINT_ENV)
    if from_env:
        try:
            return ResolvedEndpoint(parse_endpoint(from_env), ENDPOINT_ENV)
        except ValueError as e:
            raise ValueError(f"{ENDPOINT_ENV}: {e}") from None
    tried = [f"{ENDPOINT_ENV} (unset)"]

    path = _config_path(config_path, env)
    found = _from_config(path, explicit=bool(config_path), tried=tried)
    if found is not None:
        return found
    for default in defaults:
        parsed = parse_endpoint(default)
        if parsed.path is not None and exists(parsed.path):
            return ResolvedEndpoint(parsed, "default")
        tried.append(f"{default} (no such socket)")
    raise EndpointNotFoundError(tried)


def _from_config(path: str, *, explicit: bool, tried: list[str]) -> ResolvedEndpoint | None:
    """The ``runtime-endpoint`` of the crictl config at ``path``, or None (noted in ``tried``).

    A missing file is an error only when it was named ``explicit``ly (-c / --config).
    """
    try:
        config = load_crictl_config(path)
    except FileNotFoundError:
        if explicit:
            raise
        tried.append(f"runtime-endpoint in {path} (no such file)")
        return None
    if not config.runtime_endpoint:
        tried.append(f"runtime-endpoint in {path} (not set)")
        return None
    try:
        return ResolvedEndpoint(
            parse_endpoint(config.runtime_endpoint), f"runtime-endpoint in {path}"
        )
    except ValueError as e:
        raise ValueError(f"crictl config {path}: {e}") from None


def check_timeout(timeout: float) -> float:
    """A client's per-call ``timeout`` as float seconds: a positive finite number (TypeError for
    anything that is not a number, a bool included; ValueError for the rest)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


class RuntimeAddress:
    """What every getter of the runtime holds: its endpoint, resolved as crictl does, and the
    seconds allowed for each call."""

    def __init__(self, endpoint: str | None, timeout: float, config_path: str | None) -> None:
        resolved = resolve_endpoint(endpoint, config_path=config_path)
        self._endpoint = resolved.endpoint
        # Where the endpoint came from: "argument", the variable, the config file, "default".
        self.endpoint_source = resolved.source
        self._timeout = check_timeout(timeout)

    @property
    def endpoint(self) -> str:
        """The resolved endpoint URL (``unix:///run/containerd/containerd.sock``)."""
        return self._endpoint.url

    @property
    def timeout(self) -> float:
        """Seconds allowed for each call."""
        return self._timeout
