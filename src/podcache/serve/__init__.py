"""``podcache serve``, a read-only HTTP API over the cache: re-exports only, no logic.

``App`` is the application (``App.respond``; ``asgi.asgi_app`` for ASGI); ``serve_command``
the click command the CLI mounts. Modules: ``app`` (a request's way through the parts),
``routes`` (the route table), ``params`` (each parameter, its parser and its description),
``router``, ``handlers``, ``plan`` (how a request will be answered), ``views`` (the memo of
snapshot views), ``reading`` (a request's snapshot and response), ``lookups`` (processes, and
keys a pod that left held), ``keeper``, ``failures`` (exceptions as statuses), ``snapshot``
per-snapshot bytes and ETags, ``query`` request validation, ``metrics``, ``auth``, ``http1``
the HTTP/1.1 server (asyncio protocol, httptools parser), ``server`` (sockets, the uvloop
event loop, signals), ``asgi`` (the ASGI entry point), ``openapi``, ``response``,
``command``.
"""

from podcache.serve.app import App
from podcache.serve.command import serve_command

__all__ = ["App", "serve_command"]
