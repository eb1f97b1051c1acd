"""``SortedIDs`` against a sorted list of the same strings (``cache/sortedids.py``): every
operation, and the invariants its docstring states, after each step; blocks split and empty
at a small ``LOAD``."""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from podcache.cache import sortedids
from podcache.cache.sortedids import SortedIDs

ids = st.text(alphabet="0123abc", min_size=1, max_size=5)
ops = st.lists(st.tuples(st.sampled_from(["add", "discard", "prefixed"]), ids), max_size=200)


@settings(max_examples=200, deadline=None)
@given(ops=ops, limit=st.integers(1, 6))
def test_sorted_ids_hold_what_a_sorted_list_holds(ops: list[tuple[str, str]], limit: int) -> None:
    saved, sortedids.LOAD = sortedids.LOAD, 2  # blocks of at most 4: splits and empties often
    try:
        check(ops, limit)
    finally:
        sortedids.LOAD = saved


def check(ops: list[tuple[str, str]], limit: int) -> None:
    index = SortedIDs()
    model: list[str] = []
    for op, value in ops:
        if op == "add":
            index.add(value)
            if value not in model:
                bisect.insort(model, value)
        elif op == "discard":
            index.discard(value)
            if value in model:
                model.remove(value)
        else:
            expected = [m for m in model if m.startswith(value)][:limit]
            assert index.prefixed(value, limit) == expected
        assert list(index) == model and len(index) == len(model)
        assert (value in index) == (value in model)
        blocks = index._blocks
        assert all(blocks) and all(len(b) <= 2 * sortedids.LOAD for b in blocks)
        assert index._maxes == [b[-1] for b in blocks]
