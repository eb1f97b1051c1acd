"""A snapshot's view is built when asked, or off the event loop when its publish changed many
pods, and reuses the JSON of pods a refresh handed over unchanged (the
publish hook, docs/architecture.md §3 rule 10)."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from typing import Any

import msgspec
import pytest

from podcache import AsyncFakeRuntime, Container, ContainerID, ContainerState, Pod, PodList
from podcache.jsonview import pod_to_json
from podcache.serve import App
from podcache.serve import snapshot as snapshot_module
from podcache.serve import views as views_module
from podcache.serve.snapshot import SnapshotView


def make_pod(n: int) -> Pod:
    return Pod(
        id=f"uid-{n}",
        name=f"pod-{n}",
        namespace="default",
        created_at=n,
        containers=[
            Container(
                id=ContainerID("containerd", f"{n:08x}" * 8),
                name="app",
                state=ContainerState.RUNNING,
            )
        ],
    )


def counting_pod_to_json(monkeypatch: pytest.MonkeyPatch) -> list[Pod]:
    encoded: list[Pod] = []

    def counted(pod: Pod) -> dict[str, Any]:
        encoded.append(pod)
        return pod_to_json(pod)

    monkeypatch.setattr(snapshot_module, "pod_to_json", counted)
    return encoded


def test_view_items_are_the_lists_encoding_and_unchanged_pods_are_not_encoded_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded = counting_pod_to_json(monkeypatch)
    kept = [make_pod(n) for n in range(5)]
    first = SnapshotView(PodList(kept), 1.0, 1.0)
    assert encoded == []  # made, not built: nothing read
    first.build()
    assert len(encoded) == 5
    changed = make_pod(9)
    pods = PodList([kept[0], changed, kept[2], make_pod(3), kept[4]])  # 3 kept objects
    encoded.clear()
    second = SnapshotView(pods, 2.0, 2.0, previous=first)
    assert not second.ready
    second.build()
    assert encoded == [changed, pods[3]]  # a new object is encoded, even with equal content
    items = msgspec.json.encode({"items": [pod_to_json(pod) for pod in pods]})[:-1]
    assert second.items_head.startswith(items + b',"cache_time":')
    same = SnapshotView(pods, 2.0, 2.0)
    assert same.etag == second.etag


@pytest.mark.parametrize("count", [0, 1, 2])
def test_items_of_small_lists_are_valid_json(count: int) -> None:
    pods = PodList([make_pod(n) for n in range(count)])
    view = SnapshotView(pods, 1.0, 1.0)
    document = msgspec.json.decode(view.items_head + b"0.000}")
    assert document["items"] == [pod_to_json(pod) for pod in pods]
    assert document["age_seconds"] == 0.0


def test_a_pod_listed_twice_is_in_the_items_twice() -> None:
    pod = make_pod(1)
    view = SnapshotView(PodList([pod, pod]), 1.0, 1.0)
    document = msgspec.json.decode(view.items_head + b"0.000}")
    assert [item["id"] for item in document["items"]] == ["uid-1", "uid-1"]


async def test_the_app_builds_big_publishes_views_in_a_worker_thread_small_ones_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built_in: list[tuple[int, threading.Thread]] = []
    original = SnapshotView.build

    def recording(self: SnapshotView, *, body: bool = False) -> None:
        if not self.ready:
            built_in.append((len(self.pods), threading.current_thread()))
        original(self, body=body)

    monkeypatch.setattr(SnapshotView, "build", recording)
    monkeypatch.setattr(views_module, "BUILD_OFF_LOOP", 3)
    runtime = AsyncFakeRuntime([make_pod(n) for n in range(3)])
    app = App(runtime, 60.0)
    for path in ("/pods", "/pods/uid-1", "/containers/00000001", "/readyz"):
        response = await app.respond("GET", path.split("?")[0], path.partition("?")[2], [])
        assert response.status == 200, response.body
    runtime.set_pods([make_pod(n) for n in range(4)])  # one pod more: one change
    response = await app.respond("GET", "/pods", "fresh=1", [])
    assert response.status == 200 and response.body.count(b'"uid-') == 4
    await app.aclose()
    assert runtime.calls == 2
    loop_thread = threading.current_thread()
    # A listing of 3 pods (not past 3): on first use, on the loop; a listing of 4 (past it,
    # though it changed one): in a worker thread before any request used it, since a listing
    # may hand over new objects with the same content.
    assert [(size, thread is loop_thread) for size, thread in built_in] == [(3, True), (4, False)]


def test_the_same_pods_again_keep_the_etag_without_encoding_or_hashing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pods = [make_pod(n) for n in range(4)]
    first = SnapshotView(PodList(pods), 1.0, 1.0)
    first.build()
    hashed: list[int] = []
    blake2b = hashlib.blake2b

    def measured(data: bytes, **kwargs: Any) -> Any:
        hashed.append(len(data))
        return blake2b(data, **kwargs)

    monkeypatch.setattr(hashlib, "blake2b", measured)
    encoded = counting_pod_to_json(monkeypatch)
    again = SnapshotView(PodList(list(pods)), 2.0, 2.0, previous=first)  # a new list, same pods
    assert again.etag == first.etag
    assert again.items_head != first.items_head  # its own cache_time
    assert encoded == [] and hashed == [8 * len(pods)]  # the pods' digests only
    monkeypatch.undo()
    for changed in (pods[:3], [*pods[:3], make_pod(3)], pods[::-1]):
        view = SnapshotView(PodList(changed), 3.0, 3.0, previous=first)
        assert view.etag == SnapshotView(PodList(changed), 3.0, 3.0).etag  # hashed afresh
        assert view.etag != first.etag or changed == pods


async def test_only_the_current_snapshots_view_keeps_its_body() -> None:
    """The application keeps the views of the last ``RECENT_VIEWS`` publications,
    and each kept its whole-list body (about 6 MB at 5,000 pods: 99 MiB of serve's heap after
    25 listings). A view gives up its body and answers when a newer one takes over."""
    runtime = AsyncFakeRuntime([make_pod(n) for n in range(3)])
    app = App(runtime, 60.0)
    for round in range(views_module.RECENT_VIEWS + 4):
        runtime.set_pods([make_pod(n) for n in range(3 + round % 2)])
        response = await app.respond("GET", "/pods", "fresh=1", [])
        again = await app.respond("GET", "/pods", "", [])  # kept in the memo
        assert response.status == again.status == 200
    views = list(app.views.recent)
    assert len(views) == views_module.RECENT_VIEWS
    current = app.memo
    assert current is views[-1] and current._items_head and current.answers
    assert [(bool(view._items_head), bool(view.answers)) for view in views[:-1]] == [
        (False, False)
    ] * (len(views) - 1)
    await app.aclose()


def test_a_retired_view_answers_a_late_request_with_its_own_body_without_encoding_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pods = [make_pod(n) for n in range(4)]
    first = SnapshotView(PodList(pods), 1.0, 1.0)
    body, etag = first.items_head, first.etag
    SnapshotView(PodList([*pods, make_pod(9)]), 2.0, 2.0, previous=first).build()
    first.retire()
    encoded = counting_pod_to_json(monkeypatch)
    assert first.items_head == body and first.etag == etag
    assert encoded == []  # the pods' JSON was kept: joined again, nothing encoded


async def test_a_filtered_answer_hashes_the_pods_but_never_joins_the_body(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The list body (6 MB at 5,000 pods) is joined only for an answer that carries it: a
    filtered /pods after a publish of one pod needs the ETag alone."""
    joined: list[int] = []
    original = SnapshotView._body

    def recording(self: SnapshotView, entries: list[Any]) -> bytes:
        joined.append(len(entries))
        return original(self, entries)

    monkeypatch.setattr(SnapshotView, "_body", recording)
    runtime = AsyncFakeRuntime([make_pod(n) for n in range(3)])
    app = App(runtime, 60.0)
    for query in ("namespace=nosuch", "fresh=1&namespace=nosuch"):
        response = await app.respond("GET", "/pods", query, [])
        assert response.status == 200 and "etag" in dict(response.headers)
        runtime.set_pods([make_pod(n) for n in range(4)])
    assert joined == []
    response = await app.respond("GET", "/pods", "", [])
    assert response.status == 200 and response.body.count(b'"uid-') == 4
    assert joined == [4]
    await app.aclose()


