"""podcache's CRI runtime getters (gRPC); the generated protobuf stubs live in ``proto``."""

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
