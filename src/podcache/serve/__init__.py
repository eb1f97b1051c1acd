"""``podcache serve``, a read-only HTTP API over the cache (docs/architecture.md §5):
re-exports only, no logic.

``App`` is the application (``App.respond``; ``asgi.asgi_app`` for ASGI); ``serve_command``
the click command the CLI mounts.
"""

from podcache.serve.app import App
from podcache.serve.command import serve_command

__all__ = ["App", "serve_command"]
