"""Property tests: cgroup paths drawn from a model of how kubelets, runtimes and containers
make them; the parser's answer must be the model's. And arbitrary bytes never crash it."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from podcache.procs import CgroupOwner, owner_from_cgroup

HEX = "0123456789abcdef"
hex_ids = st.text(HEX, min_size=64, max_size=64)
uuids = st.uuids().map(str)
static_uids = st.text(HEX, min_size=32, max_size=32)
pod_uids = st.one_of(uuids, static_uids)
# Segments that are neither pods nor containers: names a cgroup_parent, a slice or a sub-cgroup
# may have (no 64-hex runs in the right shape, no "pod<uid>").
plain = st.one_of(
    st.sampled_from(
        [
            "kubepods",
            "burstable",
            "besteffort",
            "system.slice",
            "init.scope",
            "..",
            "kubepods.slice",
            "kubepods-burstable.slice",
            "user.slice",
            "docker",
            "podcachetest",
            "pod",
            "pods",
            "crio-conmon-x.scope",
        ]
    ),
    st.text("abcdefghijklmnopqrstuvwxyz.-_", min_size=1, max_size=12).filter(
        lambda s: not s.startswith("pod")
    ),
)


def _container_segment(cid: str, style: str) -> str:
    if style == "cgroupfs":
        return cid
    if style == "crio-cgroupfs":
        return f"crio-{cid}"
    return f"{style}-{cid}.scope"


def _pod_segment(uid: str, style: str) -> str:
    if style == "cgroupfs":
        return f"pod{uid}"
    return f"kubepods-{style}pod{uid.replace('-', '_')}.slice"


Token = tuple[str, str, str]
"""(segment text, what it is: "pod", "container" or "", the UID or ID it names)."""


@st.composite
def tokens(draw: st.DrawFn) -> list[Token]:
    """prefix (cgroup_parent, maybe a kind node) / [pod] / [container] / [anything below]."""
    out: list[Token] = [(s, "", "") for s in draw(st.lists(plain, max_size=4))]
    if draw(st.booleans()) and draw(st.booleans()):  # a node that is itself a container
        node = draw(hex_ids)
        at = draw(st.integers(0, len(out)))
        out.insert(
            at,
            (
                _container_segment(node, draw(st.sampled_from(["cgroupfs", "docker"]))),
                "container",
                node,
            ),
        )
    if draw(st.booleans()):
        uid = draw(pod_uids)
        style = draw(st.sampled_from(["cgroupfs", "", "burstable-"]))
        out.append((_pod_segment(uid, style), "pod", uid))
    if draw(st.booleans()):
        cid = draw(hex_ids)
        style = draw(
            st.sampled_from(
                ["cgroupfs", "crio-cgroupfs", "cri-containerd", "crio", "docker", "libpod"]
            )
        )
        out.append((_container_segment(cid, style), "container", cid))
        # Only a container's own sub-cgroups lie below it: anything, even pod-like names.
        below = draw(
            st.lists(
                st.one_of(
                    plain.map(lambda s: (s, "", "")),
                    hex_ids.map(lambda h: (h, "container", h)),
                    pod_uids.map(lambda u: (f"pod{u}", "pod", u)),
                ),
                max_size=4,
            )
        )
        out += below
    return out


def model(drawn: list[Token]) -> CgroupOwner:
    """The documented rule, stated over what each segment is: the first pod anchors; the
    container is the first below it; ``outer_id`` the first above it; without a pod, the first
    container."""
    pods = [i for i, (_, kind, _) in enumerate(drawn) if kind == "pod"]
    containers = [i for i, (_, kind, _) in enumerate(drawn) if kind == "container"]
    if not pods:
        return CgroupOwner(drawn[containers[0]][2] if containers else None)
    anchor = pods[0]
    below = [i for i in containers if i > anchor]
    above = [i for i in containers if i < anchor]
    return CgroupOwner(
        drawn[below[0]][2] if below else None,
        drawn[anchor][2],
        drawn[above[0]][2] if above else None,
    )


@dataclass(frozen=True)
class Drawn:
    path: str
    expected: CgroupOwner


paths = tokens().map(lambda t: Drawn("/" + "/".join(s for s, _, _ in t), model(t)))


@given(paths, st.sampled_from(["v2", "v1"]))
def test_drawn_paths_give_the_models_answer(drawn: Drawn, version: str) -> None:
    if version == "v2":
        data = f"0::{drawn.path}\n"
    else:
        data = f"5:memory:{drawn.path}\n4:pids:{drawn.path}\n0::/\n"
    assert owner_from_cgroup(data.encode()) == drawn.expected


@given(st.binary(max_size=2048))
def test_any_bytes_give_a_well_formed_answer(data: bytes) -> None:
    owner = owner_from_cgroup(data)
    if owner.container_id is not None:
        assert len(owner.container_id) == 64 and set(owner.container_id) <= set(HEX)
    if owner.pod_uid is not None:
        assert len(owner.pod_uid) in (32, 36) and set(owner.pod_uid) <= set(HEX + "-")


@given(st.lists(paths, min_size=1, max_size=5))
def test_the_first_line_naming_a_container_wins(drawn: list[Drawn]) -> None:
    data = "".join(f"{i}:c{i}:{d.path}\n" for i, d in enumerate(drawn, 1)).encode()
    with_container = [d.expected for d in drawn if d.expected.container_id is not None]
    with_pod = [d.expected for d in drawn if d.expected.pod_uid is not None]
    expected = (with_container or with_pod or [CgroupOwner()])[0]
    assert owner_from_cgroup(data) == expected
