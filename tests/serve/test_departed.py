"""Pods that just left, over HTTP (docs/architecture.md §3 rule 12): ``/ips/{ip}``,
``departed=1`` and ``at=`` on ``/pods/{uid}``, ``/containers/{id}`` and ``/ips/{ip}``, every
status they answer, and never a replay from the memo when the answer depends on ``at``.

Both ways in (podcache's server path and ASGI), as every test of ``test_app``."""

from __future__ import annotations

from datetime import UTC, datetime

from podcache import AsyncFakeRuntime, Container, ContainerID, ContainerState, Pod
from podcache.serve import App
from tests.serve.test_app import Clocks, call, entry_point, error

__all__ = ["entry_point"]  # the fixture, run for every test here

ID1 = "a1" * 32
ID2 = "b2" * 32


def pod(n: int, ip: str, created: float, cid: str) -> Pod:
    return Pod(
        id=f"uid-{n}",
        name=f"pod-{n}",
        namespace="default",
        created_at=int(created * 1e9),
        ips=(ip,),
        containers=[
            Container(id=ContainerID("containerd", cid), name="app", state=ContainerState.RUNNING)
        ],
    )


async def scene() -> tuple[App, Clocks, float, float]:
    """uid-1 held 10.0.0.1 and left; uid-2 holds it now, from 20 s after uid-1 left."""
    clocks = Clocks()
    created = clocks.wall() - 100.0
    runtime = AsyncFakeRuntime([pod(1, "10.0.0.1", created, ID1)])
    app = App(runtime, 10.0, clock=clocks.monotonic, wall=clocks.wall)
    assert (await call(app, "/pods")).status == 200
    clocks.now += 1.0
    runtime.set_pods([])
    assert (await call(app, "/pods", "fresh=1")).status == 200  # uid-1 leaves now
    left = clocks.wall()
    clocks.now += 20.0
    runtime.set_pods([pod(2, "10.0.0.1", clocks.wall(), ID2)])
    assert (await call(app, "/pods", "fresh=1")).status == 200
    return app, clocks, left, created


async def test_ips_answers_the_pod_holding_the_ip_now() -> None:
    app, _, _, _ = await scene()
    reply = await call(app, "/ips/10.0.0.1")
    assert reply.status == 200 and "x-podcache-departed" not in reply.headers
    assert reply.json()["pod"]["id"] == "uid-2" and reply.json()["ip"] == "10.0.0.1"
    v6 = await call(app, "/ips/fd00:0:0::1")  # IPv6 in the path, any spelling
    assert "fd00::1" in error(v6, 404)
    await app.aclose()


async def test_a_departed_pod_is_404_naming_when_it_left_unless_asked_for() -> None:
    app, _, left, _ = await scene()
    missing = await call(app, "/pods/uid-1")
    assert "left" in error(missing, 404)
    assert missing.json()["departed_at"].endswith("Z")
    asked = await call(app, "/pods/uid-1", "departed=1")
    assert asked.status == 200 and asked.headers["x-podcache-departed"] == "true"
    body = asked.json()
    assert body["pod"]["id"] == "uid-1" and body["departed_at"] == missing.json()["departed_at"]
    assert abs(_epoch(body["departed_at"]) - left) < 1e-3
    gone = await call(app, f"/containers/{ID1}", "departed=1")
    assert gone.status == 200 and gone.json()["container"]["id"] == f"containerd://{ID1}"
    by_prefix = await call(app, f"/containers/{ID1[:12]}", "departed=1")  # crictl's 12
    assert by_prefix.status == 200 and by_prefix.json()["container"]["id"] == f"containerd://{ID1}"
    nobody = await call(app, "/pods/uid-9", "departed=1")
    assert "nothing known held" in error(nobody, 404)
    await app.aclose()


async def test_at_answers_who_held_an_ip_then_and_a_reused_ip_not_before_its_holder() -> None:
    app, _, left, created = await scene()
    then = await call(app, "/ips/10.0.0.1", f"at={left - 5.0:.3f}")
    assert then.status == 200 and then.json()["pod"]["id"] == "uid-1"
    assert then.headers["x-podcache-departed"] == "true"
    between = await call(app, "/ips/10.0.0.1", f"at={left + 5.0:.3f}")  # nobody held it
    assert "at " in error(between, 404)
    rfc = _rfc3339(left + 30.0)
    now = await call(app, "/ips/10.0.0.1", f"at={rfc}")
    assert now.status == 200 and now.json()["pod"]["id"] == "uid-2"
    assert now.json()["departed_at"] is None and "x-podcache-departed" not in now.headers
    before = await call(app, "/pods/uid-1", f"at={created - 1.0:.3f}")  # not yet created
    error(before, 404)
    await app.aclose()


async def test_answers_that_depend_on_at_are_never_replayed_from_the_memo() -> None:
    app, clocks, left, _ = await scene()
    query = f"at={left - 5.0:.3f}"
    first = await call(app, "/ips/10.0.0.1", query)
    assert first.status == 200
    assert all("at=" not in target for target in app.memo.answers)  # type: ignore[union-attr]
    missing = await call(app, "/pods/uid-1")
    assert missing.status == 404
    assert "/pods/uid-1" not in app.memo.answers  # type: ignore[union-attr]
    clocks.now += 500.0  # past departed_for (300 s): forgotten, and the 404 says nothing more
    assert (await call(app, "/pods", "fresh=1")).status == 200
    forgotten = await call(app, "/pods/uid-1")
    assert "departed_at" not in forgotten.json() and forgotten.status == 404
    await app.aclose()


