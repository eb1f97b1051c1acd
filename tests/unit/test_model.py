"""The pod model: construction, value equality, immutability and PodList lookups.

Lookups are checked against a linear-scan reference (the kubelet's own algorithm) with
hypothesis, so the O(1) indexes can never answer differently from a scan.
"""

from __future__ import annotations

import operator
import pickle

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from podcache import (
    AmbiguousContainerIDError,
    Container,
    ContainerID,
    ContainerState,
    Pod,
    PodList,
)


def cid(ident: str, runtime: str = "containerd") -> ContainerID:
    return ContainerID(runtime, ident)


# -- ContainerID ------------------------------------------------------------------------------
def test_container_id_renders_and_parses() -> None:
    assert ContainerID("containerd", "abc").qualified == "containerd://abc"
    assert ContainerID.parse("containerd://abc") == ContainerID("containerd", "abc")
    assert ContainerID.parse("cri-o://0f") == ContainerID(type="cri-o", id="0f")


def test_container_id_prints_as_its_bare_id() -> None:
    cid = ContainerID("containerd", "3f2a")
    assert str(cid) == "3f2a"
    assert f"{cid}" == "3f2a"
    assert cid.bare == "3f2a" == cid.id


def test_container_id_compares_and_hashes_as_its_bare_id_where_a_string_is_expected() -> None:
    cid = ContainerID("containerd", "3f2a")
    assert cid == "3f2a"
    assert "3f2a".__eq__(cid) is NotImplemented  # so "3f2a" == cid asks the ContainerID
    assert operator.eq("3f2a", cid)
    assert (cid != "3f2a") is False
    assert cid != "containerd://3f2a"  # a string is compared with the bare ID only
    assert cid != "3f2"
    assert {"3f2a": 1}[cid] == 1  # type: ignore[index]
    assert cid in {"3f2a"}
    assert cid != ContainerID("cri-o", "3f2a")  # two ContainerIDs: both parts
    assert cid == ContainerID("containerd", "3f2a")
    assert cid != 42


_IDS = st.text(alphabet="0123456789abcdef", min_size=1, max_size=12)
_TYPES = st.sampled_from(["containerd", "cri-o", "docker"])


