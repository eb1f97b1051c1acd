"""The status store's sandbox answers in the runtime's shape (``serve/crisock/statuses.py``,
invariant 6; docs/architecture.md §10 rule 8): containerd answers ``PodSandboxStatus`` with the
status alone, CRI-O with ``enable_pod_events`` adds the sandbox's containers' statuses and the
time of the answer. The shape is learnt from the runtime's first answer on each stream."""

from __future__ import annotations

from podcache.cri.proto import api_pb2 as pb
from podcache.serve.crisock.departedstatus import DepartedStatuses
from podcache.serve.crisock.statuses import CONTAINER, SANDBOX, StatusKey, StatusStore
from tests.unit.crisock.test_statuses import IDS, PERIOD, SANDBOX_ID, Clock, event, status

KEY = StatusKey(SANDBOX, SANDBOX_ID, False)
ANSWERED_AT = 1_000


class WallClock:
    def __init__(self) -> None:
        self.now = 5_000

    def __call__(self) -> int:
        return self.now


def crio_answer(*containers: str, timestamp: int = ANSWERED_AT) -> bytes:
    return pb.PodSandboxStatusResponse(
        status=pb.PodSandboxStatus(id=SANDBOX_ID, state=pb.SANDBOX_READY),
        containers_statuses=[status(c, pb.CONTAINER_RUNNING) for c in containers],
        timestamp=timestamp,
    ).SerializeToString()


def containerd_answer() -> bytes:
    return pb.PodSandboxStatusResponse(
        status=pb.PodSandboxStatus(id=SANDBOX_ID, state=pb.SANDBOX_READY)
    ).SerializeToString()


def store_with(wall: WallClock | None = None) -> StatusStore:
    store = StatusStore(PERIOD, clock=Clock(), wall_clock=wall or WallClock())
    store.stream_opened()
    return store


def answered(store: StatusStore, key: StatusKey = KEY) -> pb.PodSandboxStatusResponse | None:
    data = store.kept(key)
    return None if data is None else pb.PodSandboxStatusResponse.FromString(data)


def test_a_crio_answer_is_given_with_the_time_of_each_answer_not_the_runtimes() -> None:
    wall = WallClock()
    store = store_with(wall)
    store.keep(KEY, crio_answer(IDS[0], IDS[1]), store.begin())
    assert store.sandbox_extras is True
    first = answered(store)
    wall.now = 9_000
    second = answered(store)
    assert first is not None and second is not None
    assert (first.timestamp, second.timestamp) == (5_000, 9_000)
    assert [c.id for c in second.containers_statuses] == [IDS[0], IDS[1]]
    second.timestamp = ANSWERED_AT
    assert second == pb.PodSandboxStatusResponse.FromString(crio_answer(IDS[0], IDS[1]))


def test_on_crio_an_events_sandbox_status_is_never_the_answer() -> None:
    """CRI-O's answer lists the sandbox's containers; an event's list is the pod UID's."""
    store = store_with()
    store.keep(KEY, crio_answer(IDS[0]), store.begin())
    store.event(event(IDS[0], pb.CONTAINER_STOPPED_EVENT, statuses=[status(IDS[0], 2)]))
    assert answered(store) is None  # dropped (it names the sandbox), not replaced
    assert store.kept(StatusKey(CONTAINER, IDS[0], False)) is not None  # a container's is


def test_before_the_shape_is_known_no_events_sandbox_status_is_kept() -> None:
    store = store_with()
    assert store.sandbox_extras is None
    store.event(event(IDS[0], pb.CONTAINER_STARTED_EVENT, statuses=[status(IDS[0], 1)]))
    assert answered(store) is None
    store.keep(KEY, containerd_answer(), store.begin())  # containerd: the status alone
    assert store.sandbox_extras is False
    assert answered(store) == pb.PodSandboxStatusResponse.FromString(containerd_answer())
    store.event(event(IDS[1], pb.CONTAINER_STARTED_EVENT, statuses=[status(IDS[1], 1)]))
    learnt = answered(store)
    assert learnt is not None and not learnt.timestamp  # the event's status, no time added
    assert learnt.status == pb.PodSandboxStatus(id=SANDBOX_ID, state=pb.SANDBOX_READY)


def test_a_reopened_stream_learns_the_shape_again() -> None:
    store = store_with()
    store.keep(KEY, containerd_answer(), store.begin())
    store.stream_ended()
    store.stream_opened()
    assert store.sandbox_extras is None
    told = StatusStore(PERIOD, clock=Clock(), sandbox_extras=True)
    told.stream_opened()
    told.stream_ended()
    told.stream_opened()
    assert told.sandbox_extras is True  # a shape given is kept


def test_an_event_naming_only_a_listed_container_ends_the_sandbox_answer() -> None:
    """The answer depends on the statuses it lists: an event that names one of them (and not
    the sandbox) drops it, and an answer begun before such an event is not kept."""
    store = store_with()
    store.keep(KEY, crio_answer(IDS[0]), store.begin())
    bare = pb.ContainerEventResponse(
        container_id=IDS[0],
        container_event_type=pb.CONTAINER_STOPPED_EVENT,
        containers_statuses=[status(IDS[0], 2)],
    ).SerializeToString()
    store.event(bare)
    assert answered(store) is None
    ticket = store.begin()
    store.event(bare)
    store.keep(KEY, crio_answer(IDS[0]), ticket)
    assert answered(store) is None
    store.keep(KEY, crio_answer(IDS[0]), store.begin())
    assert answered(store) is not None


def test_a_crio_answer_past_the_period_is_not_given() -> None:
    clock = Clock()
    store = StatusStore(PERIOD, clock=clock, wall_clock=WallClock())
    store.stream_opened()
    store.keep(KEY, crio_answer(), store.begin())
    clock.now = PERIOD
    assert answered(store) is not None  # at the limit
    clock.now = PERIOD + 0.001
    assert answered(store) is None  # past it


def test_a_departed_sandbox_answers_the_last_status_an_event_told_before_the_shape_is_known() -> (
    None
):
    """With ``--cri-keep-departed``: an event's sandbox status is never given as the answer
    while the shape is unknown, but it is the last known of its sandbox when it leaves (a
    containerd 1.7 sandbox DELETED carries no status)."""
    clock = Clock()
    departed = DepartedStatuses(60.0, clock=clock, wall_clock=lambda: 2_000)
    store = StatusStore(PERIOD, clock=clock, departed=departed)
    store.stream_opened()
    stopped = pb.ContainerEventResponse(
        container_id=SANDBOX_ID,
        container_event_type=pb.CONTAINER_STOPPED_EVENT,
        pod_sandbox_status=pb.PodSandboxStatus(id=SANDBOX_ID, state=pb.SANDBOX_NOTREADY),
    )
    store.event(stopped.SerializeToString())
    assert answered(store) is None
    gone = pb.ContainerEventResponse(
        container_id=SANDBOX_ID, container_event_type=pb.CONTAINER_DELETED_EVENT, created_at=1_000
    )
    store.event(gone.SerializeToString())
    found = departed.answer(SANDBOX, SANDBOX_ID, verbose=False)
    assert found is not None
    assert pb.PodSandboxStatusResponse.FromString(found[0]) == pb.PodSandboxStatusResponse(
        status=stopped.pod_sandbox_status
    )
