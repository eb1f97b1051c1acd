"""Bearer tokens: the token file and the Authorization check; not which routes need one.

The comparison is constant-time (``hmac.compare_digest``). It holds no policy about which
addresses need a token (``command``) or which routes are open (``app``).
"""

from __future__ import annotations

import hmac
import os
import stat

from podcache.errors import TokenFileError

__all__ = ["MIN_TOKEN_LENGTH", "BearerAuth", "TokenFileError", "read_token_file"]

MIN_TOKEN_LENGTH = 16
"""Shortest token accepted: anything shorter is guessable."""


def read_token_file(path: str) -> tuple[bytes, str | None]:
    """The token in ``path`` (surrounding whitespace stripped) and a warning, if any.

    The warning says when the file is readable by group or others. An unreadable file, an
    empty token, a short one or one holding whitespace or control characters is a
    TokenFileError.
    """
    try:
        with open(path, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            raw = handle.read(4097)
    except OSError as exc:
        raise TokenFileError(f"cannot read token file {path}: {exc.strerror}") from exc
    if len(raw) > 4096:
        raise TokenFileError(f"token file {path} is larger than 4096 bytes")
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
    """Accepts ``Authorization: Bearer <token>`` with exactly the configured token."""

    __slots__ = ("_token",)

    def __init__(self, token: bytes) -> None:
        if not token:
            raise ValueError("the bearer token must not be empty")
        self._token = token

    def check(self, authorization: str | None) -> bool:
        """True when the header carries the token (the scheme is case-insensitive)."""
        if authorization is None:
            return False
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        try:
            offered = credentials.strip().encode("ascii")
        except UnicodeEncodeError:
            return False
        return hmac.compare_digest(offered, self._token)