@given(_TYPES, _IDS, _TYPES, _IDS)
def test_container_id_equality_against_a_reference(t1: str, i1: str, t2: str, i2: str) -> None:
    one, other = ContainerID(t1, i1), ContainerID(t2, i2)
    assert (one == other) is ((t1, i1) == (t2, i2))
    assert (one != other) is ((t1, i1) != (t2, i2))
    assert (one == i2) is (i1 == i2)
    assert (one != i2) is (i1 != i2)
    if one == other:
        assert hash(one) == hash(other)
    assert hash(one) == hash(i1)
    assert ContainerID.parse(one.qualified) == one


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("abc", "expected 'type://id'"),
        ("containerd:/abc", "expected 'type://id'"),
        ("://abc", "type part is empty"),
        ("containerd://", "id part is empty"),
        ("", "expected 'type://id'"),
        ("a://b://c", "more than one"),
    ],
)
def test_container_id_parse_rejects_malformed(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as caught:
        ContainerID.parse(text)
    assert repr(text) in str(caught.value)


def test_container_id_parse_rejects_non_string() -> None:
    with pytest.raises(TypeError):
        ContainerID.parse(42)  # type: ignore[arg-type]


# -- Container / Pod --------------------------------------------------------------------------
def test_keyword_construction_and_defaults() -> None:
    c = Container(id=cid("a"))
    assert (c.name, c.image, c.image_id, c.image_ref, c.image_runtime_handler, c.hash) == (
        "",
        "",
        "",
        "",
        "",
        0,
    )
    assert c.state is ContainerState.UNKNOWN
    p = Pod(id="u")
    assert (p.name, p.namespace, p.created_at, p.containers, p.sandboxes) == ("", "", 0, (), ())


def test_positional_construction_is_refused() -> None:
    with pytest.raises(TypeError):
        Container(cid("a"))  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Pod("u")  # type: ignore[call-arg]


def test_container_state_values() -> None:
    assert [s.value for s in ContainerState] == ["created", "running", "exited", "unknown"]
    assert f"{ContainerState.RUNNING}" == "running"


def test_pods_equal_by_value_whether_lists_or_tuples_were_given() -> None:
    c = Container(id=cid("a"), name="x")
    assert Pod(id="u", containers=[c]) == Pod(id="u", containers=(c,))
    assert Pod(id="u", containers=[c]).containers == (c,)
    assert Pod(id="u", sandboxes=[c]).sandboxes == (c,)
    assert hash(Pod(id="u", containers=[c])) == hash(Pod(id="u", containers=(c,)))
    assert Pod(id="u", name="a") != Pod(id="u", name="b")


def test_models_are_immutable() -> None:
    c = Container(id=cid("a"))
    p = Pod(id="u", containers=[c])
    with pytest.raises(AttributeError):
        c.name = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        p.containers = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        p.containers.append(c)  # type: ignore[attr-defined]


def test_full_name_and_find_container() -> None:
    a = Container(id=cid("aaaa"), name="app")
    s = Container(id=cid("ssss"), name="sandbox")
    p = Pod(id="u", name="web", namespace="prod", containers=[a], sandboxes=[s])
    assert p.full_name == "web_prod"
    assert p.find_container_by_name("app") is a
    assert p.find_container_by_name("sandbox") is None  # sandboxes are not containers
    assert p.find_container_by_id(cid("aaaa")) is a
    assert p.find_container_by_id(cid("ssss")) is None
    assert p.find_container_by_id(cid("aaaa", "cri-o")) is None


def test_model_encodes_to_json_and_pickles() -> None:
    p = Pod(id="u", containers=[Container(id=cid("a"), state=ContainerState.RUNNING)])
    decoded = msgspec.json.decode(msgspec.json.encode(p), type=Pod)
    assert decoded == p
    assert pickle.loads(pickle.dumps(PodList([p]))) == PodList([p])


# -- PodList ----------------------------------------------------------------------------------
def sample() -> PodList:
    def pod(uid: str, name: str, created: int, ids: list[str], sandbox: str) -> Pod:
        return Pod(
            id=uid,
            name=name,
            namespace="ns",
            created_at=created,
            containers=[Container(id=cid(i), name=f"c-{i}") for i in ids],
            sandboxes=[Container(id=cid(sandbox), state=ContainerState.RUNNING)],
        )

    return PodList(
        [
            pod("u3", "web", 30, ["abcd1111", "abce2222"], "5a5a0001"),
            pod("u2", "web", 20, ["ffff0000"], "5a5a0002"),  # older pod, same full name
            pod("u1", "db", 10, ["0123abcd"], "5b5b0003"),
        ]
    )


def test_podlist_is_an_immutable_sequence() -> None:
    plist = sample()
    assert len(plist) == 3
    assert [p.id for p in plist] == ["u3", "u2", "u1"]
    assert plist[0].id == "u3"
    assert isinstance(plist[1:], PodList) and len(plist[1:]) == 2
    assert plist == PodList(list(plist))
    with pytest.raises(AttributeError):
        plist.x = 1
    with pytest.raises(TypeError):
        plist[0] = plist[1]  # type: ignore[index]


def test_by_uid_and_full_name_newest_wins() -> None:
    plist = sample()
    assert plist.by_uid("u2") is plist[1]
    assert plist.by_uid("nope") is None
    assert plist.by_full_name("web_ns") is plist[0]
    assert plist.by_full_name("db_ns") is plist[2]
    assert plist.by_full_name("web") is None


@pytest.mark.parametrize(
    ("query", "pod", "container"),
    [
        ("containerd://abcd1111", "u3", "abcd1111"),
        ("abcd1111", "u3", "abcd1111"),
        ("abcd", "u3", "abcd1111"),
        ("abce", "u3", "abce2222"),
        ("ffff", "u2", "ffff0000"),
        ("5a5a0002", "u2", "5a5a0002"),  # a sandbox
        ("containerd://5b5b0003", "u1", "5b5b0003"),
        ("5b5b", "u1", "5b5b0003"),
    ],
)
def test_by_container_id_finds_containers_and_sandboxes(
    query: str, pod: str, container: str
) -> None:
    found = sample().by_container_id(query)
    assert found is not None
    assert (found[0].id, found[1].id.id) == (pod, container)


@pytest.mark.parametrize(
    "query", ["cri-o://abcd1111", "containerd://abcd", "9999", "abcd11112", "containerd://zz99"]
)
def test_by_container_id_none_when_nothing_matches(query: str) -> None:
    assert sample().by_container_id(query) is None


def test_by_container_id_ambiguous_prefix_is_a_lookup_error() -> None:
    with pytest.raises(LookupError) as caught:
        sample().by_container_id("5a5a")
    assert isinstance(caught.value, AmbiguousContainerIDError)
    assert caught.value.matches == ("5a5a0001", "5a5a0002")
    assert "5a5a" in str(caught.value) and "2 IDs" in str(caught.value)


@pytest.mark.parametrize("query", ["", "a", "abc", "5a5"])
def test_by_container_id_short_prefix_is_a_value_error(query: str) -> None:
    with pytest.raises(ValueError, match="at least 4"):
        sample().by_container_id(query)


def test_by_container_id_malformed_full_id_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="malformed"):
        sample().by_container_id("containerd://")


