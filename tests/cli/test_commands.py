"""The command set: help on every command, versions, shell completion, the mounted ``sim`` and
``serve`` commands, and a start-up that imports neither gRPC nor rich for ``--help``."""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import subprocess
import sys

import pytest

from podcache import __version__
from podcache.cri import DECODER, EVENT_DECODER, CRIRuntime
from podcache.sim import SimRuntime
from tests.cli.conftest import Runner, newest_sandbox_id, parse

COMMANDS = ["pods", "ps", "inspect", "watch", "which", "version", "completion", "sim", "serve"]


def test_help_lists_every_command(run: Runner) -> None:
    result = run("--help")
    assert result.returncode == 0, result
    listed = result.stdout.split("Commands:")[1].split()
    for command in COMMANDS:
        assert command in listed
    for option in ("--runtime-endpoint", "--config", "--timeout", "--sim", "--sim-fallback"):
        assert option in result.stdout


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "serve"])
def test_every_command_has_help(run: Runner, command: str) -> None:
    result = run(command, "-h")
    assert result.returncode == 0, result
    assert result.stdout.startswith(f"Usage: podcache {command}")
    assert len(result.stdout.splitlines()) > 5


def test_help_imports_neither_grpc_nor_rich_nor_yaml() -> None:
    code = (
        "import contextlib, io, sys\n"
        "from podcache.cli import run\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert run(['--help']) == 0\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'grpc', 'rich', 'yaml', 'uvicorn', 'httptools', 'uvloop'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_command_table_is_each_commands_own_help() -> None:
    """``--help`` lists the commands from ``app.COMMANDS`` without importing them: each row is
    the command its module holds, under its name, with its own one-line help (``sim`` and
    ``serve``, whose own help is longer, keep a line of their own)."""
    import click

    from podcache.cli.app import COMMANDS as TABLE
    from podcache.cli.app import cli

    assert cli.list_commands(click.Context(cli)) == sorted({*COMMANDS, "events"})
    for name, entry in TABLE.items():
        command = getattr(importlib.import_module(entry.module), entry.attribute)
        assert isinstance(command, click.Command)
        assert command.name == name
        if not entry.own_options:
            assert command.get_short_help_str(200) == entry.short_help, name


@pytest.mark.parametrize("args", [["--help"], ["pods"], ["ps"], ["which", "10.0.0.1"], ["version"]])
def test_a_command_imports_no_other_commands_module(args: list[str], sim: SimRuntime) -> None:
    """Start-up (docs/architecture.md §6 rule 1): a command imports its own module only, and
    ``--help`` none of them (without a clock: which modules are in ``sys.modules``)."""
    code = (
        "import contextlib, io, json, sys\n"
        "from podcache.cli import run\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    run(sys.argv[1:])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('podcache.cli.'))))\n"
    )
    runtime = [] if args == ["--help"] else ["-r", sim.endpoint]
    done = subprocess.run(
        [sys.executable, "-c", code, *args, *runtime], capture_output=True, text=True, check=True
    )
    imported = json.loads(done.stdout.splitlines()[-1])
    commands = [m for m in imported if m.startswith("podcache.cli.commands.")]
    assert commands == ([] if args == ["--help"] else [f"podcache.cli.commands.{args[0]}"])


def test_version_imports_no_model_and_names_the_decoders(sim: SimRuntime) -> None:
    """``podcache version`` reads the decoders' names without the model or the conversion
    (start-up), and they are ``podcache.cri``'s."""
    code = (
        "import contextlib, io, json, sys\n"
        "from podcache.cli import run\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    run(sys.argv[1:])\n"
        "print(json.dumps([out.getvalue(), 'podcache.model' in sys.modules,"
        " 'podcache.cri.convert' in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "version", "-r", sim.endpoint],
        capture_output=True,
        text=True,
        check=True,
    )
    printed, model, convert = json.loads(done.stdout.splitlines()[-1])
    assert (model, convert) == (False, False)
    assert f"Decoder:           {DECODER}\n" in printed
    assert f"EventDecoder:      {EVENT_DECODER}\n" in printed
    assert ("c" if EVENT_DECODER == "c" else "protobuf") == DECODER


_TORN_DOWN = (
    "import atexit, sys, threading\n"
    "from podcache.cli import main\n"
    "class Witness:\n"
    "    def __del__(self):\n"
    "        sys.stderr.write('torn down\\n')\n"
    "witness = Witness()\n"
)


@pytest.mark.parametrize(
    "setup, teardown",
    [
        ("", False),
        ("atexit.register(sys.stderr.write, 'atexit ran\\n')\n", True),
        ("threading.Thread(target=threading.Event().wait, args=(0.2,)).start()\n", True),
    ],
    ids=["idle", "atexit-callback", "thread-alive"],
)
def test_the_console_script_skips_the_teardown_only_when_it_has_nothing_to_run(
    setup: str, teardown: bool
) -> None:
    """``main()`` (argv None) exits at once when only memory is left to free: a module's
    object is then never finalized; with an atexit callback or another thread alive the
    interpreter exits as ever. The output and the status are the same either way."""
    code = _TORN_DOWN + setup + "main()\n"
    done = subprocess.run(
        [sys.executable, "-c", code, "--version"], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, f"podcache, version {__version__}\n")
    assert ("torn down" in done.stderr) is teardown, done.stderr
    assert ("atexit ran" in done.stderr) is ("atexit" in setup)
    in_process = subprocess.run(  # main(argv) for a caller in Python: SystemExit, as ever
        [sys.executable, "-c", _TORN_DOWN + "main(['--version'])\n"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (in_process.returncode, "torn down" in in_process.stderr) == (0, True)


def test_version_option_needs_no_runtime(run: Runner) -> None:
    result = run("--version")
    assert result.returncode == 0, result
    assert result.stdout.strip() == f"podcache, version {__version__}"


def test_version_reports_the_runtimes_version_answer(run: Runner, sim: SimRuntime) -> None:
    with CRIRuntime(sim.endpoint) as runtime:
        answer = runtime.version()
    table = run("version", "-r", sim.endpoint)
    assert table.returncode == 0, table
    fields = dict(re.split(r":\s+", line, maxsplit=1) for line in table.lines())
    assert fields == {
        "PodcacheVersion": __version__,
        "Decoder": DECODER,
        "EventDecoder": EVENT_DECODER,
        "Endpoint": sim.endpoint,
        "Version": answer.version,
        "RuntimeName": answer.runtime_name,
        "RuntimeVersion": answer.runtime_version,
        "RuntimeApiVersion": answer.runtime_api_version,
    }
    as_json = run("version", "-r", sim.endpoint, "-o", "json")
    assert json.loads(as_json.stdout)["runtime_name"] == answer.runtime_name == "podcache-sim"


@pytest.mark.parametrize("output", ["table", "json"])
def test_version_without_a_runtime_prints_podcaches_own_then_fails(
    run: Runner, output: str
) -> None:
    gone = f"unix://{run.scratch}/no-runtime.sock"
    result = run("version", "-r", gone, "-o", output)
    assert result.returncode == 1, result
    own = {"podcache_version": __version__, "decoder": DECODER, "event_decoder": EVENT_DECODER}
    if output == "json":
        assert json.loads(result.stdout) == own
    else:
        assert result.lines() == [
            f"PodcacheVersion:   {__version__}",
            f"Decoder:           {DECODER}",
            f"EventDecoder:      {EVENT_DECODER}",
        ]
    assert "no-runtime.sock" in result.stderr  # the error names the endpoint


def test_version_with_sim_reports_the_simulation(run: Runner) -> None:
    result = run("version", "--sim", "-o", "yaml")
    assert result.returncode == 0, result
    document = parse("yaml", result.stdout)
    assert document["runtime_name"] == "podcache-sim"
    assert document["podcache_version"] == __version__
    assert document["endpoint"].startswith("unix:///")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_shell_script(run: Runner, shell: str) -> None:
    result = run("completion", shell)
    assert result.returncode == 0, result
    assert "_PODCACHE_COMPLETE" in result.stdout
    assert f"{shell}_complete" in result.stdout


def test_completion_completes_commands_and_options(run: Runner) -> None:
    def complete(words: str) -> list[str]:
        env = {
            "_PODCACHE_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split(" ")) - 1),
        }
        result = run(env=env)
        assert result.returncode == 0, result
        return [line.split(",", 1)[1] for line in result.lines()]

    assert complete("podcache p") == ["pods", "ps"]
    assert {"--namespace", "--name", "--no-trunc"} <= set(complete("podcache pods --n"))
    assert complete("podcache pods -o ") == ["table", "wide", "json", "yaml"]


def test_sim_command_is_mounted_and_serves_a_runtime(run: Runner) -> None:
    process = subprocess.Popen(
        [run.exe, "sim", "--pods", "5", "--seed", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=run.env(),
    )
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().strip()
        assert endpoint.startswith("unix:///"), endpoint
        with CRIRuntime(endpoint) as runtime:
            expected = [newest_sandbox_id(p) for p in runtime.get_pods(False)]
        result = run("pods", "-q", "-r", endpoint)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=15)
    finally:
        process.kill()
        process.wait()
    assert result.returncode == 0, result
    assert result.lines() == expected
    assert process.returncode == 0


def test_serve_command_is_mounted(run: Runner) -> None:
    result = run("serve", "--help")
    try:
        available = importlib.util.find_spec("podcache.serve.command") is not None
    except ImportError:
        available = False
    if available:
        assert result.returncode == 0, result
        assert result.stdout.startswith("Usage: podcache serve")
    else:
        assert result.returncode == 1, result
        assert "'podcache serve' is not available" in result.stderr
        assert "Traceback" not in result.stderr
