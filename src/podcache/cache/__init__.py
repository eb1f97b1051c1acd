"""The runtime cache: a shared I/O-free freshness core and its thread and asyncio drivers.

The names below are imported on first use (PEP 562), so that ``from podcache.cache.threaded
import RuntimeCache`` (the CLI's) does not import the asyncio driver and asyncio with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podcache.cache.aio import AsyncPodGetter, AsyncRuntimeCache
    from podcache.cache.changes import ChangeType, PodChange
    from podcache.cache.core import CacheStats
    from podcache.cache.departed import Found
    from podcache.cache.publishing import Publication
    from podcache.cache.threaded import PodGetter, RuntimeCache
    from podcache.cache.watching import AsyncPodWatch, PodWatch

__all__ = [
    "AsyncPodGetter",
    "AsyncPodWatch",
    "AsyncRuntimeCache",
    "CacheStats",
    "ChangeType",
    "Found",
    "PodChange",
    "PodGetter",
    "PodWatch",
    "Publication",
    "RuntimeCache",
]

_HOMES = {
    "AsyncPodGetter": "podcache.cache.aio",
    "AsyncRuntimeCache": "podcache.cache.aio",
    "ChangeType": "podcache.cache.changes",
    "PodChange": "podcache.cache.changes",
    "CacheStats": "podcache.cache.core",
    "Found": "podcache.cache.departed",
    "Publication": "podcache.cache.publishing",
    "PodGetter": "podcache.cache.threaded",
    "RuntimeCache": "podcache.cache.threaded",
    "AsyncPodWatch": "podcache.cache.watching",
    "PodWatch": "podcache.cache.watching",
}
"""Where each public name lives: imported from there on first use."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'podcache.cache' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next read is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