# -- lookups against a linear-scan reference --------------------------------------------------
hexid = st.text("0123456789abcdef", min_size=4, max_size=10)


@st.composite
def pod_lists(draw: st.DrawFn) -> PodList:
    n = draw(st.integers(0, 6))
    pods = []
    used: set[str] = set()
    for i in range(n):
        ids = [x for x in draw(st.lists(hexid, max_size=4)) if x not in used]
        used.update(ids)
        sids = [x for x in draw(st.lists(hexid, max_size=2)) if x not in used]
        used.update(sids)
        pods.append(
            Pod(
                id=draw(st.sampled_from(["u1", "u2", "u3"])),
                name=draw(st.sampled_from(["a", "b"])),
                namespace="ns",
                created_at=-i,
                containers=[Container(id=cid(x)) for x in ids],
                sandboxes=[Container(id=cid(x)) for x in sids],
            )
        )
    return PodList(pods)


def scan(plist: PodList, query: str) -> tuple[Pod, Container] | str | None:
    """The reference: a linear scan over containers then sandboxes, newest pod first."""
    everything = [(p, c) for p in plist for c in (*p.containers, *p.sandboxes)]
    exact = [(p, c) for p, c in everything if c.id.id == query]
    if exact:
        return exact[0]
    if len(query) < 4:
        return "short"
    matches = [(p, c) for p, c in everything if c.id.id.startswith(query)]
    if len(matches) > 1:
        return "ambiguous"
    return matches[0] if matches else None


@given(plist=pod_lists(), query=st.text("0123456789abcdef", max_size=10))
def test_by_container_id_agrees_with_linear_scan(plist: PodList, query: str) -> None:
    want = scan(plist, query)
    try:
        got: tuple[Pod, Container] | str | None = plist.by_container_id(query)
    except AmbiguousContainerIDError:
        got = "ambiguous"
    except ValueError:
        got = "short"
    assert got == want


@given(plist=pod_lists(), uid=st.sampled_from(["u1", "u2", "u3", "u4"]))
def test_by_uid_and_full_name_agree_with_first_match(plist: PodList, uid: str) -> None:
    assert plist.by_uid(uid) == next((p for p in plist if p.id == uid), None)
    for name in ("a_ns", "b_ns", "c_ns"):
        assert plist.by_full_name(name) == next((p for p in plist if p.full_name == name), None)


# -- labels (a podcache addition) -------------------------------------------------------------
def test_labels_given_as_mapping_or_pairs_are_stored_as_sorted_pairs() -> None:
    a = Pod(id="u", labels={"tier": "web", "app": "shop"})
    b = Pod(id="u", labels=[("app", "shop"), ("tier", "web")])
    assert a == b
    assert a.labels == (("app", "shop"), ("tier", "web"))
    assert hash(a) == hash(b)
    assert a.label("app") == "shop"
    assert a.label("nope") is None
    assert a.label_map() == {"app": "shop", "tier": "web"}
    assert Pod(id="u").labels == ()


def test_labels_round_trip_through_json() -> None:
    p = Pod(id="u", labels={"b": "2", "a": "1"})
    assert msgspec.json.decode(msgspec.json.encode(p), type=Pod) == p
