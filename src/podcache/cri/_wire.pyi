"""Types of the C extension ``podcache.cri._wire``: the CRI list answers read from wire bytes."""

from typing import Any

class MalformedError(ValueError):
    """The bytes are not a valid message of podcache's api.proto."""

def sandboxes(data: bytes, /) -> list[tuple[Any, ...]]:
    """The items of a ListPodSandboxResponse as flat tuples."""

def containers(data: bytes, /) -> list[tuple[Any, ...]]:
    """The items of a ListContainersResponse as flat tuples."""
