"""The publish hook: the one way a snapshot reaches code outside the cache; no I/O, no threads.

The rule a hook keeps, and when the drivers call ``Hooks.run``, is docs/architecture.md §3 rule
10; cited here as the hook rule: 1. once per publish, in publish order, before any waiter is
woken and any watch reads its changes; 2. where it runs (under the thread cache's lock, on the
asyncio cache's loop), so it must not block, wait or call the cache; 3. a hook that raises is
logged, the others run. 4. Hooks are added and removed at any time (``on_publish`` returns the
remover); one added during a publish first hears the next.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from podcache.cache.changes import PodChange
from podcache.model import PodList

__all__ = ["Hooks", "Publication", "PublishHook"]

log = logging.getLogger("podcache.cache")


@dataclass(frozen=True, slots=True)
class Publication:
    """One published snapshot, as the hooks receive it."""

    pods: PodList
    """The snapshot, numbered (``pods.revision``): the very object callers are handed."""
    revision: int
    """``pods.revision``: the revision the changes brought the snapshot to."""
    changes: tuple[PodChange, ...]
    """What this publish changed, in the order a watch receives it (empty: same pods)."""
    timestamp: float
    """The snapshot's timestamp on the cache's clock: the clock reading just before the last
    full listing began (a relist of one pod keeps it, §3 rule 11)."""
    relisted: str | None = None
    """None for a full listing; the UID of the pod relisted alone otherwise (§7)."""


PublishHook = Callable[[Publication], None]
"""Called with every publication (the rule is in the module docstring)."""


class Hooks:
    """The hooks of one cache, run in the order they were added."""

    __slots__ = ("_hooks",)

    def __init__(self) -> None:
        self._hooks: tuple[PublishHook, ...] = ()

    def add(self, hook: PublishHook) -> Callable[[], None]:
        """Run ``hook`` at every publish from now on; returns what removes it (idempotent)."""
        if not callable(hook):
            raise TypeError(f"a publish hook must be callable, not {hook!r}")
        self._hooks = (*self._hooks, hook)

        def remove() -> None:
            self._hooks = tuple(each for each in self._hooks if each is not hook)

        return remove

    def __len__(self) -> int:
        return len(self._hooks)

    def run(self, publication: Publication) -> None:
        """Every hook, with ``publication``; one that raises is logged (rule 3)."""
        for hook in self._hooks:  # a tuple: adding or removing meanwhile starts a new one
            try:
                hook(publication)
            except Exception:
                log.exception("a publish hook failed (revision %d)", publication.revision)
