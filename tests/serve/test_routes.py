"""The route table (``serve.routes.ROUTES``) is the API: every row is in the served OpenAPI
document and in ``podcache serve --help``, and nothing else is; the router finds each row by
its template, and takes exactly the query parameters the document gives it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from click.testing import CliRunner

from podcache import AsyncFakeRuntime, Container, ContainerID, Pod
from podcache.serve import App, serve_command
from podcache.serve.auth import BearerAuth
from podcache.serve.router import Router
from podcache.serve.routes import ROUTES

TOKEN = b"0123456789abcdef0123"
TEMPLATES = [route.template for route in ROUTES]
EXAMPLES = {
    "uid": "uid-a",
    "namespace": "default",
    "name": "web",
    "id": "containerd://cccc1111",
    "ip": "10.0.0.7",
    "pid": "1",
}
"""A value for each path parameter of the table (a new one fails ``test_the_router_...``)."""


async def served(auth: BearerAuth | None) -> dict[str, Any]:
    container = Container(id=ContainerID("containerd", "cccc1111"))
    pod = Pod(id="uid-a", name="web", namespace="default", containers=[container])
    app = App(AsyncFakeRuntime([pod]), 60.0, auth=auth)
    headers = [] if auth is None else [("authorization", f"Bearer {TOKEN.decode()}")]
    try:
        response = await app.respond("GET", "/openapi.json", "", headers)
    finally:
        await app.aclose()
    assert response.status == 200
    document: dict[str, Any] = json.loads(response.body)
    return document


def test_the_table_has_one_row_per_template() -> None:
    assert len(set(TEMPLATES)) == len(TEMPLATES) == 10


@pytest.mark.parametrize("auth", [None, BearerAuth(TOKEN)], ids=["open", "token"])
async def test_the_served_document_has_every_row_and_nothing_else(
    auth: BearerAuth | None,
) -> None:
    document = await served(auth)
    assert list(document["paths"]) == TEMPLATES
    for route in ROUTES:
        operation = document["paths"][route.template]
        assert list(operation) == ["get"]
        get = operation["get"]
        assert get["summary"] == route.summary
        names = [(p["name"], p["in"]) for p in get.get("parameters", [])]
        assert names == [(p.name, p.where) for p in route.params]
        assert (get.get("security") == []) == (auth is not None and route.open)
        assert ("401" in get["responses"]) == (auth is not None and not route.open)
        assert ("304" in get["responses"]) == route.revalidated
        assert set(route.errors) <= set(get["responses"])


def test_the_help_lists_every_row_and_nothing_else() -> None:
    text = CliRunner().invoke(serve_command, ["--help"], terminal_width=200).output
    description = text.split("\nOptions:", 1)[0]
    listed = re.findall(r"^\s+(/\S*)\s+(.+)$", description, re.M)
    assert listed == [(route.template, route.help) for route in ROUTES]
    mentioned = re.findall(r"(?<![\w:])/[\w.{}/]+", description)
    assert sorted(mentioned) == sorted(TEMPLATES)


@pytest.mark.parametrize("route", ROUTES, ids=TEMPLATES)
def test_the_router_finds_each_row_and_takes_its_documented_query(route: Any) -> None:
    path = re.sub(r"\{(\w+)\}", lambda name: EXAMPLES[name[1]], route.template)
    matched, args = Router().find(path)
    assert matched.route is route
    assert len(args) == len([p for p in route.params if p.where == "path"])
    assert matched.allowed == {p.name for p in route.params if p.where == "query"}
