"""The ASGI 3 entry point: ``asgi_app(app)`` runs an ``App`` under an ASGI server.

podcache serves with its own HTTP/1.1 server (``http1``); this is for running the same
application under another (``benchmarks/bench_serve.py --with-uvicorn`` compares them) and for
tests that call the API as an ASGI server would. Every request goes through ``App.respond``
(the same checks and answers as ``respond_now``, in one coroutine); lifespan events are
acknowledged (there is nothing to set up), and any other scope (a websocket) is closed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from podcache.serve.app import App

__all__ = ["ASGIApp", "Receive", "Send", "asgi_app"]

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]
"""An ASGI 3 application: ``await application(scope, receive, send)``."""


def asgi_app(app: App) -> ASGIApp:
    """``app`` as an ASGI 3 application (a coroutine function, as ASGI servers detect it)."""

    async def application(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send)
        elif kind == "http":
            await _http(app, scope, send)
        else:
            await send({"type": "websocket.close", "code": 1003})

    return application


async def _lifespan(receive: Receive, send: Send) -> None:
    """Startup and shutdown acknowledged, until shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _http(app: App, scope: dict[str, Any], send: Send) -> None:
    """One request: ``App.respond``'s answer, streamed when it is a stream (not for HEAD)."""
    method: str = scope["method"]
    response = await app.respond(
        method,
        scope["path"],
        scope.get("query_string", b"").decode("latin-1"),
        [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", ())],
    )
    body = response.body + response.suffix
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
    if response.status != 304 and response.stream is None:
        raw.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": response.status, "headers": raw})
    if response.stream is not None and method != "HEAD":
        async for chunk in response.stream:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})
