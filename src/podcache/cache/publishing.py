"""The publish hook: the one way a snapshot reaches code outside the cache (docs/architecture.md §3
rule 10). No I/O, no threads: the drivers call ``Hooks.run`` at the moment the rule names.

A cache *publishes* every snapshot it stores: after a full listing, and after a relist of one
pod (§7). Each publish hands every hook one ``Publication``: the new ``PodList`` (already
numbered with its revision), the changes it brought (empty when the pods are equal to the
previous snapshot's and only the time moved), the snapshot's timestamp, and what produced it.

THE HOOK RULE.

1. A hook runs once per publish, in publish order, before any caller waiting for that
   snapshot is woken and before any watch can read its changes: whoever is handed the
   snapshot afterwards finds every hook's work done.
2. ``RuntimeCache`` runs hooks in the thread that stored the snapshot, under the cache's lock;
   ``AsyncRuntimeCache`` runs them on the event loop, in the task that stored it. So a hook
   must return quickly and must not block, wait or call the cache (any method that takes its
   lock or awaits: ``get_pods``'s slow path, ``force_update_if_older``, ``stats``, ``watch``);
   it may keep the publication and schedule work elsewhere (a thread, a loop callback).
3. A hook that raises is logged and the others still run; the snapshot is published anyway.
4. Hooks are added and removed at any time (``on_publish`` returns the remover); one added
   during a publish first hears the next.
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
