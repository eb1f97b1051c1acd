"""``podcache events -o json`` against a real containerd: pods and containers started, stopped
and removed through CRI (the harness, as the kubelet would) show up as the matching changes,
and the state rebuilt from the lines is exactly what the runtime lists."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from podcache.cri import CRIRuntime
from podcache.jsonview import pod_to_json
from tests.containerd.conftest import Containerd
from tests.containerd.harness import CRIHarness

pytestmark = [pytest.mark.containerd, pytest.mark.timeout(180)]

Line = dict[str, Any]


class Events:
    """``podcache events -o json`` on the test's containerd, its lines collected."""

    def __init__(self, endpoint: str) -> None:
        exe = shutil.which("podcache", path=str(Path(sys.executable).parent))
        assert exe is not None, "no podcache console script: run ./scripts/setup"
        env = {k: v for k, v in os.environ.items() if k != "CONTAINER_RUNTIME_ENDPOINT"}
        self.process = subprocess.Popen(
            [exe, "events", "-o", "json", "-r", endpoint, "--period", "100ms"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        self.lines: list[Line] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for text in self.process.stdout:
            self.lines.append(json.loads(text))

    def wait_for(
        self, what: str, check: Callable[[list[Line]], bool], timeout: float = 20.0
    ) -> None:
        deadline = time.monotonic() + timeout
        while not check(list(self.lines)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                assert self.process.stderr is not None
                pytest.fail(
                    f"never saw {what}; lines: {self.lines[-5:]}; {self.process.stderr.read()}"
                )
            time.sleep(0.05)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        code = self.process.wait(15)
        self._reader.join(5)
        return code


def rebuilt(lines: list[Line]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for line in lines:
        uid = line["object"]["id"]
        if line["type"] == "DELETED":
            del state[uid]
        else:
            assert (line["type"] == "ADDED") == (uid not in state), line["type"]
            state[uid] = line["object"]
    return state


def changes_of(uid: str) -> Callable[[list[Line]], list[Line]]:
    return lambda lines: [line for line in lines if line["object"]["id"] == uid]


@pytest.fixture
def events(containerd: Containerd) -> Iterator[Events]:
    watching = Events(containerd.endpoint)
    try:
        yield watching
    finally:
        watching.stop()


def test_cri_changes_reach_podcache_events(
    containerd: Containerd, cri_harness: CRIHarness, events: Events
) -> None:
    with CRIRuntime(containerd.endpoint) as runtime:

        def truth() -> dict[str, Any]:
            return {pod.id: pod_to_json(pod) for pod in runtime.get_pods(True)}

        events.wait_for("the node's pods", lambda lines: rebuilt(lines) == truth())
        sandbox = cri_harness.run_pod("watched", "watch-test")
        try:
            of = changes_of(sandbox.uid)

            def last(kind: str, test: Callable[[dict[str, Any]], bool]) -> Callable[..., bool]:
                def check(lines: list[Line]) -> bool:
                    mine = of(lines)
                    return bool(mine) and mine[-1]["type"] == kind and test(mine[-1]["object"])

                return check

            def states(pod: dict[str, Any]) -> dict[str, str]:
                return {c["name"]: c["state"] for c in pod["containers"]}

            events.wait_for("the pod ADDED", last("ADDED", lambda pod: pod["containers"] == []))
            container = cri_harness.create_container(sandbox, "app")
            events.wait_for(
                "the container started", last("MODIFIED", lambda p: states(p) == {"app": "running"})
            )
            cri_harness.stop_container(container)
            events.wait_for(
                "the container exited", last("MODIFIED", lambda p: states(p) == {"app": "exited"})
            )
            cri_harness.remove_container(container)
            events.wait_for("the container removed", last("MODIFIED", lambda p: states(p) == {}))
            cri_harness.stop_pod(sandbox)
            events.wait_for(
                "the sandbox not ready",
                last("MODIFIED", lambda p: [s["state"] for s in p["sandboxes"]] == ["exited"]),
            )
            cri_harness.remove_pod(sandbox)
            events.wait_for("the pod DELETED", last("DELETED", lambda pod: True))
            # A refresh may also catch a passing state (created before started): each step was
            # seen above; between the pod's ADDED and DELETED there are only MODIFIED lines.
            kinds = [line["type"] for line in of(events.lines)]
            assert kinds[0] == "ADDED" and kinds[-1] == "DELETED"
            assert set(kinds[1:-1]) == {"MODIFIED"} and len(kinds) >= 6
            assert rebuilt(events.lines) == truth()
            revisions = [line["revision"] for line in events.lines]
            assert revisions == sorted(revisions)
        finally:
            if not sandbox.removed:
                cri_harness.remove_pod(sandbox)
    assert events.stop() == 130
