"""Fixtures for the CRI client tests: a short directory for unix sockets."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture
def sock_dir() -> Iterator[str]:
    """A fresh directory under /tmp: a unix socket path must fit in 107 bytes, which pytest's
    tmp_path does not promise."""
    path = tempfile.mkdtemp(prefix="pc-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)
