"""CRI list responses -> PodList: the kubelet's GetPods rules item by item, then total order.

Tables first (one case per rule, one loop), then ordering, then properties of the result.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from podcache.cri.convert import (
    Memo,
    build_pods,
    container_state,
    parse_hash,
    pods_from_responses,
    pods_from_wire,
    sandbox_state,
)
from podcache.cri.proto import api_pb2 as pb
from podcache.model import Container, ContainerID, ContainerState, Pod, PodList

RT = "containerd"
WEB = (("app", "web"),)  # the labels sandbox() gives its pod, less the kubelet's pod keys
HASH = "io.kubernetes.container.hash"
_UNSET = "<unset>"


def sandbox(
    id: str = "s1",
    *,
    uid: str = "u1",
    name: str = "web",
    namespace: str = "default",
    created_at: int = 100,
    state: int = pb.SANDBOX_READY,
    metadata: bool = True,
    labels: dict[str, str] | None = None,
) -> pb.PodSandbox:
    """A listed sandbox, labelled as the kubelet does (the pod's own labels, default
    ``app=web``, plus the pod keys); ``metadata=False`` leaves the metadata message unset."""
    s = pb.PodSandbox(id=id, state=state, created_at=created_at)  # type: ignore[arg-type]
    if metadata:
        s.metadata.SetInParent()  # present even when every field is empty
        s.metadata.name, s.metadata.uid, s.metadata.namespace = name, uid, namespace
    s.labels.update(
        {
            "io.kubernetes.pod.uid": uid,
            "io.kubernetes.pod.name": name,
            "io.kubernetes.pod.namespace": namespace,
        }
    )
    s.labels.update({"app": "web"} if labels is None else labels)
    return s


def container(
    id: str = "c1",
    *,
    uid: str | None = "u1",
    pod_name: str | None = "web",
    namespace: str | None = "default",
    name: str = "app",
    created_at: int = 200,
    state: int = pb.CONTAINER_RUNNING,
    image: str | None = "nginx:1.27",
    handler: str = "",
    image_ref: str = "docker.io/library/nginx@sha256:aa",
    image_id: str = "sha256:bb",
    hash: str = "1f",
    metadata: bool = True,
) -> pb.Container:
    """A listed container; None for a label leaves it out, ``image=None`` leaves ImageSpec unset,
    ``hash=_UNSET`` leaves the hash annotation out."""
    c = pb.Container(
        id=id,
        pod_sandbox_id="s1",
        image_ref=image_ref,
        image_id=image_id,
        state=state,  # type: ignore[arg-type]
        created_at=created_at,
    )
    if metadata:
        c.metadata.SetInParent()  # present even when its name is empty
        c.metadata.name = name
    if image is not None:
        c.image.SetInParent()
        c.image.image, c.image.runtime_handler = image, handler
    for key, value in (
        ("io.kubernetes.pod.uid", uid),
        ("io.kubernetes.pod.name", pod_name),
        ("io.kubernetes.pod.namespace", namespace),
        ("io.kubernetes.container.name", name),
    ):
        if value is not None:
            c.labels[key] = value
    if hash != _UNSET:
        c.annotations[HASH] = hash
    c.annotations["io.kubernetes.container.restartCount"] = "0"
    return c


def ctr(ident: str = "c1", **kw: object) -> Container:
    """The Container the kubelet makes from ``container(ident)`` with default arguments."""
    values: dict[str, object] = {
        "sandbox_id": "s1",
        "name": "app",
        "image": "nginx:1.27",
        "image_id": "sha256:bb",
        "image_ref": "docker.io/library/nginx@sha256:aa",
        "hash": 0x1F,
        "state": ContainerState.RUNNING,
    }
    values.update(kw)
    return Container(id=ContainerID(RT, ident), **values)  # type: ignore[arg-type]


def sbx(ident: str = "s1", state: ContainerState = ContainerState.RUNNING) -> Container:
    return Container(id=ContainerID(RT, ident), state=state)


def only_pod(pods: PodList) -> Pod:
    assert len(pods) == 1, pods
    return pods[0]


# -- one container, field by field ------------------------------------------------------------


@dataclass
class ContainerCase:
    name: str
    listed: pb.Container
    expected: Container | None  # None: skipped (its pod may remain)


CONTAINER_CASES = [
    ContainerCase("plain", container(), ctr()),
    ContainerCase(
        "image_id wins over image_ref", container(image_id="sha256:id"), ctr(image_id="sha256:id")
    ),
    ContainerCase(
        "empty image_id falls back to image_ref",
        container(image_id=""),
        ctr(image_id="docker.io/library/nginx@sha256:aa"),
    ),
    ContainerCase(
        "both image ids empty", container(image_id="", image_ref=""), ctr(image_id="", image_ref="")
    ),
    ContainerCase(
        "runtime handler", container(handler="gvisor"), ctr(image_runtime_handler="gvisor")
    ),
    ContainerCase("name from metadata", container(name="sidecar"), ctr(name="sidecar")),
    ContainerCase(
        "created", container(state=pb.CONTAINER_CREATED), ctr(state=ContainerState.CREATED)
    ),
    ContainerCase("exited", container(state=pb.CONTAINER_EXITED), ctr(state=ContainerState.EXITED)),
    ContainerCase(
        "unknown", container(state=pb.CONTAINER_UNKNOWN), ctr(state=ContainerState.UNKNOWN)
    ),
    ContainerCase("unlisted state", container(state=42), ctr(state=ContainerState.UNKNOWN)),
    ContainerCase("no hash annotation", container(hash=_UNSET), ctr(hash=0)),
    ContainerCase("empty id: skipped", container(id=""), None),
    ContainerCase("no ImageSpec: skipped", container(image=None), None),
    ContainerCase("empty ImageSpec is an image: kept", container(image=""), ctr(image="")),
    ContainerCase("empty metadata is metadata: kept", container(name=""), ctr(name="")),
]


@pytest.mark.parametrize("case", CONTAINER_CASES, ids=lambda c: c.name)
def test_container_conversion(case: ContainerCase) -> None:
    pod = only_pod(build_pods(RT, [], [case.listed]))
    expected = () if case.expected is None else (case.expected,)
    assert pod.containers == expected
    assert pod.id == "u1"  # the pod is synthesised (or found) before the container is checked


def test_container_without_metadata_is_skipped_before_grouping() -> None:
    assert build_pods(RT, [], [container(metadata=False)]) == PodList([])


# -- the hash annotation: hexadecimal uint64, else 0 ------------------------------------------

HASH_CASES = [
    ("", 0),
    ("zz", 0),
    ("1f", 0x1F),
    ("ABCDEF", 0xABCDEF),
    ("aBcD", 0xABCD),
    ("0", 0),
    ("ffffffffffffffff", 2**64 - 1),
    ("FFFFFFFFFFFFFFFF", 2**64 - 1),
    ("10000000000000000", 0),  # 2**64: out of range
    ("00000000000000001", 1),  # 17 digits, in range: Go accepts leading zeros
    ("0x1f", 0),  # base 16 given: no prefix (Go)
    ("+1f", 0),
    ("-1", 0),
    ("1_f", 0),  # underscores only with base 0 (Go)
    (" 1f", 0),
    ("1f\n", 0),
    ("١٢", 0),  # non-ASCII digits: Python's int() would take them
    ("12.5", 0),
]


@pytest.mark.parametrize(("text", "expected"), HASH_CASES)
def test_hash_is_parsed_as_hex_uint64(text: str, expected: int) -> None:
    assert parse_hash(text) == expected
    # The conversion loop inlines the parser: it must agree.
    pod = only_pod(build_pods(RT, [], [container(hash=text)]))
    assert pod.containers[0].hash == expected


def test_missing_hash_is_zero() -> None:
    assert parse_hash(None) == 0


# -- states -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (pb.CONTAINER_CREATED, ContainerState.CREATED),
        (pb.CONTAINER_RUNNING, ContainerState.RUNNING),
        (pb.CONTAINER_EXITED, ContainerState.EXITED),
        (pb.CONTAINER_UNKNOWN, ContainerState.UNKNOWN),
        (17, ContainerState.UNKNOWN),
    ],
)
def test_container_state(state: int, expected: ContainerState) -> None:
    assert container_state(state) is expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (pb.SANDBOX_READY, ContainerState.RUNNING),
        (pb.SANDBOX_NOTREADY, ContainerState.EXITED),
        (9, ContainerState.UNKNOWN),
    ],
)
def test_sandbox_state(state: int, expected: ContainerState) -> None:
    assert sandbox_state(state) is expected
    pod = only_pod(build_pods(RT, [sandbox(state=state)], []))
    assert pod.sandboxes == (sbx(state=expected),)


# -- grouping ---------------------------------------------------------------------------------


@dataclass
class GroupCase:
    name: str
    sandboxes: list[pb.PodSandbox]
    containers: list[pb.Container]
    expected: list[Pod] = field(default_factory=list)


GROUP_CASES = [
    GroupCase("nothing listed", [], [], []),
    GroupCase(
        "sandbox makes the pod: name and namespace from its metadata",
        [sandbox()],
        [container(pod_name="label-name", namespace="label-ns")],
        [
            Pod(
                id="u1",
                name="web",
                namespace="default",
                created_at=100,
                containers=(ctr(),),
                sandboxes=(sbx(),),
                labels=WEB,
            )
        ],
    ),
    GroupCase("sandbox without metadata is skipped", [sandbox(metadata=False)], [], []),
    GroupCase(
        "sandbox with empty id is skipped, its pod remains (created_at 0)",
        [sandbox(id="")],
        [],
        [Pod(id="u1", name="web", namespace="default")],
    ),
    GroupCase(
        "sandbox with empty metadata uid groups under the empty ID",
        [sandbox(uid="", name="", namespace="")],
        [],
        [Pod(id="", created_at=100, sandboxes=(sbx(),), labels=WEB)],
    ),
    GroupCase(
        "container without a sandbox: pod synthesised from its labels, created_at 0",
        [],
        [container()],
        [Pod(id="u1", name="web", namespace="default", containers=(ctr(),))],
    ),
    GroupCase(
        "containers without pod labels all land in the one empty-ID pod",
        [],
        [
            container("c1", uid=None, pod_name=None, namespace=None),
            container("c2", uid=None, pod_name=None, namespace=None),
        ],
        [Pod(id="", containers=(ctr("c1"), ctr("c2")))],
    ),
    GroupCase(
        "synthesised pod takes the first container's labels",
        [],
        [
            container("c1", uid=None, pod_name="first", namespace="ns1", created_at=5),
            container("c2", uid=None, pod_name="second", namespace="ns2", created_at=5),
        ],
        [Pod(id="", name="first", namespace="ns1", containers=(ctr("c1"), ctr("c2")))],
    ),
    GroupCase(
        "container without metadata synthesises no pod",
        [],
        [container(uid="u9", metadata=False)],
        [],
    ),
    GroupCase(
        "container with empty id: skipped after its pod was synthesised",
        [],
        [container(id="", uid="u9", pod_name="p9")],
        [Pod(id="u9", name="p9", namespace="default")],
    ),
    GroupCase(
        "container without image: skipped after its pod was found",
        [sandbox()],
        [container(image=None)],
        [
            Pod(
                id="u1",
                name="web",
                namespace="default",
                created_at=100,
                sandboxes=(sbx(),),
                labels=WEB,
            )
        ],
    ),
    GroupCase(
        "containers join the sandbox's pod by the uid label, not by pod_sandbox_id",
        [sandbox("s1", uid="u1"), sandbox("s2", uid="u2", name="db", created_at=50)],
        [container("c1", uid="u2"), container("c2", uid="u1")],
        [
            Pod(
                id="u1",
                name="web",
                namespace="default",
                created_at=100,
                containers=(ctr("c2"),),
                sandboxes=(sbx("s1"),),
                labels=WEB,
            ),
            Pod(
                id="u2",
                name="db",
                namespace="default",
                created_at=50,
                containers=(ctr("c1"),),
                sandboxes=(sbx("s2"),),
                labels=WEB,
            ),
        ],
    ),
    GroupCase(
        "created_at is the newest sandbox's, not the last listed",
        [
            sandbox("s-new", created_at=300),
            sandbox("s-old", created_at=100, state=pb.SANDBOX_NOTREADY),
        ],
        [],
        [
            Pod(
                id="u1",
                name="web",
                namespace="default",
                created_at=300,
                sandboxes=(sbx("s-new"), sbx("s-old", ContainerState.EXITED)),
                labels=WEB,
            )
        ],
    ),
    GroupCase(
        "a skipped sandbox does not count for created_at",
        [sandbox("", created_at=900), sandbox("s1", created_at=100)],
        [],
        [
            Pod(
                id="u1",
                name="web",
                namespace="default",
                created_at=100,
                sandboxes=(sbx(),),
                labels=WEB,
            )
        ],
    ),
    GroupCase(
        "second sandbox of a pod keeps the first one's name",
        [sandbox("s1", name="first"), sandbox("s2", name="second", created_at=50)],
        [],
        [
            Pod(
                id="u1",
                name="first",
                namespace="default",
                created_at=100,
                sandboxes=(sbx("s1"), sbx("s2")),
                labels=WEB,
            )
        ],
    ),
]


@pytest.mark.parametrize("case", GROUP_CASES, ids=lambda c: c.name)
def test_grouping(case: GroupCase) -> None:
    assert list(build_pods(RT, case.sandboxes, case.containers)) == case.expected


# -- pod labels (a podcache addition) ---------------------------------------------------------


def test_pod_labels_are_the_newest_sandboxs_without_the_kubelets_pod_keys() -> None:
    pod = only_pod(
        build_pods(
            RT,
            [
                sandbox("s-new", created_at=300, labels={"app": "web", "tier": "front"}),
                sandbox("s-old", created_at=100, labels={"app": "old"}),
            ],
            [],
        )
    )
    assert pod.labels == (("app", "web"), ("tier", "front"))


def test_pod_labels_tie_goes_to_the_sandbox_listed_first_in_order() -> None:
    pod = only_pod(
        build_pods(
            RT,
            [sandbox("s-b", labels={"v": "b"}), sandbox("s-a", labels={"v": "a"})],
            [],
        )
    )
    assert [s.id.id for s in pod.sandboxes] == ["s-a", "s-b"]
    assert pod.labels == (("v", "a"),)


def test_the_kubelets_pod_keys_and_crios_infra_container_label_are_dropped() -> None:
    """CRI-O labels every sandbox ``io.kubernetes.container.name=POD`` (its infra container's
    name): the runtime's, not the pod's. Other keys stay."""
    labels = {
        "io.kubernetes.container.name": "POD",
        "io.kubernetes.container.namespace": "kept",
        "k8s-app": "dns",
    }
    pod = only_pod(build_pods(RT, [sandbox(labels=labels)], []))
    assert pod.labels == (("io.kubernetes.container.namespace", "kept"), ("k8s-app", "dns"))


@pytest.mark.parametrize(
    ("sandboxes", "containers"),
    [
        ([sandbox("", labels={"app": "skipped"})], []),  # its only sandbox was skipped
        ([], [container()]),  # synthesised from container labels
    ],
    ids=["skipped sandbox", "no sandbox"],
)
def test_pod_without_a_converted_sandbox_has_no_labels(
    sandboxes: list[pb.PodSandbox], containers: list[pb.Container]
) -> None:
    assert only_pod(build_pods(RT, sandboxes, containers)).labels == ()


def test_label_strings_are_shared_between_pods() -> None:
    pods = build_pods(RT, [sandbox("s1", uid="u1"), sandbox("s2", uid="u2")], [])
    assert pods[0].labels == pods[1].labels == WEB
    labels_a, labels_b = pods[0].labels, pods[1].labels
    assert isinstance(labels_a, tuple) and isinstance(labels_b, tuple)
    (key_a, value_a), (key_b, value_b) = labels_a[0], labels_b[0]
    assert key_a is key_b and value_a is value_b


# -- order ------------------------------------------------------------------------------------


def test_pods_newest_first_ties_by_id_and_label_only_pods_last() -> None:
    pods = build_pods(
        RT,
        [
            sandbox("s-b", uid="b", created_at=10),
            sandbox("s-c", uid="c", created_at=30),
            sandbox("s-a", uid="a", created_at=10),
        ],
        [container("c-z", uid="z"), container("c-y", uid="y")],
    )
    assert [p.id for p in pods] == ["c", "a", "b", "y", "z"]
    assert [p.created_at for p in pods] == [30, 10, 10, 0, 0]


def test_containers_newest_first_ties_by_id() -> None:
    pod = only_pod(
        build_pods(
            RT,
            [],
            [
                container("b", created_at=5),
                container("old", created_at=1),
                container("new", created_at=9),
                container("a", created_at=5),
            ],
        )
    )
    assert [c.id.id for c in pod.containers] == ["new", "a", "b", "old"]


def test_sandboxes_newest_first_ties_by_id() -> None:
    pod = only_pod(
        build_pods(
            RT,
            [
                sandbox("s-b", created_at=5),
                sandbox("s-old", created_at=1),
                sandbox("s-a", created_at=5),
            ],
            [],
        )
    )
    assert [s.id.id for s in pod.sandboxes] == ["s-a", "s-b", "s-old"]


def test_result_does_not_depend_on_listing_order() -> None:
    sandboxes = [sandbox(f"s{i}", uid=f"u{i % 7}", created_at=(i * 37) % 11) for i in range(30)]
    containers = [container(f"c{i}", uid=f"u{i % 9}", created_at=(i * 13) % 5) for i in range(60)]
    reference = build_pods(RT, sandboxes, containers)
    rng = random.Random(4)
    for _ in range(20):
        rng.shuffle(sandboxes)
        rng.shuffle(containers)
        shuffled = build_pods(RT, sandboxes, containers)
        # Names come from the first sandbox listed, and all sandboxes of a pod share them here.
        assert shuffled == reference


# -- the result -------------------------------------------------------------------------------


def test_container_ids_carry_the_runtime_name() -> None:
    pod = only_pod(build_pods("cri-o", [sandbox()], [container()]))
    assert pod.containers[0].id.qualified == "cri-o://c1"
    assert pod.sandboxes[0].id.qualified == "cri-o://s1"


@pytest.mark.parametrize("attempt", [0, 1, 7, 2**32 - 1])
def test_attempts_are_carried_by_both_readers(attempt: int) -> None:
    s, c = sandbox(), container()
    s.metadata.attempt = attempt
    c.metadata.attempt = attempt
    listed = build_pods(RT, [s], [c])
    read = pods_from_wire(
        RT,
        pb.ListPodSandboxResponse(items=[s]).SerializeToString(),
        pb.ListContainersResponse(containers=[c]).SerializeToString(),
    )
    for pods in (listed, read):
        pod = only_pod(pods)
        assert pod.sandboxes[0].attempt == attempt
        assert pod.containers[0].attempt == attempt


def test_repeated_strings_are_one_object() -> None:
    pods = build_pods(
        RT,
        [],
        [container("c1", uid="u1"), container("c2", uid="u2"), container("c3", uid="u3")],
    )
    images = {id(p.containers[0].image) for p in pods}
    refs = {id(p.containers[0].image_ref) for p in pods}
    namespaces = {id(p.namespace) for p in pods}
    runtimes = {id(p.containers[0].id.type) for p in pods}
    assert (len(images), len(refs), len(namespaces), len(runtimes)) == (1, 1, 1, 1)


def test_result_is_a_podlist_of_tuples_with_working_lookups() -> None:
    pods = pods_from_responses(
        RT,
        pb.ListPodSandboxResponse(items=[sandbox()]),
        pb.ListContainersResponse(containers=[container()]),
    )
    assert isinstance(pods, PodList)
    pod = only_pod(pods)
    assert type(pod.containers) is tuple and type(pod.sandboxes) is tuple
    assert pods.by_container_id("containerd://c1") == (pod, ctr())
    assert pods.by_container_id("s1") == (pod, sbx())
    assert pods.by_full_name("web_default") is pod


def test_input_messages_are_not_modified() -> None:
    listed = [container(uid=None, pod_name=None, namespace=None, hash=_UNSET)]
    before = [c.SerializeToString(deterministic=True) for c in listed]
    build_pods(RT, [], listed)
    assert [c.SerializeToString(deterministic=True) for c in listed] == before


# -- the memo: an optimisation that must never change a result --------------------------------


def random_listing(
    rng: random.Random,
) -> tuple[list[pb.PodSandbox], list[pb.Container]]:
    """A small listing drawn from a fixed universe of items, so listings share many of them;
    states and malformations vary, as they do between refreshes."""
    sandboxes = []
    for i in rng.sample(range(12), rng.randrange(13)):
        reborn = rng.random() < 0.25
        sandboxes.append(
            sandbox(
                f"s{i}" if i % 11 else "",
                uid=f"u{i % 5}",
                # Now and then an id comes back with another created_at and other labels: not
                # what a runtime does, but the memo must not hide it either.
                created_at=100 + i + (50 if reborn else 0),
                state=rng.choice([pb.SANDBOX_READY, pb.SANDBOX_NOTREADY]),
                metadata=i != 7,
                labels={"app": f"a{i % 3}", "rev": str(int(reborn))},
            )
        )
    containers = []
    for i in rng.sample(range(30), rng.randrange(31)):
        containers.append(
            container(
                f"c{i}" if i % 13 else "",
                uid=f"u{i % 7}" if i % 9 else None,
                created_at=200 + i % 4,
                state=rng.choice([pb.CONTAINER_CREATED, pb.CONTAINER_RUNNING, pb.CONTAINER_EXITED]),
                image=None if i == 17 else f"img{i % 4}",
                metadata=i != 23,
                hash=f"{i:x}",
            )
        )
    return sandboxes, containers


def test_memo_never_changes_the_result() -> None:
    rng = random.Random(7)
    memo = Memo()
    for step in range(200):
        sandboxes, containers = random_listing(rng)
        runtime = "containerd" if step % 50 else "cri-o"  # a new runtime name voids the memo
        assert build_pods(runtime, sandboxes, containers, memo) == build_pods(
            runtime, sandboxes, containers
        )


def test_memo_reuses_unchanged_items_and_pods() -> None:
    memo = Memo()
    listing = ([sandbox("s1"), sandbox("s2", uid="u2")], [container("c1"), container("c2")])
    first = build_pods(RT, *listing, memo)
    again = build_pods(RT, *listing, memo)
    assert again == first
    assert all(a is b for a, b in zip(again, first, strict=True))


def test_memo_sees_a_state_change() -> None:
    memo = Memo()
    build_pods(RT, [sandbox()], [container()], memo)
    later = build_pods(
        RT,
        [sandbox(state=pb.SANDBOX_NOTREADY)],
        [container(state=pb.CONTAINER_EXITED)],
        memo,
    )
    pod = only_pod(later)
    assert pod.containers[0].state is ContainerState.EXITED
    assert pod.sandboxes[0].state is ContainerState.EXITED


def test_memo_holds_only_the_last_listing() -> None:
    memo = Memo()
    build_pods(RT, [sandbox("s1"), sandbox("s2")], [container("c1"), container("c2")], memo)
    assert len(memo) == 4
    build_pods(RT, [sandbox("s3")], [container("c3"), container("")], memo)
    assert len(memo) == 2  # items without an id are never remembered


def test_memo_sees_an_id_listed_again_with_another_created_at() -> None:
    memo = Memo()
    build_pods(RT, [sandbox(created_at=100)], [], memo)
    assert only_pod(build_pods(RT, [sandbox(created_at=150)], [], memo)).created_at == 150
