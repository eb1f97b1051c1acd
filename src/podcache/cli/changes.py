"""What a pod's change means, in words, for ``podcache events``; pure functions, no I/O.

``describe`` compares the pod before and after by container and sandbox ID: a container that
appears is "added" (or "started" when it appears running), one that goes from created to
running "started", to exited "exited", one that disappears "removed"; a sandbox that stops
running makes the pod "not ready", a new running one "ready" again.
"""

from __future__ import annotations

from podcache.cache.changes import ChangeType, PodChange
from podcache.model import Container, ContainerState, Pod

__all__ = ["describe"]

_RUNNING = ContainerState.RUNNING
_EXITED = ContainerState.EXITED


def _name(container: Container) -> str:
    return container.name or container.id.id[:13]


def _counts(pod: Pod) -> str:
    states: dict[str, int] = {}
    for container in pod.containers:
        states[container.state.value] = states.get(container.state.value, 0) + 1
    inside = ", ".join(f"{n} {state}" for state, n in states.items())
    noun = "container" if len(pod.containers) == 1 else "containers"
    return f"{len(pod.containers)} {noun}" + (f" ({inside})" if inside else "")


def _ready(pod: Pod) -> bool:
    return any(sandbox.state is _RUNNING for sandbox in pod.sandboxes)


_NEW_STATE_WORDS = {_RUNNING: "started", _EXITED: "exited"}
"""What a container whose state changed did, by its new state (else "is now <state>")."""


def _container_change(before: Container | None, after: Container | None) -> str | None:
    """A container's change in words: it appeared, disappeared or changed state; None when
    nothing a reader would notice changed."""
    if after is None:
        return None if before is None else f"container {_name(before)} was removed"
    if before is None:
        if after.state is _RUNNING:
            return f"container {_name(after)} started"
        return f"container {_name(after)} was added ({after.state.value})"
    if before.state is after.state:
        return None if before == after else f"container {_name(after)} changed"
    did = _NEW_STATE_WORDS.get(after.state, f"is now {after.state.value}")
    return f"container {_name(after)} {did}"


def _pod_changes(before: Pod, after: Pod) -> list[str]:
    """What changed from ``before`` to ``after``: the sandbox's readiness, each container
    (the new pod's first, then those gone), the labels."""
    words: list[str] = []
    if _ready(before) != _ready(after):
        words.append(
            "the sandbox became ready" if _ready(after) else "the sandbox became not ready"
        )
    words += _containers_changes(before, after)
    if before.labels != after.labels:
        words.append("its labels changed")
    return words


def _containers_changes(before: Pod, after: Pod) -> list[str]:
    """What happened to each container: those of ``after`` in its order, then those gone."""
    old = {c.id: c for c in before.containers}
    new = {c.id: c for c in after.containers}
    said = (
        _container_change(old.get(i), new.get(i)) for i in [*new, *(i for i in old if i not in new)]
    )
    return [words for words in said if words is not None]


def describe(change: PodChange) -> str:
    """One line saying what happened to the pod."""
    if change.type is ChangeType.ADDED:
        ready = "ready" if _ready(change.pod) else "not ready"
        return f"pod added, {ready}, {_counts(change.pod)}"
    if change.type is ChangeType.DELETED:
        return "pod removed"
    if change.previous is None:
        return "pod changed"
    return "; ".join(_pod_changes(change.previous, change.pod)) or "pod changed"
