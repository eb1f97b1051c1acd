"""The CRI socket's ID prefixes cost their matches, never a walk of the node per match
(docs/architecture.md §10 rule 3): a short prefix matching many items of both kinds is
resolved without iterating the snapshot's pods."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from podcache.cri import CRIRuntime
from podcache.model import PodList
from podcache.serve.crisock import lists
from podcache.sim import SimRuntime


@pytest.fixture(scope="module")
def pods() -> PodList:
    with SimRuntime(200, seed=3) as sim, sim.pause_churn(), CRIRuntime(sim.endpoint) as runtime:
        return runtime.get_pods(True)


def test_a_short_prefix_never_walks_the_pods(
    pods: PodList, monkeypatch: pytest.MonkeyPatch
) -> None:
    walks = 0
    iterate = PodList.__iter__

    def counted(self: PodList) -> Iterator[object]:
        nonlocal walks
        walks += 1
        return iterate(self)

    monkeypatch.setattr(PodList, "__iter__", counted)
    for prefix in "0123456789abcdef":
        for kind in (lists.SANDBOX, lists.CONTAINER):
            lists._resolve(pods, kind, prefix)  # many matches of both kinds: ambiguous
    sandbox = next(p for p in iterate(pods) if p.sandboxes).sandboxes[0].id.id
    found = lists._resolve(pods, lists.SANDBOX, sandbox[:20])
    assert found is not None
    assert found[1].id.id == sandbox
    assert lists._resolve(pods, lists.CONTAINER, sandbox[:20]) is None
    assert walks == 0
