"""The one-shot read begun before click is imported (``podcache.cli.early``, docs/architecture.md
§6 rule 1): its reading of ``argv`` is click's wherever it reads one (hypothesis, click as the
reference), it is handed over only to a command asking for the same read, and the console
script's ``which IP`` sends its statuses before click is imported, each asked once.
Causality and counts, not a clock."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podcache.cli import early, run
from podcache.cli.options import DEFAULT_TIMEOUT, RuntimeSettings
from podcache.cri.oneshot import BATCH, OneShotRuntime
from podcache.sim import SimRuntime

_TOKENS = [
    "10.0.0.1",
    " 10.0.0.2 ",
    "::ffff:10.0.0.1",
    "fe80::1",
    "FE80::0:1",
    "2001:db8::",
    "12",
    "0",
    "99999999",
    "abc",
    "10.0.0",
    "-r",
    "--runtime-endpoint",
    "--runtime-endpoint=unix:///b.sock",
    "--runtime-endpoint=",
    "unix:///a.sock",
    "/run/x.sock",
    "-rfoo",
    "-o",
    "json",
    "--proc-root",
    "--",
    "-",
    "--timeout",
    "3s",
    "--sim",
]


class _Asked(Exception):
    """What the command asked ``open_source`` for, raised to stop it there."""


def _what_the_command_asks(argv: list[str]) -> tuple[RuntimeSettings, object] | None:
    """The settings and ``ips`` the command opens its runtime with (click parsing ``argv``);
    None when click refuses ``argv`` first."""

    def asked(settings: RuntimeSettings, **kwargs: object) -> None:
        raise _Asked(settings, kwargs)

    with (
        mock.patch("podcache.cli.source.open_source", asked),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        try:
            run(argv)
        except _Asked as stopped:
            settings, kwargs = stopped.args
            assert kwargs["one_shot"] is True
            return settings, kwargs["ips"]
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=6))
def test_a_form_read_early_is_what_click_reads(tokens: list[str]) -> None:
    """Every argument list ``read_form`` reads is one the command, click parsing it, opens
    the runtime for with the same endpoint and IPs and no other setting: the read begun is
    the one it asks for."""
    argv = ["which", *tokens]
    form = early.read_form(argv)
    if form is None:
        return
    asked = _what_the_command_asks(argv)
    assert asked == (RuntimeSettings(endpoint=form.endpoint), form.find_ips)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["which", "10.0.0.1"], early.EarlyRead(None, frozenset({"10.0.0.1"}))),
        (
            ["which", "-r", "unix:///a.sock", "::ffff:10.0.0.1", "fe80::1"],
            early.EarlyRead("unix:///a.sock", frozenset({"10.0.0.1", "fe80::1"})),
        ),
        (
            ["which", "10.0.0.1", "--runtime-endpoint=/x.sock"],
            early.EarlyRead("/x.sock", frozenset({"10.0.0.1"})),
        ),
        (["which", "10.0.0.1", "12"], None),  # a PID: /proc is read too
        (["which", "10.0.0.1", "-o", "json"], None),  # any other option
        (["which", "10.0.0.1", "-r", "a", "-r", "b"], None),  # click takes the last: not read
        (["which", "-r", "unix:///a.sock"], None),  # no IP: click's usage error
        (["pods"], None),
        (["-r", "unix:///a.sock", "which", "10.0.0.1"], None),
    ],
)
def test_the_forms_read_and_refused(argv: list[str], expected: early.EarlyRead | None) -> None:
    assert early.read_form(argv) == expected


def test_a_read_begins_with_the_cli_default_timeout() -> None:
    """The timeout a begun read has until ``claim`` sets the command's is the CLI's default."""
    assert early._INITIAL_TIMEOUT == DEFAULT_TIMEOUT


@pytest.fixture(scope="module")
def small_sim() -> Iterator[SimRuntime]:
    with SimRuntime(12, seed=3, churn=0.0) as runtime:
        yield runtime


def _an_ip(sim: SimRuntime) -> str:
    pods = OneShotRuntime(sim.endpoint, timeout=5.0).get_pods(False)
    return next(ip for pod in pods for ip in pod.ips)


def test_a_begun_read_is_handed_over_once_and_only_for_the_same_read(
    small_sim: SimRuntime,
) -> None:
    ip = _an_ip(small_sim)
    endpoint = small_sim.endpoint

    def claim(find_ips: frozenset[str]) -> OneShotRuntime | None:
        return early.claim(endpoint, timeout=7.0, config_path=None, ips=True, find_ips=find_ips)

    early.begin(["which", ip, "-r", endpoint])
    assert claim(frozenset({"10.9.9.9"})) is None  # another read: closed
    assert claim(frozenset({ip})) is None  # gone
    early.begin(["which", ip, "-r", endpoint])
    runtime = claim(frozenset({ip}))
    assert runtime is not None
    assert runtime.timeout == 7.0
    assert claim(frozenset({ip})) is None  # once
    found = runtime.get_pods(False).by_ip(ip)
    assert found is not None
    assert runtime.fallbacks == 0


def test_nothing_begins_for_a_runtime_that_is_not_there(tmp_path: object) -> None:
    early.begin(["which", "10.0.0.1", "-r", f"unix://{tmp_path}/none.sock"])
    assert early._begun is None


_WATCHED = (
    "import json, sys\n"
    "from podcache.cri import oneshot\n"
    "send = oneshot._Connection.send\n"
    "def watched(self, requests):\n"
    "    methods = sorted({method for method, _ in requests})\n"
    "    print(json.dumps([methods, 'click' in sys.modules]), file=sys.stderr, flush=True)\n"
    "    return send(self, requests)\n"
    "oneshot._Connection.send = watched\n"
    "oneshot.EARLY_WAIT = 60.0  # the listing is waited for however busy the machine is\n"
    "from podcache.cli import main\n"
    "main()\n"
)


def test_which_ip_asks_its_statuses_before_click_is_imported_and_each_once() -> None:
    """The console script's ``which IP`` (the oldest pod's: every pod's status needed), 110
    pods: the listing and the statuses asked ahead go out before click is imported; the
    runtime is listed once and asked each status at most once; the answer is the one a
    read that began nothing gives."""
    with SimRuntime(110, seed=11, churn=0.0) as sim:
        pods = OneShotRuntime(sim.endpoint, timeout=5.0).get_pods(False)
        oldest = next(ip for pod in reversed(pods) for ip in pod.ips)
        args = ["which", oldest, "-r", sim.endpoint]
        sim.reset_call_counts()
        done = subprocess.run(
            [sys.executable, "-c", _WATCHED, *args], capture_output=True, text=True, check=True
        )
        counts = sim.call_counts()
        sim.reset_call_counts()
        plain = subprocess.run(
            [sys.executable, "-c", "from podcache.cli import run; run()", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        counts_plain = sim.call_counts()
    sends = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("[")]
    assert sends[0] == [["ListContainers", "ListPodSandbox", "Version"], False]
    assert sends[1] == [["PodSandboxStatus"], False]  # asked ahead: before click
    assert _calls(counts, "ListPodSandbox") == _calls(counts_plain, "ListPodSandbox") == 1
    asked = _calls(counts, "PodSandboxStatus")
    assert asked == _calls(counts_plain, "PodSandboxStatus") > BATCH  # each once
    assert done.stdout == plain.stdout
    assert oldest in done.stdout


def _calls(counts: dict[str, dict[str, dict[str, int]]], method: str) -> int:
    return sum(kind["calls"] for kind in counts[method].values())
