"""Parsing and head checks: httptools' callbacks, target splitting, the Host rule.

Each complete head becomes a ``_Request`` in the queue, or the ``_Refusal`` that ends the
connection. Deliberately not here: answering what is queued (``answering``) and when reading
pauses (``lifecycle``).
"""

from __future__ import annotations

import logging
from typing import NoReturn
from urllib.parse import unquote_to_bytes

import httptools

from podcache.serve.http1.items import _Refusal, _Request
from podcache.serve.http1.lifecycle import Lifecycle
from podcache.serve.http1.limits import (
    _FEED_STEP,
    MAX_HEAD,
    MAX_HEADER_FIELDS,
    MAX_PIPELINE,
    MAX_TARGET,
)

__all__ = ["Parsing"]

log = logging.getLogger("podcache.serve")

_SLASH, _QUESTION, _HASH, _PERCENT = b"/?#%"  # int membership in bytes beats a bytes one


class _Stop(Exception):  # noqa: N818 -- ends parsing on purpose, not an error
    """Raised from a parser callback: this connection parses nothing more."""


class Parsing(Lifecycle):
    """The parser's callbacks and its feeding: each complete head joins the queue."""

    def on_url(self, url: bytes) -> None:
        if self._head_began is None:  # the state becomes HEAD once this read is parsed
            self._head_began = self._server.now
        self._url += url
        if len(self._url) > MAX_TARGET:
            self._stop(414, f"request target is longer than {MAX_TARGET} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        fields = self._fields
        self._field_bytes += len(name) + len(value)
        if self._field_bytes > MAX_HEAD:
            self._stop(431, f"request head is larger than {MAX_HEAD} bytes")
        if len(fields) >= MAX_HEADER_FIELDS:
            self._stop(431, f"more than {MAX_HEADER_FIELDS} request header fields")
        fields.append((name, value))

    def on_headers_complete(self) -> None:
        self._head_began = None
        self._head_bytes = 0
        self._field_bytes = 0
        parser = self._parser
        assert parser is not None
        http10 = False
        version = parser.get_http_version()
        if version != "1.1":
            if version == "0.9":  # a request line without a version: malformed, not a version
                self._stop(400, "request line has no HTTP version: speak HTTP/1.1")
            if version != "1.0":
                self._stop(505, f"HTTP/{version} is not supported: speak HTTP/1.1")
            http10 = True
        method = parser.get_method().decode()  # one of llhttp's method names: ASCII
        ends = not parser.should_keep_alive() or parser.should_upgrade()  # upgrades: answer, end
        url, fields = self._url, self._fields
        self._url = b""
        self._fields = []
        headers, has_body = self._decode_fields(fields)
        if has_body:
            if method in ("GET", "HEAD"):
                self._stop(413, "request bodies are not accepted (GET and HEAD take none)")
            ends = True  # other methods: the application answers 405; the body is never read
        target = _split_target(url)
        if target is None:
            self._stop(400, f"request target {url[:64]!r} is neither a path nor a URL")
        path, query = target
        self._queue.append(_Request(method, path, query, headers, not ends, http10))
        if ends:  # this request ends the connection: nothing after it is read
            self._stop_parsing()
            raise _Stop

    def _decode_fields(
        self, fields: list[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[str, str]], bool]:
        """Header fields as (lower-case name, value) str pairs, and whether a body follows.

        Refuses (from the parser's callback) a request without a Host header or with more
        than one (400, RFC 9112 3.2), and, when the server names the hosts it serves, a Host
        that is not one of them (421): a web page that reached a loopback listener through
        DNS rebinding sends its own name there, never the listener's.
        """
        headers = []
        has_body = False
        host: str | None = None
        hosts = 0
        for name, value in fields:
            lower = name.lower()
            text = value.rstrip(b" \t").decode("latin-1")
            if lower == b"host":
                host = text
                hosts += 1
            elif lower == b"content-length":
                has_body = has_body or bool(value.strip(b" \t0"))  # llhttp checked: digits
            elif lower == b"transfer-encoding":
                has_body = True
            headers.append((lower.decode("latin-1"), text))
        self._check_host(host, hosts)
        return headers, has_body

    def _check_host(self, host: str | None, hosts: int) -> None:
        """One Host header (400 otherwise), naming this server when it names its hosts (421
        otherwise)."""
        if host is None or hosts > 1:
            self._stop(400, "no Host header" if host is None else "more than one Host header")
        allowed = self._allowed_hosts
        if allowed is not None and host.lower() not in allowed:
            self._stop(
                421,
                f"Host {host[:100]!r} does not name this server: without a token it serves "
                "only its own addresses and the names given with --allow-host",
            )

    def _feed(self, data: bytes) -> None:
        """Parse ``data``, in ``_FEED_STEP`` steps when larger; hold back what is left once
        ``MAX_PIPELINE`` requests wait."""
        size = len(data)
        if size <= _FEED_STEP:
            self._parse(data)
            return
        view = memoryview(data)
        for offset in range(0, size, _FEED_STEP):
            if len(self._queue) >= MAX_PIPELINE:
                self._unparsed = data[offset:]
                return
            self._parse(view[offset : offset + _FEED_STEP])
            if self._parser is None:
                return

    def _parse(self, piece: bytes | memoryview) -> None:
        parser = self._parser
        assert parser is not None
        try:
            parser.feed_data(piece)
        except httptools.HttpParserCallbackError:
            if self._parser is not None:
                raise  # a bug in a callback, not a _Stop: data_received logs it
        except httptools.HttpParserUpgrade:
            pass  # not reached: the upgrade request ended parsing in on_headers_complete
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed request: {exc}")
        if self._head_began is not None and self._parser is not None:
            # Counted per piece: a head is refused somewhere between MAX_HEAD - _FEED_STEP and
            # MAX_HEAD bytes, far above what the application accepts anyway.
            self._head_bytes += len(piece)
            if self._head_bytes > MAX_HEAD:  # a long target was refused already, in on_url
                self._refuse(431, f"request head is larger than {MAX_HEAD} bytes")

    def _refuse(self, status: int, message: str) -> None:
        """Queue the server's own JSON answer and stop parsing: the connection ends after it."""
        self._queue.append(_Refusal(status, message))
        self._stop_parsing()

    def _stop(self, status: int, message: str) -> NoReturn:
        """``_refuse`` from a parser callback: raises ``_Stop`` to end the parser's run."""
        self._refuse(status, message)
        raise _Stop

    def _stop_parsing(self) -> None:
        self._parser = None
        self._head_began = None
        self._unparsed = b""


def _split_target(url: bytes) -> tuple[str, str] | None:
    """``(path, query)`` of a request target, the path percent-decoded as UTF-8 (bytes that are
    not UTF-8 become U+FFFD, which the application refuses) and the query left encoded;
    ``"*"`` stays ``"*"``; None when the target is neither a path nor an absolute URL."""
    if url and url[0] == _SLASH:
        if _QUESTION in url:
            raw_path, _, raw_query = url.partition(b"?")
            if _HASH in raw_query:
                raw_query = raw_query.partition(b"#")[0]
        else:
            raw_path, raw_query = url, b""
            if _HASH in raw_path:
                raw_path = raw_path.partition(b"#")[0]
    elif url == b"*":
        return "*", ""
    elif b"://" in url and (parts := _url_parts(url)) is not None:
        raw_path, raw_query = parts
    else:
        return None
    if _PERCENT in raw_path:
        raw_path = unquote_to_bytes(raw_path)
    return raw_path.decode("utf-8", "replace"), raw_query.decode("utf-8", "replace")


def _url_parts(url: bytes) -> tuple[bytes, bytes] | None:
    """The raw path ("/" when empty) and query of an absolute URL; None when it is none."""
    try:
        parsed = httptools.parse_url(url)
    except httptools.HttpParserInvalidURLError:
        return None
    return parsed.path or b"/", parsed.query or b""
