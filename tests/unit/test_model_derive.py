"""``model.derive`` and ``podrelists.replace_pod`` against a PodList built from scratch: the
tables carried across a one-pod change (``by_ip``'s too) answer every lookup as freshly built
ones do, and the pods keep the getters' order (docs/architecture.md §7 rule 5). The same for
``model.carry_tables`` across a full listing's many changes (§5 item 4)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podcache import Container, ContainerID, ContainerState, Pod, PodList
from podcache.cache.changes import ChangeLog, moved
from podcache.cache.podrelists import replace_pod
from podcache.model import carry_tables


def pod(n: int, version: int, created: int, containers: int) -> Pod:
    return Pod(
        id=f"uid-{n}",
        name=f"pod-{n % 5}",  # names repeat across namespaces
        namespace=f"ns-{n % 3}",
        created_at=created,
        # Few addresses for many pods (reuse, several holders); version 4 is a host-network pod.
        ips=[f"10.0.0.{(n + version) % 6}", f"fd00::{n % 4}"],
        host_network=version == 4,
        containers=[
            Container(
                id=ContainerID("containerd", f"{n:03x}{version:03x}{i:02x}" + "a" * 56),
                name=f"c{i}",
                state=ContainerState.RUNNING,
            )
            for i in range(containers)
        ],
    )


def ordered(pods: list[Pod]) -> PodList:
    return PodList(sorted(pods, key=lambda p: (-p.created_at, p.id)))


pod_specs = st.dictionaries(
    st.integers(0, 15), st.tuples(st.integers(0, 4), st.integers(0, 6), st.integers(0, 3))
)


def lookups(pods: PodList, probes: list[str]) -> list[object]:
    answers: list[object] = []
    for probe in probes:
        answers.append(pods.by_uid(probe))
        answers.append(pods.by_full_name(probe))
        answers.append(pods.by_ip(f"10.0.0.{len(answers) % 7}"))
        answers.append(pods.by_ip(f"FD00::{len(answers) % 5}"))
        try:
            answers.append(pods.by_container_id(probe))
        except (LookupError, ValueError) as exc:
            answers.append(type(exc))
    return answers


@settings(max_examples=600, deadline=None)
@given(
    specs=pod_specs,
    target=st.integers(0, 15),
    change=st.one_of(st.none(), st.tuples(st.integers(0, 4), st.integers(0, 6), st.integers(0, 3))),
    build_tables=st.booleans(),
)
def test_a_derived_podlist_answers_as_one_built_from_scratch(
    specs: dict[int, tuple[int, int, int]],
    target: int,
    change: tuple[int, int, int] | None,
    build_tables: bool,
) -> None:
    before = ordered([pod(n, *spec) for n, spec in specs.items()])
    probes = [p.id for p in before] + [f"pod-{k}_ns-{j}" for k in range(5) for j in range(3)]
    probes += [c.id.id for p in before for c in p.containers] + [
        c.id.id[:6] for p in before for c in p.containers
    ]
    probes += ["uid-99", "ffff", "containerd://" + "0" * 64]
    if build_tables:
        lookups(before, probes)  # every table built, so derive carries them
    was = before.by_uid(f"uid-{target}")
    new = None if change is None else pod(target, *change)
    if was is None and new is None:
        return
    after = replace_pod(before, was, new)
    expected = ordered([p for p in before if p is not was] + ([] if new is None else [new]))
    assert after == expected  # the pods, in the getters' order
    probes += [] if new is None else [c.id.id for c in new.containers]
    assert lookups(after, probes) == lookups(expected, probes)


def test_removing_the_newest_of_two_claimants_leaves_the_other_found() -> None:
    """A full name (an old and a new pod of one name) or an IP (reused while its old holder is
    still listed) claimed twice: removing the newest claimant must not lose the other."""
    new = Pod(id="uid-new", name="web", namespace="ns", created_at=5, ips=["10.0.0.9"])
    old = Pod(id="uid-old", name="web", namespace="ns", created_at=1, ips=["10.0.0.9"])
    before = PodList([new, old])
    assert before.by_full_name("web_ns") is new and before.by_ip("10.0.0.9") is new
    after = replace_pod(before, new, None)
    assert after.by_full_name("web_ns") is old
    assert after.by_ip("10.0.0.9") is old


spec_tuples = st.tuples(st.integers(0, 4), st.integers(0, 6), st.integers(0, 3))


def all_probes(pods: PodList) -> list[str]:
    probes = [p.id for p in pods] + [f"pod-{k}_ns-{j}" for k in range(5) for j in range(3)]
    probes += [c.id.id for p in pods for c in p.containers]
    probes += [c.id.id[:6] for p in pods for c in p.containers]
    return [*probes, "uid-99", "ffff", "containerd://" + "0" * 64]


@settings(max_examples=600, deadline=None)
@given(
    specs=st.dictionaries(st.integers(0, 15), spec_tuples),
    changes=st.dictionaries(st.integers(0, 15), st.one_of(st.none(), spec_tuples)),
    build_tables=st.booleans(),
)
def test_tables_carried_across_many_changes_answer_as_ones_built_from_scratch(
    specs: dict[int, tuple[int, int, int]],
    changes: dict[int, tuple[int, int, int] | None],
    build_tables: bool,
) -> None:
    """A full listing's snapshot given the last one's tables, changed by every pod that left
    and arrived (several at once, keys moving between them, reused IPs and names), answers
    every lookup as a snapshot whose tables are built from its pods."""
    before = ordered([pod(n, *spec) for n, spec in specs.items()])
    if build_tables:
        lookups(before, all_probes(before))
    kept = [p for p in before if int(p.id.removeprefix("uid-")) not in changes]
    came = [pod(n, *spec) for n, spec in changes.items() if spec is not None]
    after = ordered(kept + came)
    arrivals, departures = moved(before.pods, after.pods)
    carry_tables(before, after, departures, arrivals)
    expected = ordered(kept + came)
    probes = all_probes(before) + all_probes(expected)
    assert lookups(after, probes) == lookups(expected, probes)


def test_a_published_listing_carries_the_tables_so_its_first_lookup_builds_none() -> None:
    """Through ``ChangeLog.publish`` (a full listing's path): the new snapshot holds the last
    one's tables with the changed pod's keys moved, the sorted IDs too; a snapshot
    whose predecessor built none gets none (built on first use)."""
    log = ChangeLog()
    first = ordered([pod(n, 0, n, 2) for n in range(6)])
    log.publish(first, 1.0)
    second = ordered([p for p in first if p.id != "uid-3"] + [pod(3, 1, 3, 3)])
    assert log.publish(second, 2.0)[0]._index is None  # nothing was built before it
    lookups(second, all_probes(second))
    third = ordered([p for p in second if p.id != "uid-4"] + [pod(4, 2, 4, 1)])
    published, _ = log.publish(third, 3.0)
    index = published._index
    assert index is not None
    # by_ip is not carried here: these pods share addresses (a key held twice, rule of _swap)
    assert index._by_id is not None and index._by_uid is not None
    assert index._sorted_ids is not None
    fresh = ordered(list(third))
    probes = all_probes(second) + all_probes(fresh)
    assert lookups(published, probes) == lookups(fresh, probes)
