"""``serve --cri-redact-env``: ``redact.redact_container_status`` on containerd
2.1's own verbose ContainerStatus answer, recorded by
tests/containerd/test_crisock.py (``PODCACHE_RECORD_CONTAINER_STATUS``) for a container with
``DB_PASSWORD``, an empty ``EMPTY`` and ``WITH_EQUALS=a=b=c``; and on CRI-O's shape, as
cri-o's ``server/container_status.go`` writes it (``createContainerInfo``: ``{"info": JSON of
sandboxID, pid, runtimeSpec, privileged}``, the OCI spec alone). That test also runs the
option through podcache's socket on a live containerd 2.1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.serve.command import serve_command
from podcache.serve.crisock.redact import (
    CONTAINER_STATUS,
    REDACTED,
    answer_rewrites,
    redact_container_status,
)

RECORDED = (
    Path(__file__).parents[2] / "serve" / "data" / "containerd-2.1-container-status-verbose.bin"
)
SECRET_VALUES = ("hunter2-not-for-agents", "a=b=c")


def containerd_answer() -> bytes:
    return RECORDED.read_bytes()


def info_of(answer: bytes) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(
        pb.ContainerStatusResponse.FromString(answer).info["info"]
    )
    return document


def test_the_recording_holds_the_environment_in_containerds_two_places() -> None:
    info = info_of(containerd_answer())
    assert "DB_PASSWORD=hunter2-not-for-agents" in info["runtimeSpec"]["process"]["env"]
    assert {"key": "DB_PASSWORD", "value": "hunter2-not-for-agents"} in info["config"]["envs"]


def test_every_value_is_gone_from_containerds_answer_and_every_name_stays() -> None:
    redacted = redact_container_status(containerd_answer())
    for value in SECRET_VALUES:
        assert value.encode() not in redacted
    info = info_of(redacted)
    assert info["runtimeSpec"]["process"]["env"] == [
        f"PATH={REDACTED}",
        f"HOSTNAME={REDACTED}",
        f"DB_PASSWORD={REDACTED}",
        f"EMPTY={REDACTED}",
        f"WITH_EQUALS={REDACTED}",
    ]
    assert info["config"]["envs"] == [
        {"key": name, "value": REDACTED} for name in ("DB_PASSWORD", "EMPTY", "WITH_EQUALS")
    ]


def test_everything_else_of_containerds_answer_is_equal() -> None:
    original = containerd_answer()
    redacted = redact_container_status(original)
    before, after = (pb.ContainerStatusResponse.FromString(a) for a in (original, redacted))
    assert after.status.SerializeToString() == before.status.SerializeToString()  # its bytes
    assert sorted(after.info) == sorted(before.info) == ["info"]
    expected = info_of(original)  # the two places by their paths, not by the module's walk
    process = expected["runtimeSpec"]["process"]
    process["env"] = [f"{item.partition('=')[0]}={REDACTED}" for item in process["env"]]
    for pair in expected["config"]["envs"]:
        pair["value"] = REDACTED
    assert info_of(redacted) == expected
    assert list(info_of(redacted)) == list(info_of(original))  # keys in the runtime's order


def test_cri_os_shape_the_oci_spec_alone_is_redacted() -> None:
    info = {
        "sandboxID": "abc",
        "pid": 42,
        "runtimeSpec": {"process": {"args": ["sh"], "env": ["TOKEN=s3cret", "LONELY"]}},
        "privileged": False,
    }
    answer = pb.ContainerStatusResponse(
        status=pb.ContainerStatus(id="c1"), info={"info": json.dumps(info)}
    ).SerializeToString()
    redacted = info_of(redact_container_status(answer))
    assert redacted["runtimeSpec"]["process"]["env"] == [f"TOKEN={REDACTED}", "LONELY"]
    redacted["runtimeSpec"]["process"]["env"] = info["runtimeSpec"]["process"]["env"]  # type: ignore[index]
    assert redacted == info


def test_an_answer_without_verbose_info_is_passed_as_it_is() -> None:
    answer = pb.ContainerStatusResponse(status=pb.ContainerStatus(id="c1")).SerializeToString()
    assert redact_container_status(answer) is answer
    assert redact_container_status(b"") == b""


def test_an_info_value_that_is_not_a_json_object_is_passed_as_it_is() -> None:
    answer = pb.ContainerStatusResponse(
        info={"note": "env=A=1 is not JSON", "list": '["A=1"]'}
    ).SerializeToString()
    assert redact_container_status(answer) is answer


@pytest.mark.parametrize(
    ("answer", "what"),
    [
        (containerd_answer()[:-3], "malformed"),  # cut inside the info entry
        (b"\x12\xff", "truncated"),  # a length that never ends
        (b"\x13", "wire type 3"),  # a group: not in any CRI message
    ],
)
def test_an_answer_that_cannot_be_read_is_refused_never_passed_on(answer: bytes, what: str) -> None:
    with pytest.raises(ValueError, match=f"ContainerStatus answer: .*{what}"):
        redact_container_status(answer)


def test_only_container_status_is_rewritten_and_only_with_the_option() -> None:
    assert dict(answer_rewrites(redact_env=True)) == {CONTAINER_STATUS: redact_container_status}
    assert dict(answer_rewrites(redact_env=False)) == {}


def test_the_option_needs_a_cri_socket() -> None:
    with pytest.raises(click.BadParameter, match="needs --cri-listen"):
        serve_command.main(["--sim", "--cri-redact-env"], standalone_mode=False)