async def test_bad_at_departed_and_ips_are_400_naming_them() -> None:
    app, _, _, _ = await scene()
    for path, query, words in (
        ("/pods/uid-1", "at=yesterday", "at must be"),
        ("/pods/uid-1", "at=2026-12-02T01:02:03", "at must be"),  # no offset
        ("/ips/10.0.0.1", "at=1e9", "at must be"),
        ("/containers/" + ID1, "departed=maybe", "departed must be"),
        ("/ips/10.0.0.256", "", "not an IP address"),
        ("/ips/fe80::1%25eth0", "", "not an IP address"),
        ("/ips/10.0.0.0%2F8", "", "not an IP address"),
        ("/pods/uid-1", "at=1&at=2", "at"),
    ):
        reply = await call(app, path, query)
        assert words in error(reply, 400), (path, query)
    await app.aclose()


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


async def test_an_ipv4_mapped_address_in_the_path_is_the_ipv4_address() -> None:
    """``/ips/::ffff:10.0.0.1`` answers as ``/ips/10.0.0.1``, now and with ``at``."""
    app, _, left, _ = await scene()
    for spelling in ("::ffff:10.0.0.1", "::FFFF:a00:1", "0:0:0:0:0:ffff:10.0.0.1"):
        now = await call(app, f"/ips/{spelling}")
        assert now.status == 200 and now.json()["pod"]["id"] == "uid-2", spelling
        assert now.json()["ip"] == "10.0.0.1"
        then = await call(app, f"/ips/{spelling}", f"at={left - 5.0:.3f}")
        assert then.status == 200 and then.json()["pod"]["id"] == "uid-1", spelling
    await app.aclose()


async def test_an_unencoded_plus_in_at_is_read_as_the_offsets_sign() -> None:
    """``at=...+00:00`` typed unencoded arrives with a space for the ``+``."""
    app, _, left, _ = await scene()
    moment = datetime.fromtimestamp(left - 5.0, UTC).isoformat()  # ends "+00:00"
    assert moment.endswith("+00:00")
    then = await call(app, "/ips/10.0.0.1", f"at={moment}")
    assert then.status == 200 and then.json()["pod"]["id"] == "uid-1"
    bad = await call(app, "/ips/10.0.0.1", "at=2026-12-03T12:36:50*00:00")
    assert "2026-12-02T01:02:03Z" in error(bad, 400) and error(bad, 400).startswith("at ")
    await app.aclose()


async def test_keys_a_running_pod_let_go_are_answered_with_held_until_and_departed_at_null() -> (
    None
):
    """A crashed container of a running pod (the ready view stops listing it) and
    an IP the pod no longer holds are remembered without the pod leaving: 404 unasked (never the
    pod "holding" them now), 200 with departed=1, its departed_at null and held_until set."""
    clocks = Clocks()
    created = clocks.wall() - 100.0
    runtime = AsyncFakeRuntime([pod(1, "10.0.0.1", created, ID1)])
    app = App(runtime, 10.0, clock=clocks.monotonic, wall=clocks.wall)
    assert (await call(app, "/pods")).status == 200
    clocks.now += 1.0
    restarted = pod(1, "10.0.0.2", created, ID2)  # a new attempt, and a new IP
    runtime.set_pods([restarted])
    assert (await call(app, "/pods", "fresh=1")).status == 200
    let_go = clocks.wall()
    for path in (f"/containers/{ID1}", "/ips/10.0.0.1"):
        unasked = await call(app, path)
        assert "still listed" in error(unasked, 404), path
        assert abs(_epoch(unasked.json()["held_until"]) - let_go) < 1e-3
        assert "departed_at" not in unasked.json()
        asked = await call(app, path, "departed=1")
        assert asked.status == 200 and asked.headers["x-podcache-departed"] == "true", path
        body = asked.json()
        assert body["pod"]["id"] == "uid-1" and body["departed_at"] is None
        assert abs(_epoch(body["held_until"]) - let_go) < 1e-3
    held = await call(app, f"/containers/{ID2}", "departed=1")
    assert held.status == 200 and held.json()["held_until"] is None
    assert "x-podcache-departed" not in held.headers
    await app.aclose()


async def test_a_prefix_a_listed_and_a_departed_id_share_is_409_listing_both() -> None:
    app, _, _, _ = await scene()  # ID1 departed, ID2 listed; both start with their own digits
    shared = await call(app, "/containers/a1a1", "departed=1")
    assert shared.status == 200  # only ID1 starts so
    clocks = Clocks()
    runtime = AsyncFakeRuntime([pod(1, "10.0.0.1", clocks.wall(), "ab" + "1" * 62)])
    other = App(runtime, 10.0, clock=clocks.monotonic, wall=clocks.wall)
    assert (await call(other, "/pods")).status == 200
    runtime.set_pods([pod(2, "10.0.0.2", clocks.wall(), "ab" + "2" * 62)])
    clocks.now += 1.0
    assert (await call(other, "/pods", "fresh=1")).status == 200
    both = await call(other, "/containers/ab", "departed=1")
    assert "at least 4" in error(both, 400)
    both = await call(other, "/containers/ab11", "departed=1")
    assert both.status == 200
    runtime.set_pods(
        [
            pod(2, "10.0.0.2", clocks.wall(), "ab" + "2" * 62),
            pod(3, "10.0.0.3", clocks.wall(), "ab11" + "3" * 60),
        ]
    )
    clocks.now += 1.0
    assert (await call(other, "/pods", "fresh=1")).status == 200
    ambiguous = await call(other, "/containers/ab11", "departed=1")
    assert "ambiguous" in error(ambiguous, 409)
    assert sorted(ambiguous.json()["matches"]) == ["ab" + "1" * 62, "ab11" + "3" * 60]
    assert (await call(other, "/containers/ab11")).status == 200  # the listed one alone
    await app.aclose()
    await other.aclose()
