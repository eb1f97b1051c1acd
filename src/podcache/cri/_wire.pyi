"""Types of the C extension ``podcache.cri._wire``: the CRI list answers and events read from
wire bytes.

The rows' fields are the ``*_ROW_FIELDS`` tables of ``_wire.c``, in the same order (a test
holds the two to each other). Absent strings are ``""``.
"""

from collections.abc import Sequence
from typing import TypeVar, final

_Fields = TypeVar("_Fields", bound=tuple[object, ...])

class MalformedError(ValueError):
    """The bytes are not a valid message of podcache's api.proto (or, from ``event_fields``
    and ``status_fields``, eventwire's message naming the problem)."""

@final
class SandboxRow:
    """One PodSandbox of a ListPodSandboxResponse, as read."""

    @property
    def id(self) -> str: ...
    @property
    def created_at(self) -> int: ...
    @property
    def state(self) -> int: ...
    @property
    def has_metadata(self) -> bool:
        """Whether PodSandbox.metadata was listed."""
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def attempt(self) -> int:
        """PodSandboxMetadata.attempt (uint32)."""
    @property
    def labels(self) -> tuple[tuple[str, str], ...]:
        """The pod's own labels: sorted by key, each key once with its last value, no
        ``io.kubernetes.pod.*`` keys."""

@final
class ContainerRow:
    """One Container of a ListContainersResponse, as read."""

    @property
    def id(self) -> str: ...
    @property
    def pod_sandbox_id(self) -> str: ...
    @property
    def created_at(self) -> int: ...
    @property
    def state(self) -> int: ...
    @property
    def has_metadata(self) -> bool:
        """Whether Container.metadata was listed."""
    @property
    def name(self) -> str: ...
    @property
    def attempt(self) -> int:
        """ContainerMetadata.attempt (uint32)."""
    @property
    def has_image(self) -> bool:
        """Whether Container.image was listed."""
    @property
    def image(self) -> str: ...
    @property
    def runtime_handler(self) -> str: ...
    @property
    def image_ref(self) -> str: ...
    @property
    def image_id(self) -> str: ...
    @property
    def pod_uid(self) -> str:
        """The label ``io.kubernetes.pod.uid``."""
    @property
    def pod_name(self) -> str:
        """The label ``io.kubernetes.pod.name``."""
    @property
    def pod_namespace(self) -> str:
        """The label ``io.kubernetes.pod.namespace``."""
    @property
    def hash(self) -> str:
        """The annotation ``io.kubernetes.container.hash``."""

def sandboxes(data: bytes | memoryview, /) -> list[SandboxRow]:
    """The items of a ListPodSandboxResponse as rows."""

def containers(data: bytes | memoryview, /) -> list[ContainerRow]:
    """The items of a ListContainersResponse as rows."""

def item_cuts(data: bytes | memoryview, piece: int, /) -> list[int] | None:
    """Where ``convert.split_items`` cuts ``data``: the end of each piece
    (``convert._item_cuts_python`` is the reference)."""

def newest_first(created: Sequence[int], ids: Sequence[str], /) -> list[int]:
    """The positions ``0..n-1`` ordered by ``created`` descending, then by ``ids`` ascending,
    then by position: what two stable sorts (by id, then by created, reversed) give. The
    sort runs with the GIL released. TypeError unless ints and strs; OverflowError past 64
    bits; UnicodeEncodeError for a str without UTF-8 (a lone surrogate)."""

def event_fields(data: bytes | memoryview, fields_type: type[_Fields], /) -> _Fields:
    """``eventwire.event_fields``: the ``fields_type`` (``eventwire.EventFields``) of the
    ``ContainerEventResponse`` in ``data`` (``eventwire.event_fields_python`` is the
    reference). The scan of 64 KiB or more of bytes runs with the GIL released."""

def status_fields(data: bytes | memoryview, fields_type: type[_Fields], /) -> _Fields:
    """``eventwire.status_fields``: as ``event_fields``, of a ``PodSandboxStatusResponse``."""
