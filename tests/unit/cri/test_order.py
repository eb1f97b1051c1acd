"""Ordering a refresh's items newest first, and releasing its rows, off the GIL's hot path.

``_wire.newest_first`` orders long lists with the GIL released (docs/architecture.md §4): it
must give exactly the reference order (newest first, then ID by code point, then position,
i.e. what stable sorts give) on every input; ``convert._ordered`` must give the same with and
without the extension, and so must whole conversions large enough to take the C path.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podcache.cri import convert
from podcache.cri.convert import (
    ORDER_IN_C_FROM,
    WIRE_READER,
    Listing,
    build_pods,
    pods_from_listings,
    read_containers,
    read_sandboxes,
)
from podcache.model import Pod
from tests.unit.cri.test_convert import RT, container, sandbox

needs_c = pytest.mark.skipif(WIRE_READER != "c", reason="the C extension is not built here")

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def reference_order(created: Sequence[int], ids: Sequence[str]) -> list[int]:
    """The specification: newest first, then by ID (Python's str order), then by position."""
    return sorted(range(len(created)), key=lambda i: (-created[i], ids[i], i))


def wire() -> convert._CReader:
    assert convert._WIRE is not None
    return convert._WIRE


# Few distinct times and IDs make ties likely; any str without lone surrogates has UTF-8.
times = st.one_of(st.integers(0, 3), st.integers(INT64_MIN, INT64_MAX))
ids = st.one_of(
    st.sampled_from(["", "a", "b", "ab", "é", "\U0001f600", "z" * 70]),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=12),
)


@needs_c
@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(times, ids), max_size=300))
def test_c_order_is_the_reference_order(items: list[tuple[int, str]]) -> None:
    created = [when for when, _ in items]
    names = [name for _, name in items]
    assert wire().newest_first(created, names) == reference_order(created, names)


@needs_c
def test_c_order_accepts_the_int64_bounds_and_any_sequence() -> None:
    created = (INT64_MIN, INT64_MAX, 0, INT64_MAX)
    names = ("a", "b", "c", "a")
    assert wire().newest_first(created, names) == [3, 1, 2, 0]
    assert wire().newest_first([], []) == []


@needs_c
@pytest.mark.parametrize(
    ("created", "names", "error"),
    [
        ([INT64_MAX + 1], ["a"], OverflowError),
        ([INT64_MIN - 1], ["a"], OverflowError),
        ([1], ["\ud800"], UnicodeEncodeError),
        ([1], [b"a"], TypeError),
        (["1"], ["a"], TypeError),
        ([1, 2], ["a"], ValueError),
    ],
)
def test_c_order_rejects_what_it_cannot_order(
    created: list[object], names: list[object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        wire().newest_first(created, names)  # type: ignore[arg-type]


@needs_c
def test_c_order_lets_other_threads_run_while_it_sorts() -> None:
    """With a switch interval of a minute, the main thread gets the GIL back before the
    worker's call returns only if the call lets it go (the sort); held throughout, the
    worker would end first."""
    count = 300_000
    created = [(i * 7919) % 1000 for i in range(count)]
    names = [f"{(i * 104729) % count:08d}" for i in range(count)]
    started = threading.Event()
    finished: list[bool] = []

    def work() -> None:
        started.set()
        wire().newest_first(created, names)
        finished.append(True)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(60)
    try:
        worker = threading.Thread(target=work)
        worker.start()
        started.wait()
        finished_when_main_ran = bool(finished)
        worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert finished == [True]
    assert not finished_when_main_ran


def pods(created: Sequence[int], names: Sequence[str]) -> list[Pod]:
    return [
        Pod(id=name, name="p", namespace="ns", created_at=when)
        for when, name in zip(created, names, strict=True)
    ]


@needs_c
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(times, ids), min_size=ORDER_IN_C_FROM, max_size=ORDER_IN_C_FROM + 80))
def test_ordered_is_the_same_with_and_without_the_extension(items: list[tuple[int, str]]) -> None:
    unordered = pods([when for when, _ in items], [name for _, name in items])
    with_c = convert._ordered(list(unordered))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(convert, "_WIRE", None)
        without_c = convert._ordered(list(unordered))
    assert [id(pod) for pod in with_c] == [id(pod) for pod in without_c]
    expected = reference_order([p.created_at for p in unordered], [p.id for p in unordered])
    assert with_c == [unordered[i] for i in expected]


def large_listing() -> tuple[list, list]:  # type: ignore[type-arg]
    """Enough pods, and containers in one pod, to take the C path, with many tied times."""
    sandboxes = [
        sandbox(f"s{i:03d}", uid=f"u{i % 90:02d}", created_at=(i * 37) % 5) for i in range(200)
    ]
    containers = [
        container(f"c{i:03d}", uid="u00" if i < 100 else f"u{i % 90:02d}", created_at=i % 3)
        for i in range(300)
    ]
    return sandboxes, containers


@needs_c
def test_conversions_on_the_c_path_equal_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    sandboxes, containers = large_listing()
    with_c = build_pods(RT, sandboxes, containers)
    assert len(with_c) >= ORDER_IN_C_FROM
    biggest = with_c.by_uid("u00")
    assert biggest is not None and len(biggest.containers) >= ORDER_IN_C_FROM
    monkeypatch.setattr(convert, "_WIRE", None)
    assert build_pods(RT, sandboxes, containers) == with_c


def test_release_empties_a_listing_and_leaves_its_pods_whole() -> None:
    from podcache.cri.proto import api_pb2 as pb

    sandboxes, containers = large_listing()
    sandbox_listing = read_sandboxes(pb.ListPodSandboxResponse(items=sandboxes).SerializeToString())
    container_listing = read_containers(
        pb.ListContainersResponse(containers=containers).SerializeToString()
    )
    result = pods_from_listings(RT, sandbox_listing, container_listing)
    sandbox_listing.release()
    container_listing.release()
    assert len(sandbox_listing) == 0 and len(container_listing) == 0
    assert result == build_pods(RT, sandboxes, containers)


def test_release_frees_rows_a_slice_at_a_time() -> None:
    rows = list(range(convert.RELEASE_SLICE * 3 + 5))
    seen: list[int] = []

    class Counting(list):  # type: ignore[type-arg]
        def __delitem__(self, index: object) -> None:
            seen.append(len(self))
            super().__delitem__(index)  # type: ignore[arg-type]

    listing = Listing(Counting(rows), convert._WIRE_ROWS)
    listing.release()
    assert len(listing) == 0
    assert seen == [len(rows) - k * convert.RELEASE_SLICE for k in range(4)]
