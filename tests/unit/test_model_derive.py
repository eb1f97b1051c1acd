"""``model.derive`` and ``podrelists.replace_pod`` against a PodList built from scratch: the
tables carried across a one-pod change (``by_ip``'s too) answer every lookup as freshly built
ones do, and the pods keep the getters' order (docs/architecture.md §7 rule 5)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podcache import Container, ContainerID, ContainerState, Pod, PodList
from podcache.cache.podrelists import replace_pod


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