async def test_a_small_publish_during_a_big_ones_build_is_built_after_it_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cold start publishes the node (built in a worker thread); a relist of one pod may
    publish again before that build ends. The small publish's view lacked every pod's JSON then
    (its predecessor not built yet), and it was built on the loop: the node encoded there, a
    stall of tens of ms at 5,000 pods. Now it waits for the big build and encodes its one pod
    in a worker thread too; the first request's view is never built twice."""
    gate = threading.Event()
    built_in: list[tuple[int, bool]] = []
    original = SnapshotView.build

    def recording(self: SnapshotView, *, body: bool = False) -> None:
        if not self.ready:
            if len(self.pods) == 4:
                assert gate.wait(30)  # the big build: held until the small publish came
            built_in.append((len(self.pods), threading.current_thread() is loop_thread))
        original(self, body=body)

    loop_thread = threading.current_thread()
    monkeypatch.setattr(SnapshotView, "build", recording)
    monkeypatch.setattr(views_module, "BUILD_OFF_LOOP", 3)  # 4 pods: off the loop; 3: not
    encoded = counting_pod_to_json(monkeypatch)
    pods = [make_pod(n) for n in range(4)]
    runtime = AsyncFakeRuntime(pods)
    app = App(runtime, 60.0)
    first = asyncio.ensure_future(app.respond("GET", "/pods", "", []))
    while app.memo is None:  # the big publish happened; its build waits at the gate
        await asyncio.sleep(0)
    runtime.set_pods([*pods[:2], make_pod(9)])  # two of the same objects and a new one
    second = asyncio.ensure_future(app.respond("GET", "/pods", "fresh=1", []))
    while len(app.views.recent) < 2:  # the small publish happened
        await asyncio.sleep(0)
    gate.set()
    one, two = await first, await second
    await app.aclose()
    assert one.status == two.status == 200
    assert one.body.count(b'"uid-') == 4 and two.body.count(b'"uid-') == 3
    assert built_in == [(4, False), (3, False)]  # each built once, both in a worker thread
    assert [pod.id for pod in encoded] == ["uid-0", "uid-1", "uid-2", "uid-3", "uid-9"]
