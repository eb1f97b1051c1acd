"""Matching a request's path and query against the route table; no handlers, no auth.

``Router`` reads ``routes.ROUTES`` once: a route without path parameters is one dict entry;
the others are found by their first segment (``/pods/``, ``/namespaces/``), then matched
segment by segment, a parameter taking one non-empty segment, or the rest of the path when it
may hold ``/`` (``Param.slashes``; possibly empty when ``Param.empty``, which its parser then
refuses). Cost: one dict lookup, and for a parameterised path one more and a split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from podcache.serve.params import ALL, Param
from podcache.serve.query import Query, parse_query
from podcache.serve.response import HTTPError
from podcache.serve.routes import ROUTES, Route

__all__ = ["UNMATCHED", "Matched", "Router"]

UNMATCHED = "unmatched"
"""The route label (metrics) of a request no route matched."""


@dataclass(frozen=True, slots=True)
class Matched:
    """A route as the router uses it: the row, and what is derived from it once."""

    route: Route
    template: str
    parts: tuple[str | Param[Any], ...]
    """The template after its first segment, one entry per segment: a literal, or the
    parameter in its place."""
    path_params: tuple[Param[Any], ...]
    allowed: frozenset[str]
    """The query parameters the route takes (any other is a 400)."""
    repeatable: frozenset[str]

    @classmethod
    def of(cls, route: Route) -> Matched:
        path_params = {p.name: p for p in route.params if p.where == "path"}
        segments = route.template.split("/")[2:]
        parts = tuple(path_params.get(s[1:-1], s) if s.startswith("{") else s for s in segments)
        query = [p for p in route.params if p.where == "query"]
        return cls(
            route,
            route.template,
            parts,
            tuple(path_params.values()),
            frozenset(p.name for p in query),
            frozenset(p.name for p in query if p.repeatable),
        )

    def match(self, rest: str) -> tuple[str, ...] | None:
        """The path's parameters as sent, from ``rest`` (the path after its first segment);
        None when it does not fit the template."""
        parts = self.parts
        last = parts[-1]
        cuts = len(parts) - 1 if isinstance(last, Param) and last.slashes else -1
        pieces = rest.split("/", cuts)
        if len(pieces) != len(parts):
            return None
        args = []
        for part, piece in zip(parts, pieces, strict=True):
            if isinstance(part, str):
                if piece != part:
                    return None
            elif piece or part.empty:
                args.append(piece)
            else:
                return None
        return tuple(args)

    def query(self, text: str) -> Query:
        """The query string checked against the route's names and parsed; ``all`` (which a
        true value took to the all view before) checked too."""
        params = parse_query(text, self.allowed, self.repeatable) if text else {}
        if "all" in params:  # true went to the all view (App): 0 or false, or a 400
            ALL.parse(params["all"][0])
        return params

    def args(self, raw: tuple[str, ...]) -> tuple[Any, ...]:
        """The path's parameters parsed, in the template's order (the first bad one: 400)."""
        return tuple(param.parse(text) for param, text in zip(self.path_params, raw, strict=True))


class Router:
    """The routes of ``routes`` (``ROUTES``) by path."""

    def __init__(self, routes: Sequence[Route] = ROUTES) -> None:
        self._exact: dict[str, Matched] = {}
        self._by_first: dict[str, list[Matched]] = {}
        for route in routes:
            matched = Matched.of(route)
            if matched.path_params:
                first = "/" + route.template.split("/")[1] + "/"
                self._by_first.setdefault(first, []).append(matched)
            else:
                self._exact[route.template] = matched

    def find(self, path: str) -> tuple[Matched, tuple[str, ...]]:
        """The route of ``path`` and its path parameters as sent; 404 when none."""
        exact = self._exact.get(path)
        if exact is not None:
            return exact, ()
        cut = path.find("/", 1) + 1
        if cut:
            for matched in self._by_first.get(path[:cut], ()):
                args = matched.match(path[cut:])
                if args is not None:
                    return matched, args
        raise HTTPError(404, f"no such route {path[:100]!r} (the routes are in /openapi.json)")

    def label(self, path: str) -> str:
        """The route ``path`` is counted under (its template, or ``UNMATCHED``)."""
        try:
            return self.find(path)[0].template
        except HTTPError:
            return UNMATCHED
