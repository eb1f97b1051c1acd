"""The bounds of the HTTP server: timeouts, sizes and counts, each with its reason.

The public ones are ``HTTPServer``'s defaults, which ``podcache serve``'s flags override.
Deliberately not here: where each bound is enforced (the package docstring's "Bounds").
"""

from __future__ import annotations

HEAD_TIMEOUT = 10.0
"""Seconds from the start of a request's target to the blank line ending its head: a slowloris
client is cut off (408). The few bytes of the method before it count as idle time."""
IDLE_TIMEOUT = 75.0
"""Seconds a connection may stay idle after its last answer, or after it opened (nginx's
default, longer than most client pools keep one, so the client usually closes first); also
how long unsent answers may sit without the client reading any of them before the connection
is reset."""
LINGER_TIMEOUT = 2.0
"""Seconds a connection that ends may go without write progress (the client reading the last
answer) or, once everything is sent, without the client closing: then it is reset."""
MAX_HEAD = 64 * 1024
"""Most bytes of header field names and values, and of a head still arriving; more: 431. The
application's limits are lower (query.py): this one caps memory before a head reaches it."""
MAX_TARGET = 16 * 1024
"""Most bytes of a request target; more: 414 (the application refuses paths and queries over
2,048 characters itself)."""
MAX_HEADER_FIELDS = 256
"""Most request header fields collected; more: 431 (the application refuses over 64)."""
MAX_PIPELINE = 16
"""Requests waiting on one connection before it stops reading (one read of at most 8 KiB
already parsed may add more)."""
MAX_CONNECTIONS = 1024
"""Most open connections (``--max-connections``); the next one gets a 503 and is closed."""
MAX_BUFFERED = 256 * 1024 * 1024
"""Most unsent answer bytes in all connections together (``--max-buffered``); past it the
connections holding the most are reset first."""
SEND_BUFFER = 128 * 1024
"""``SO_SNDBUF`` of every connection: the kernel's share of its unsent bytes (Linux doubles
it). Without it the kernel grows the buffer of a client that does not read up to
``tcp_wmem``'s maximum (4 MiB), outside any budget of ours; with it each pins at most 256 KiB."""


_FEED_STEP = 8 * 1024  # a larger read is parsed in steps, so a full queue stops parsing early
_LINGER_BYTES = 1024 * 1024  # most input discarded after the end before the connection is reset
_REFUSING = 256  # most connections refused for the cap still being answered, beyond the cap
