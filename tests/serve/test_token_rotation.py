"""The token file is followed, fails closed, and is never a FIFO.

Unit tests drive ``BearerAuth.following`` with a fake clock over real files (replaced the way
Kubernetes rotates a mounted Secret: a new file behind a swapped ``..data`` symlink); process
tests run ``podcache serve --token-file`` and rotate, corrupt and delete its file.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from podcache.serve.auth import RELOAD_INTERVAL, BearerAuth, TokenFileError, read_token_file
from tests.serve.conftest import Client, ServeProcess, free_port, run_serve

OLD = b"old-token-0123456789abcdef"
NEW = b"new-token-0123456789abcdef"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SecretVolume:
    """A directory laid out as the kubelet's atomic writer does: ``token -> ..data/token``,
    ``..data -> ..<version>``; ``rotate`` writes a new version and swaps the symlink."""

    def __init__(self, root: Path, token: bytes) -> None:
        self.root = root
        self.version = 0
        self.path = root / "token"
        self._write_version(token)
        os.symlink("..data/token", self.path)

    def _write_version(self, token: bytes) -> None:
        self.version += 1
        directory = self.root / f"..v{self.version}"
        directory.mkdir()
        (directory / "token").write_bytes(token + b"\n")
        (directory / "token").chmod(0o600)
        link = self.root / "..data_tmp"
        os.symlink(directory.name, link)
        os.replace(link, self.root / "..data")

    def rotate(self, token: bytes) -> None:
        self._write_version(token)


def _bearer(token: bytes) -> str:
    return "Bearer " + token.decode()


def test_a_rotated_token_replaces_the_old_one_at_the_next_look(tmp_path: Path) -> None:
    volume = SecretVolume(tmp_path, OLD)
    clock = Clock()
    auth, warning = BearerAuth.following(str(volume.path), clock=clock)
    assert warning is None
    assert auth.check(_bearer(OLD)) and not auth.check(_bearer(NEW))
    volume.rotate(NEW)
    clock.now += RELOAD_INTERVAL / 2  # not looked at yet: the old token still holds
    assert auth.check(_bearer(OLD))
    clock.now += RELOAD_INTERVAL / 2
    assert auth.check(_bearer(NEW))
    assert not auth.check(_bearer(OLD))


def test_a_file_replaced_in_place_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(OLD)
    path.chmod(0o600)
    clock = Clock()
    auth, _ = BearerAuth.following(str(path), clock=clock)
    replacement = tmp_path / "token.new"
    replacement.write_bytes(NEW)
    replacement.chmod(0o600)
    os.replace(replacement, path)
    clock.now += RELOAD_INTERVAL
    assert auth.check(_bearer(NEW)) and not auth.check(_bearer(OLD))


@pytest.mark.parametrize(
    "spoil", ["delete", "empty", "short", "unreadable-dir", "fifo"], ids=lambda s: s
)
def test_a_spoilt_file_fails_closed_then_recovers(
    tmp_path: Path, spoil: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "token"
    path.write_bytes(OLD)
    path.chmod(0o600)
    clock = Clock()
    auth, _ = BearerAuth.following(str(path), clock=clock)
    path.unlink()
    if spoil == "empty":
        path.write_bytes(b"")
    elif spoil == "short":
        path.write_bytes(b"abc")
    elif spoil == "unreadable-dir":
        path.mkdir()
    elif spoil == "fifo":
        os.mkfifo(path)  # opening it for reading would block until a writer came
    clock.now += RELOAD_INTERVAL
    with caplog.at_level(logging.ERROR, logger="podcache.serve"):
        assert not auth.check(_bearer(OLD))  # never open: 401 for everyone
        clock.now += RELOAD_INTERVAL
        assert not auth.check(_bearer(OLD))
    assert not auth.token_loaded
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, "said once, not at every look"
    assert str(path) in errors[0].getMessage() and OLD.decode() not in errors[0].getMessage()
    if path.is_dir():
        path.rmdir()
    else:
        path.unlink(missing_ok=True)
    path.write_bytes(NEW)
    path.chmod(0o600)
    clock.now += RELOAD_INTERVAL
    assert auth.check(_bearer(NEW)) and not auth.check(_bearer(OLD))


def test_a_fifo_token_file_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    with pytest.raises(TokenFileError, match="not a regular file"):
        read_token_file(str(fifo))
    with pytest.raises(TokenFileError, match="not a regular file"):
        BearerAuth.following(str(fifo))


def test_serve_refuses_a_fifo_token_file_at_start_up(tmp_path: Path) -> None:
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    result = run_serve(["--sim", "--listen", f"127.0.0.1:{free_port()}", "--token-file", str(fifo)])
    assert result.returncode == 2, result.stderr
    assert "not a regular file" in result.stderr and str(fifo) in result.stderr


def _status(client: Client, token: bytes) -> int:
    return client.get("/pods", authorization=_bearer(token)).status


def _until(client: Client, token: bytes, status: int, wait: float = 15.0) -> None:
    deadline = time.monotonic() + wait
    while _status(client, token) != status:
        assert time.monotonic() < deadline, f"{token!r} never got {status}"
        time.sleep(0.05)


def test_serve_follows_a_rotated_secret_and_fails_closed_when_it_goes(tmp_path: Path) -> None:
    volume = SecretVolume(tmp_path, OLD)
    port = free_port()
    with ServeProcess(
        ["--sim", "--listen", f"127.0.0.1:{port}", "--token-file", str(volume.path)]
    ) as server:
        client = Client(port=port)
        assert _status(client, OLD) == 200 and _status(client, NEW) == 401
        volume.rotate(NEW)
        _until(client, NEW, 200)
        assert _status(client, OLD) == 401  # once the new one is accepted, the old one is not
        os.unlink(tmp_path / "..data")  # the Secret is gone: the path dangles
        _until(client, NEW, 401)
        assert _status(client, OLD) == 401
        assert client.get("/healthz").status == 200  # the probe needs no token
    assert "cannot read token file" in server.stderr
    assert OLD.decode() not in server.stderr and NEW.decode() not in server.stderr
