"""The runtime cache: a shared I/O-free freshness core and its thread and asyncio drivers."""

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
