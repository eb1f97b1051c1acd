"""Which CRI list and event decoders run is said, and a slow install is not silent:
``podcache version`` and ``/metrics`` (``podcache_build_info{decoder=...,event_decoder=...}``)
name them, and ``serve`` warns once at
start-up when it is protobuf's.

The fallback is a real install: this repository installed with ``CC=/bin/false`` (no compiler,
so setuptools skips the optional extension, as on a machine without gcc) into a directory put
first on ``PYTHONPATH``; the dependencies are this environment's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from podcache import __version__
from podcache.cri import DECODER, EVENT_DECODER
from podcache.sim import SimRuntime
from tests.serve.conftest import Client, ServeProcess

ROOT = Path(__file__).resolve().parents[2]
WARNING = "the C list reader (podcache.cri._wire) is not built in this install"
BUILD_INFO = re.compile(r"^podcache_build_info\{(?P<labels>[^}]*)\} 1\.0$", re.MULTILINE)


@pytest.fixture(scope="module")
def fallback_install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``pip install`` of this checkout made without a C compiler: its directory."""
    target = tmp_path_factory.mktemp("fallback")
    build = tmp_path_factory.mktemp("fallback-build")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--no-index", "--target", str(target), str(ROOT)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CC": "/bin/false", "TMPDIR": str(build)},
        check=False,
    )
    assert done.returncode == 0, f"the install without a compiler failed: {done.stderr}"
    assert not list((target / "podcache" / "cri").glob("_wire*.so")), "the extension was built"
    yield str(target)


def on_path(install: str) -> dict[str, str]:
    return {"PYTHONPATH": install}


def labels(metrics: str) -> dict[str, str]:
    found = BUILD_INFO.findall(metrics)
    assert len(found) == 1, metrics
    return dict(re.findall(r'(\w+)="([^"]*)"', found[0]))


def test_the_fallback_install_says_protobuf_in_version(fallback_install: str) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-c", "from podcache.cli import main; main()"),
            *("version", "--sim", "-o", "json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **on_path(fallback_install)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert (document["decoder"], document["event_decoder"]) == ("protobuf", "python")


def test_the_fallback_install_warns_once_at_serve_start_and_says_protobuf_in_metrics(
    fallback_install: str, tmp_socket_dir: Path
) -> None:
    path = str(tmp_socket_dir / "s.sock")
    with SimRuntime(3, seed=1) as sim:
        server = ServeProcess(
            ["-r", sim.endpoint, "--listen", f"unix:{path}"], on_path(fallback_install)
        )
        with server:
            metrics = Client(path=path).get("/metrics").body.decode()
    assert server.stderr.count(WARNING) == 1, server.stderr
    found = labels(metrics)
    assert (found["decoder"], found["event_decoder"]) == ("protobuf", "python")


def test_this_install_names_its_decoder_in_metrics_and_warns_only_without_c(
    tmp_socket_dir: Path,
) -> None:
    path = str(tmp_socket_dir / "s.sock")
    with SimRuntime(3, seed=1) as sim:
        server = ServeProcess(["-r", sim.endpoint, "--listen", f"unix:{path}"])
        with server:
            metrics = Client(path=path).get("/metrics").body.decode()
    found = labels(metrics)
    assert found["decoder"] == DECODER
    assert found["event_decoder"] == EVENT_DECODER
    assert found["version"] == __version__
    assert found["python"] == ".".join(map(str, sys.version_info[:3]))
    assert (WARNING in server.stderr) == (DECODER != "c"), server.stderr
