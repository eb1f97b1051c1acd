"""Matching a request's path and query against the route table; no handlers, no auth.

``Router`` reads ``routes.ROUTES`` once (docs/architecture.md §5, item 3). A path parameter
takes one non-empty segment, or the rest of the path when it may hold ``/``
(``Param.slashes``; possibly empty when ``Param.empty``, which its parser then refuses). Cost:
one dict lookup, and for a parameterised path one more and a split.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import call, itemgetter
from typing import Any, cast

from podcache.serve.params import Param
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
    allowed: frozenset[str]
    """The query parameters the route takes (any other is a 400)."""
    repeatable: frozenset[str]
    parsers: tuple[Callable[[str], Any], ...]
    """The path parameters' parsers, in the template's order."""
    only: Param[Any] | None
    """The template's one part after its first segment, when that is a parameter (every route
    but one): matched without a split."""
    shape: _Shape
    """How the rest of the path is matched when ``only`` is None."""

    @classmethod
    def of(cls, route: Route) -> Matched:
        path_params = {p.name: p for p in route.params if p.where == "path"}
        parts = [_part(s, path_params) for s in route.template.split("/")[2:]]
        parsers = tuple(p.parse for p in path_params.values())
        only = parts[0] if len(parts) == 1 and isinstance(parts[0], Param) else None
        allowed, repeatable = _query_names(route)
        return cls(route, route.template, allowed, repeatable, parsers, only, _Shape.of(parts))

    def match(self, rest: str) -> tuple[str, ...] | None:
        """The path's parameters as sent, from ``rest`` (the path after its first segment);
        None when it does not fit the template."""
        only = self.only
        if only is None:
            return self.shape.match(rest)
        if rest:
            return (rest,) if only.slashes or "/" not in rest else None
        return (rest,) if only.empty else None

    def args(self, raw: tuple[str, ...]) -> tuple[Any, ...]:
        """The path's parameters parsed, in the template's order (the first bad one: 400)."""
        only = self.only
        if only is not None:
            return (only.parse(raw[0]),)
        return tuple(map(call, self.parsers, raw))


@dataclass(frozen=True, slots=True)
class _Shape:
    """A template's segments after the first, as matched: split ``cuts`` times (-1: at every
    ``/``; fewer when the last parameter may hold ``/``) into ``count`` pieces, the
    ``literals`` (position, text) equal, the pieces at ``required`` non-empty, and the
    parameters' pieces picked (``pick``)."""

    count: int
    cuts: int
    literals: tuple[tuple[int, str], ...]
    required: tuple[int, ...]
    pick: Callable[[list[str]], tuple[str, ...]]

    @classmethod
    def of(cls, parts: list[str | Param[Any]]) -> _Shape:
        last = parts[-1] if parts else None
        cuts = len(parts) - 1 if isinstance(last, Param) and last.slashes else -1
        literals = tuple((i, part) for i, part in enumerate(parts) if isinstance(part, str))
        at = [i for i, part in enumerate(parts) if isinstance(part, Param)]
        required = tuple(i for i in at if not cast(Param[Any], parts[i]).empty)
        return cls(len(parts), cuts, literals, required, _picker(at))

    def match(self, rest: str) -> tuple[str, ...] | None:
        pieces = rest.split("/", self.cuts)
        if len(pieces) != self.count:
            return None
        for index, literal in self.literals:
            if pieces[index] != literal:
                return None
        for index in self.required:
            if not pieces[index]:
                return None
        return self.pick(pieces)


def _picker(at: list[int]) -> Callable[[list[str]], tuple[str, ...]]:
    """The pieces at positions ``at``, as a tuple (``itemgetter`` of one gives the item)."""
    if not at:
        return lambda pieces: ()
    if len(at) == 1:
        only = at[0]
        return lambda pieces: (pieces[only],)
    return cast(Callable[[list[str]], tuple[str, ...]], itemgetter(*at))


def _query_names(route: Route) -> tuple[frozenset[str], frozenset[str]]:
    """The query parameters ``route`` takes, and those of them that may be repeated."""
    query = [p for p in route.params if p.where == "query"]
    return frozenset(p.name for p in query), frozenset(p.name for p in query if p.repeatable)


def _part(segment: str, path_params: dict[str, Param[Any]]) -> str | Param[Any]:
    """A template's segment: the parameter it names (``{name}``), or itself (a literal)."""
    return path_params[segment[1:-1]] if segment.startswith("{") else segment


class Router:
    """The routes of ``routes`` (``ROUTES``) by path."""

    def __init__(self, routes: Sequence[Route] = ROUTES) -> None:
        self._exact: dict[str, Matched] = {}
        self._by_first: dict[str, list[Matched]] = {}
        for route in routes:
            matched = Matched.of(route)
            if matched.parsers:
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
