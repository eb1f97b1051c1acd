"""Bearer tokens: the token file, followed as it is rotated, the Authorization check, and the
gate every request passes; not which routes need one.

The comparison is constant-time (``hmac.compare_digest``). It holds no policy about which
addresses need a token (``command``) or which routes are open (the route table, ``routes``,
hands them to ``AuthGate``).

Rotation. Kubernetes rotates a mounted Secret by replacing the file (a new inode behind the
``..data`` symlink), and node agents follow such credentials. ``BearerAuth.following`` does: at
most every ``RELOAD_INTERVAL`` seconds, on a request that needs the token, it stats the file
(one syscall; nothing on the other requests), and when the file changed (device, inode, size,
modification or change time) it reads it again. Within ``RELOAD_INTERVAL`` of a replacement
only the new token is accepted. It FAILS CLOSED: a file that becomes unreadable, missing,
empty, short, not a regular file or otherwise invalid leaves no token at all, so every request
gets 401 until the file is good again; each such change is logged once, never the token.

The file is opened with ``O_NONBLOCK`` and must be a regular file: a FIFO (which would block
``open`` until a writer came, and with it the event loop) or a device is refused at start-up
and while following, with a message naming the file.
"""

from __future__ import annotations

import hmac
import logging
import os
import stat
import time
from collections.abc import Callable

from podcache.errors import TokenFileError
from podcache.serve.response import HTTPError

__all__ = [
    "MAX_TOKEN_FILE_BYTES",
    "MIN_TOKEN_LENGTH",
    "RELOAD_INTERVAL",
    "AuthGate",
    "BearerAuth",
    "TokenFileError",
    "read_token_file",
]

log = logging.getLogger("podcache.serve")

MIN_TOKEN_LENGTH = 16
"""Shortest token accepted: anything shorter is guessable."""
MAX_TOKEN_FILE_BYTES = 4096
"""Largest token file read; a larger one is refused."""
RELOAD_INTERVAL = 2.0
"""Most seconds between two looks at a followed token file (a ``stat``, on a request)."""

_FileKey = tuple[int, int, int, int, int]  # device, inode, size, mtime and ctime (ns)


