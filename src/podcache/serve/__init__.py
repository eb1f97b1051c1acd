"""``podcache serve``, a read-only HTTP API over the cache: re-exports only, no logic.

``App`` is the application (``App.respond``, and ASGI); ``serve_command`` the click command the
CLI mounts. Modules: ``app`` routing and handlers, ``snapshot`` per-snapshot bytes and ETags,
``query`` request validation, ``metrics``, ``auth``, ``watch`` (runtime call records),
``http1`` the HTTP/1.1 server (asyncio protocol, httptools parser), ``server`` (sockets, the
uvloop event loop, signals), ``openapi``, ``response``, ``command``.
"""

from podcache.serve.app import App
from podcache.serve.command import serve_command

__all__ = ["App", "serve_command"]
