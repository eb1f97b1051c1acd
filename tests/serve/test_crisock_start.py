"""``podcache serve --cri-listen``: what a start may touch, and who may connect
(``podcache.unixsocket`` rules 1-3; docs/architecture.md §10 rule 1).

A serve that cannot claim its path refuses in one line and removes nothing; a path is removed
only by the process that bound it, and only the inode it bound. Real parts: ``podcache serve``
in its own process, the simulator's live socket, processes under other user and group ids.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from podcache.cri.proto import api_pb2 as pb
from podcache.sim import SimRuntime
from tests.serve.conftest import ServeProcess, free_port

pytestmark = pytest.mark.timeout(300)

AGENT_GROUP = 2000
"""The group the docs give the socket (deploy/README.md): serve and its agents are in it."""
SERVE_UID = 65532
"""The DaemonSet's user and group for serve (deploy/base/daemonset.yaml)."""


@pytest.fixture(scope="module")
def sim() -> Iterator[SimRuntime]:
    with SimRuntime(6, seed=3) as runtime:
        yield runtime


def serve_args(sim: SimRuntime, *more: str) -> list[str]:
    """serve's arguments: the runtime, a TCP listener, then ``more``."""
    return ["-r", sim.endpoint, "--listen", f"127.0.0.1:{free_port()}", *more]


