"""The runtime cache: a shared I/O-free freshness core and its thread and asyncio drivers."""

from podcache.cache.aio import AsyncPodGetter, AsyncRuntimeCache
from podcache.cache.core import CacheStats
from podcache.cache.threaded import PodGetter, RuntimeCache

__all__ = ["AsyncPodGetter", "AsyncRuntimeCache", "CacheStats", "PodGetter", "RuntimeCache"]