def _file_key(status: os.stat_result) -> _FileKey:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def _read_regular(path: str) -> tuple[bytes, int]:
    """At most ``MAX_TOKEN_FILE_BYTES + 1`` bytes of ``path`` and its mode; never blocks in
    ``open`` (``O_NONBLOCK``); anything but a regular file is a TokenFileError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise TokenFileError(f"cannot read token file {path}: {exc.strerror}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise TokenFileError(
                f"token file {path} is not a regular file (a FIFO, socket, device or "
                "directory): refusing to read it"
            )
        return os.read(fd, MAX_TOKEN_FILE_BYTES + 1), mode
    except OSError as exc:
        raise TokenFileError(f"cannot read token file {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)


def read_token_file(path: str) -> tuple[bytes, str | None]:
    """The token in ``path`` (surrounding whitespace stripped) and a warning, if any.

    The warning says when the file is readable by group or others. An unreadable file, one
    that is not a regular file, an empty token, a short one or one holding whitespace or
    control characters is a TokenFileError.
    """
    raw, mode = _read_regular(path)
    if len(raw) > MAX_TOKEN_FILE_BYTES:
        raise TokenFileError(f"token file {path} is larger than {MAX_TOKEN_FILE_BYTES} bytes")
    token = raw.strip()
    if not token:
        raise TokenFileError(f"token file {path} is empty")
    if len(token) < MIN_TOKEN_LENGTH:
        raise TokenFileError(
            f"the token in {path} is shorter than {MIN_TOKEN_LENGTH} characters "
            "(make one with: head -c 32 /dev/urandom | base64)"
        )
    if any(byte <= 0x20 or byte >= 0x7F for byte in token):
        raise TokenFileError(
            f"the token in {path} holds whitespace, control or non-ASCII characters"
        )
    warning = None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warning = f"token file {path} is accessible by group or others (chmod 600 it)"
    return token, warning


class BearerAuth:
    """Accepts ``Authorization: Bearer <token>`` with exactly the current token: the one given,
    or (``following``) the one the token file holds now, None while it holds no valid one."""

    __slots__ = ("_clock", "_interval", "_key", "_next_look", "_path", "_problem", "_token")

    def __init__(self, token: bytes) -> None:
        if not token:
            raise ValueError("the bearer token must not be empty")
        self._token: bytes | None = token
        self._path: str | None = None
        self._clock: Callable[[], float] = time.monotonic
        self._interval = RELOAD_INTERVAL
        self._next_look = 0.0
        self._key: _FileKey | None = None
        self._problem: str | None = None

    @classmethod
    def following(
        cls,
        path: str,
        *,
        interval: float = RELOAD_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> tuple[BearerAuth, str | None]:
        """A check that follows the token file ``path``, and ``read_token_file``'s warning.
        The file must hold a valid token now (else TokenFileError, as at start-up)."""
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        try:
            key = _file_key(os.stat(path))
        except OSError as exc:
            raise TokenFileError(f"cannot read token file {path}: {exc.strerror}") from exc
        token, warning = read_token_file(path)  # a replacement since the stat: read again
        auth = cls(token)
        auth._path = path
        auth._clock = clock
        auth._interval = interval
        auth._key = key
        auth._next_look = clock() + interval
        return auth, warning

    @property
    def token_loaded(self) -> bool:
        """Whether a token is accepted now (False: a followed file holds none; all get 401)."""
        return self._token is not None

    def check(self, authorization: str | None) -> bool:
        """True when the header carries the token (the scheme is case-insensitive)."""
        if self._path is not None:
            now = self._clock()
            if now >= self._next_look:
                self._look(now)
        token = self._token
        if authorization is None or token is None:
            return False
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        try:
            offered = credentials.strip().encode("ascii")
        except UnicodeEncodeError:
            return False
        return hmac.compare_digest(offered, token)

    def _look(self, now: float) -> None:
        """Stat the followed file; read it again when it changed (see the module docstring)."""
        path = self._path
        assert path is not None
        self._next_look = now + self._interval
        try:
            key: _FileKey | None = _file_key(os.stat(path))
        except OSError as exc:
            key = None
            if self._key is None and self._token is None:
                return  # still missing: said already
            self._key = None
            self._fail(f"cannot read token file {path}: {exc.strerror}")
            return
        if key == self._key:
            return
        self._key = key
        try:
            token, _warning = read_token_file(path)
        except TokenFileError as exc:
            self._fail(str(exc))
            return
        if token != self._token:
            log.warning(
                "token file %s changed: its new token is accepted, the previous one no longer",
                path,
            )
        elif self._problem is not None:
            log.warning("token file %s holds a valid token again: accepted", path)
        self._token = token
        self._problem = None

    def _fail(self, problem: str) -> None:
        """No token is accepted until the file is good again (fail closed); said once."""
        self._token = None
        if problem != self._problem:
            log.error("%s: every request needing the token gets 401 until it is fixed", problem)
            self._problem = problem


_UNAUTHORIZED = [("www-authenticate", 'Bearer realm="podcache"')]


class AuthGate:
    """The token check of every request, replayed from the memo or not: it passes without a
    token configured (``auth`` None), and for the ``open`` routes (by template)."""

    def __init__(self, auth: BearerAuth | None, open_routes: frozenset[str]) -> None:
        self._auth = auth
        self._open = open_routes

    def allowed(self, route: str, authorization: str | None) -> bool:
        """Whether a request to ``route`` with this Authorization value may be answered."""
        auth = self._auth
        return auth is None or route in self._open or auth.check(authorization)

    def check(self, route: str, authorization: str | None) -> None:
        """``allowed``, or the 401 (with ``WWW-Authenticate``)."""
        if not self.allowed(route, authorization):
            raise HTTPError(
                401,
                "a valid bearer token is required (Authorization: Bearer <token>)",
                headers=_UNAUTHORIZED,
            )
