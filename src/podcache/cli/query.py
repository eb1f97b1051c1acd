"""Choosing pods for the CLI: filters (namespace, name, labels) and ID lookup for ``inspect``
and ``ps --pod``; pure functions over a PodList, no I/O and no rendering.

An ID names a pod when it is, tried in this order: a container or sandbox ID as ``type://id``;
the pod's UID; its ``name_namespace``; a container or sandbox ID, bare or as a unique prefix of
at least 4 characters.
"""

from __future__ import annotations

from collections.abc import Iterable

import click

from podcache.cli.exits import AmbiguousIDError, NotFoundError
from podcache.cli.options import PodFilter
from podcache.model import MIN_PREFIX, AmbiguousContainerIDError, Container, Pod, PodList

__all__ = ["find", "find_pod", "matches", "select"]


def matches(pod: Pod, where: PodFilter) -> bool:
    """Whether ``pod`` passes every filter given."""
    if where.namespace is not None and pod.namespace != where.namespace:
        return False
    if where.name is not None and where.name.search(pod.name) is None:
        return False
    for key, wanted in where.labels:
        value = pod.label(key)
        if value is None or (wanted is not None and value != wanted):
            return False
    return True


def select(pods: Iterable[Pod], where: PodFilter) -> list[Pod]:
    """The pods that pass ``where``, in their given order."""
    return [pod for pod in pods if matches(pod, where)]


def _describe(pods: PodList, ident: str) -> str:
    found = pods.by_container_id(ident)
    if found is None:  # pragma: no cover - every candidate comes from this snapshot
        return ident
    pod, container = found
    kind = "sandbox" if container in pod.sandboxes else f"container {container.name}"
    return f"{ident}  ({kind} of pod {pod.full_name})"


def find_pod(pods: PodList, ident: str, *, param_hint: str = "'ID'") -> Pod:
    """The pod ``ident`` names (see the module docstring); errors as ``find``'s."""
    return find(pods, ident, param_hint=param_hint)[0]


def find(pods: PodList, ident: str, *, param_hint: str = "'ID'") -> tuple[Pod, Container | None]:
    """The pod ``ident`` names (see the module docstring) and the container or sandbox it
    matched (None when it named the pod by UID or name_namespace).

    Raises NotFoundError (exit 3) when nothing matches, AmbiguousIDError (exit 2, with the
    candidates) for a prefix of several IDs, click.BadParameter (exit 2) for a malformed
    ``type://id`` or a prefix shorter than 4 characters.
    """
    if not ident:
        raise click.BadParameter("an empty ID names nothing", param_hint=param_hint)
    if "://" in ident:
        return _by_typed_id(pods, ident, param_hint)
    pod = pods.by_uid(ident) or pods.by_full_name(ident)
    if pod is not None:
        return pod, None
    return _by_id_or_prefix(pods, ident, param_hint)


def _by_typed_id(pods: PodList, ident: str, param_hint: str) -> tuple[Pod, Container | None]:
    """The pod holding the container or sandbox ``type://id`` names (errors as ``find``'s)."""
    try:
        found = pods.by_container_id(ident)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint=param_hint) from None
    if found is None:
        raise NotFoundError(f"no container or sandbox {ident} (among {len(pods)} pods)")
    return found


def _by_id_or_prefix(pods: PodList, ident: str, param_hint: str) -> tuple[Pod, Container | None]:
    """The pod holding the container or sandbox a bare ID or prefix names (errors as
    ``find``'s)."""
    try:
        found = pods.by_container_id(ident)
    except AmbiguousContainerIDError as e:
        raise AmbiguousIDError(
            f"ID prefix {ident!r} is ambiguous: it matches {len(e.matches)} containers or "
            "sandboxes; give more characters",
            [_describe(pods, match) for match in e.matches],
        ) from None
    except ValueError:
        raise click.BadParameter(
            f"{ident!r} is not a pod UID or name_namespace, and as an ID prefix it is too short "
            f"(give at least {MIN_PREFIX} characters)",
            param_hint=param_hint,
        ) from None
    if found is None:
        raise NotFoundError(
            f"nothing matches {ident!r}: no pod UID, name_namespace, container or sandbox ID "
            f"or ID prefix among {len(pods)} pods"
        )
    return found