def refused_start(
    sim: SimRuntime, *args: str, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``podcache serve`` with ``args`` that must not start: its exit and output."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "podcache.serve", *serve_args(sim, *args)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def one_line_refusal(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if "rror" in line]
    assert len(errors) == 1, result.stderr
    for word in words:
        assert word in errors[0], result.stderr


def identity(path: str) -> tuple[int, int, int]:
    status = os.lstat(path)
    return status.st_mode, status.st_dev, status.st_ino


def lists(path: str) -> int:
    with grpc.insecure_channel(f"unix://{path}") as channel:
        call = channel.unary_unary(
            "/runtime.v1.RuntimeService/ListPodSandbox",
            request_serializer=bytes,
            response_deserializer=bytes,
        )
        answer = call(pb.ListPodSandboxRequest().SerializeToString(), timeout=30)
    return len(pb.ListPodSandboxResponse.FromString(answer).items)


def direct(sim: SimRuntime) -> str:
    return sim.endpoint.removeprefix("unix://")


# -- rule 3: a refused start removes nothing --------------------------------------------------
def test_a_serve_refused_on_the_runtimes_socket_leaves_the_runtime_reachable(
    sim: SimRuntime,
) -> None:
    runtime_path = sim.endpoint.removeprefix("unix://")
    before = identity(runtime_path)
    listed = lists(runtime_path)
    result = refused_start(sim, "--cri-listen", runtime_path)
    one_line_refusal(result, runtime_path, "another server is listening")
    assert identity(runtime_path) == before
    assert lists(runtime_path) == listed > 0


def test_a_second_serve_on_a_running_serves_path_leaves_the_first_one_serving(
    sim: SimRuntime, tmp_path: Path
) -> None:
    path = str(tmp_path / "cri.sock")
    first = ServeProcess(serve_args(sim, "--cri-listen", path))
    with first:
        before = identity(path)
        result = refused_start(sim, "--cri-listen", path)
        one_line_refusal(result, path, "another server is listening")
        assert identity(path) == before
        assert lists(path) == lists(direct(sim))
    assert first.returncode == 0, first.stderr
    assert not os.path.lexists(path)  # the first serve removed what it bound


@pytest.mark.parametrize("kind", ["regular file", "symlink"])
def test_a_file_that_is_not_a_socket_is_refused_and_left_alone(
    sim: SimRuntime, tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "cri.sock"
    if kind == "symlink":
        target = tmp_path / "target"
        target.write_text("precious")
        path.symlink_to(target)
    else:
        path.write_text("precious")
    before = identity(str(path))
    result = refused_start(sim, "--cri-listen", str(path))
    one_line_refusal(result, str(path), "not a socket")
    assert identity(str(path)) == before
    assert path.read_text() == "precious"


def test_a_world_writable_directory_without_the_sticky_bit_is_refused(
    sim: SimRuntime, tmp_path: Path
) -> None:
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(0o777)
    result = refused_start(sim, "--cri-listen", str(directory / "cri.sock"))
    one_line_refusal(result, str(directory), "writable by every user")
    assert list(directory.iterdir()) == []


def test_a_sticky_world_writable_directory_is_accepted(sim: SimRuntime, tmp_path: Path) -> None:
    directory = tmp_path / "sticky"
    directory.mkdir()
    directory.chmod(0o1777)
    path = str(directory / "cri.sock")
    with ServeProcess(serve_args(sim, "--cri-listen", path)):
        assert lists(path) == lists(direct(sim))


def test_a_mode_open_to_every_user_is_warned_about(sim: SimRuntime, tmp_path: Path) -> None:
    path = str(tmp_path / "cri.sock")
    served = ServeProcess(serve_args(sim, "--cri-listen", path, "--cri-socket-mode", "0777"))
    with served:
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o777
    warnings = [line for line in served.stderr.splitlines() if "--cri-socket-mode 0777" in line]
    assert len(warnings) == 1 and "warning" in warnings[0], served.stderr


# -- who may connect: the docs' set-up for agents that are not root --------------------------
@pytest.fixture
def shared_directory() -> Iterator[str]:
    """A directory every id may enter (pytest's own is root's 0700), owned by serve's user as
    the DaemonSet's init container leaves /run/podcache-cri."""
    directory = tempfile.mkdtemp(prefix="podcache-cri-")
    os.chmod(directory, 0o755)
    os.chown(directory, SERVE_UID, SERVE_UID)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _closed_ancestor(path: Path) -> Path | None:
    """The highest directory above ``path`` that other users may not enter, if any."""
    for depth in range(2, len(path.parts)):
        ancestor = Path(*path.parts[:depth])
        if not os.stat(ancestor).st_mode & stat.S_IXOTH:
            return ancestor
    return None


def _needed_trees() -> list[Path]:
    """What the other ids must reach: the interpreter's installation and this checkout (its
    virtualenv and sources), each as its outermost directory."""
    interpreter = Path(os.path.realpath(sys.executable)).parents[1]
    checkout = Path(__file__).resolve().parents[2]
    trees = sorted({interpreter, checkout})
    return [tree for tree in trees if not any(tree.is_relative_to(t) and tree != t for t in trees)]


def _reachable_script(trees: list[Path]) -> list[str]:
    """A shell script that, in a mount namespace of its own, makes ``trees`` reachable by every
    user where a closed directory (root's 0700 home) is above them: each tree is bound aside,
    a world-readable tmpfs covers the closed directory, the tree is bound back in its place;
    then it runs ``setpriv`` with its arguments."""
    lines = ["set -e"]
    moves = []
    covers = []
    for tree in trees:
        closed = _closed_ancestor(tree)
        if closed is None:
            continue
        aside = tempfile.mkdtemp(prefix="podcache-tree-")
        moves.append((shlex.quote(str(tree)), shlex.quote(aside)))
        if closed not in covers:
            covers.append(closed)
    lines += [f"mount --bind {tree} {aside}" for tree, aside in moves]
    lines += [f"mount -t tmpfs -o mode=0755 podcache-test {shlex.quote(str(c))}" for c in covers]
    lines += [f"mkdir -p {tree} && mount --bind {aside} {tree}" for tree, aside in moves]
    if not moves:
        return []
    script = "; ".join(lines) + '; exec setpriv "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]


def under_ids(*setpriv: str) -> list[str]:
    """A command prefix that runs the rest under ``setpriv``'s ids and capabilities, with this
    interpreter and checkout reachable by them (either may live under /root, which only root
    may enter)."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("these tests run processes under other ids: CI runs as root")
        pytest.skip("runs processes under other ids: needs root")
    for tool in ("setpriv", "unshare"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} (util-linux) runs the processes under other ids")
    namespace = _reachable_script(_needed_trees())
    return [*namespace, *([] if namespace else ["setpriv"]), *setpriv, "--"]


SERVE_IDS = ("--reuid", str(SERVE_UID), "--regid", str(SERVE_UID), "--groups")
"""serve as the DaemonSet runs it: uid/gid 65532, no capabilities; then its groups."""


CLIENT = (
    "import sys, grpc\n"
    "from podcache.cri.proto import api_pb2 as pb\n"
    "channel = grpc.insecure_channel('unix://' + sys.argv[1])\n"
    "call = channel.unary_unary('/runtime.v1.RuntimeService/ListPodSandbox')\n"
    "try:\n"
    "    answer = call(pb.ListPodSandboxRequest().SerializeToString(), timeout=30)\n"
    "except grpc.RpcError as error:\n"
    "    print('refused', error.code().name); sys.exit(1)\n"
    "print('listed', len(pb.ListPodSandboxResponse.FromString(answer).items))\n"
)


def client(path: str, prefix: list[str]) -> str:
    result = subprocess.run(
        [*prefix, sys.executable, "-c", CLIENT, path],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result.stdout.strip() or result.stderr.strip()


def test_a_group_serve_cannot_give_is_refused_in_one_line(sim: SimRuntime) -> None:
    group = ("--cri-socket-mode", "0660", "--cri-socket-group", "1234")
    prefix = tuple(under_ids(*SERVE_IDS, "0"))
    result = refused_start(sim, "--cri-listen", "/tmp/never.sock", *group, prefix=prefix)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "cannot give its socket to group 1234" in result.stderr
    assert "uid 65532" in result.stderr


@pytest.fixture
def node_runtime(shared_directory: str) -> Iterator[SimRuntime]:
    """A runtime whose socket is root:root 0660, as containerd and CRI-O create theirs: serve
    reaches it through its supplementary group 0 (deploy/base/daemonset.yaml)."""
    directory = os.path.join(shared_directory, "runtime")
    os.mkdir(directory, 0o755)
    with SimRuntime(6, seed=3, socket=os.path.join(directory, "runtime.sock")) as runtime:
        os.chmod(direct(runtime), 0o660)
        yield runtime


def test_the_documented_setup_admits_a_non_root_agent_and_root_without_dac_override(
    node_runtime: SimRuntime, shared_directory: str
) -> None:
    sim = node_runtime
    path = os.path.join(shared_directory, "cri.sock")
    serve_ids = under_ids(*SERVE_IDS, f"0,{AGENT_GROUP}")
    args = ["--cri-socket-mode", "0660", "--cri-socket-group", str(AGENT_GROUP)]
    served = ServeProcess(serve_args(sim, "--cri-listen", path, *args), prefix=serve_ids)
    listed = f"listed {lists(direct(sim))}"
    with served:
        status = os.lstat(path)
        assert (status.st_uid, status.st_gid) == (SERVE_UID, AGENT_GROUP)
        assert stat.S_IMODE(status.st_mode) == 0o660
        agent = under_ids("--reuid", "1000", "--regid", "1000", "--groups", str(AGENT_GROUP))
        outsider = under_ids("--reuid", "1000", "--regid", "1000", "--clear-groups")
        assert client(path, agent) == listed
        assert client(path, outsider) == "refused UNAVAILABLE"
        no_override = ("--bounding-set", "-dac_override,-dac_read_search")
        assert client(path, under_ids(*no_override, "--groups", str(AGENT_GROUP))) == listed
        assert client(path, under_ids(*no_override, "--clear-groups")) == "refused UNAVAILABLE"
    assert served.returncode == 0, served.stderr
    assert "WARNING" not in served.stderr, served.stderr
