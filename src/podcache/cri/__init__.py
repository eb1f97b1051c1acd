"""podcache's CRI runtime getters (gRPC); the generated protobuf stubs live in ``proto``.

The names below are imported on first use (PEP 562): importing one module of ``podcache.cri``
(``convert``, ``endpoint``, ``oneshot``) does not import grpcio, protobuf or asyncio, which the
getters ``CRIRuntime`` and ``AsyncCRIRuntime`` need; a one-shot CLI listing never loads them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podcache.cri.client import (
        AsyncCRIRuntime,
        CRIRuntime,
        RuntimeCondition,
        RuntimeStatus,
        RuntimeVersion,
    )
    from podcache.cri.convert import WIRE_READER as DECODER
    from podcache.cri.convert import Memo, build_pods, pods_from_responses
    from podcache.cri.endpoint import (
        DEFAULT_ENDPOINTS,
        CrictlConfig,
        Endpoint,
        ResolvedEndpoint,
        load_crictl_config,
        parse_endpoint,
        resolve_endpoint,
    )
    from podcache.cri.eventstream import AsyncContainerEventStream, ContainerEventStream
    from podcache.cri.eventwire import EVENT_READER as EVENT_DECODER

__all__ = [
    "DECODER",
    "DEFAULT_ENDPOINTS",
    "EVENT_DECODER",
    "AsyncCRIRuntime",
    "AsyncContainerEventStream",
    "CRIRuntime",
    "ContainerEventStream",
    "CrictlConfig",
    "Endpoint",
    "Memo",
    "ResolvedEndpoint",
    "RuntimeCondition",
    "RuntimeStatus",
    "RuntimeVersion",
    "build_pods",
    "load_crictl_config",
    "parse_endpoint",
    "pods_from_responses",
    "resolve_endpoint",
]

_HOMES: dict[str, tuple[str, str]] = {
    **{
        name: ("podcache.cri.client", name)
        for name in (
            "AsyncCRIRuntime",
            "CRIRuntime",
            "RuntimeCondition",
            "RuntimeStatus",
            "RuntimeVersion",
        )
    },
    "DECODER": ("podcache.cri.convert", "WIRE_READER"),
    **{
        name: ("podcache.cri.convert", name)
        for name in ("Memo", "build_pods", "pods_from_responses")
    },
    **{
        name: ("podcache.cri.endpoint", name)
        for name in (
            "DEFAULT_ENDPOINTS",
            "CrictlConfig",
            "Endpoint",
            "ResolvedEndpoint",
            "load_crictl_config",
            "parse_endpoint",
            "resolve_endpoint",
        )
    },
    "AsyncContainerEventStream": ("podcache.cri.eventstream", "AsyncContainerEventStream"),
    "ContainerEventStream": ("podcache.cri.eventstream", "ContainerEventStream"),
    "EVENT_DECODER": ("podcache.cri.eventwire", "EVENT_READER"),
}
"""Where each public name lives (module, attribute): imported from there on first use."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'podcache.cri' has no attribute {name!r}")
    module, attribute = home
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # the next read is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
