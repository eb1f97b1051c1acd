"""The console script's start-up (``podcache.cli.startup``): the cyclic GC is off while click
and the command are imported and on when any command runs; a caller of ``run()`` in Python
keeps its collector as it was. Causality, not a clock: the collector's state is read at the
moment click is imported and at the moment a command's callback runs."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest

from podcache.cli import startup
from podcache.cli.options import RuntimeSettings
from podcache.cli.source import open_source
from podcache.sim import SimRuntime


def _observing(command: str) -> str:
    """A script that records whether the collector is on when click is imported and when
    ``command``'s callback is called (which then returns without running it)."""
    return (
        "import gc, importlib.machinery, json, sys, atexit\n"
        "seen = {}\n"
        "def observe(module):\n"
        f"    command = module.{command}_command\n"
        "    def observed(*args, **kwargs):\n"
        "        seen['running the command'] = gc.isenabled()\n"
        "    command.callback = observed\n"
        "class Watch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'click':\n"
        "            seen['importing click'] = gc.isenabled()\n"
        f"        if name != 'podcache.cli.commands.{command}':\n"
        "            return None\n"
        "        spec = importlib.machinery.PathFinder.find_spec(name, path)\n"
        "        run = spec.loader.exec_module\n"
        "        spec.loader.exec_module = lambda module: (run(module), observe(module))\n"
        "        return spec\n"
        "sys.meta_path.insert(0, Watch())\n"
        "atexit.register(lambda: print(json.dumps(seen), file=sys.stderr))\n"
    )


@pytest.mark.parametrize("command", ["ps", "events"])
@pytest.mark.parametrize("call", ["main()", "main(sys.argv[1:])", "run(sys.argv[1:])"])
def test_collection_is_paused_for_start_up_only_by_the_console_script(
    call: str, command: str
) -> None:
    """``main()``: off while click is imported; when a command runs, on again unless it
    reads once and ends (``ps``; ``events`` keeps running). ``main(argv)`` and ``run(argv)``
    (Python callers) leave the collector on throughout."""
    code = _observing(command) + f"from podcache.cli import main, run\n{call}\n"
    done = subprocess.run(
        [sys.executable, "-c", code, command], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stderr.strip().splitlines()[-1])
    paused = call == "main()"
    assert seen == {
        "importing click": not paused,
        "running the command": not (paused and command == "ps"),
    }


def test_a_command_that_follows_the_runtime_resumes_collection(sim: SimRuntime) -> None:
    """``pods -w`` reads once by its name: opening a runtime to follow resumes the collector."""
    try:
        startup.pause_collection()
        with open_source(RuntimeSettings(endpoint=sim.endpoint), one_shot=True):
            assert not gc.isenabled()
        with open_source(RuntimeSettings(endpoint=sim.endpoint)):
            assert gc.isenabled()
    finally:
        startup.resume_collection()
        gc.enable()


def test_resume_turns_on_only_what_pause_turned_off() -> None:
    assert gc.isenabled()
    try:
        gc.disable()  # a caller that runs without the collector keeps it so
        startup.pause_collection()
        startup.resume_collection()
        assert not gc.isenabled()
        gc.enable()
        startup.pause_collection()
        assert not gc.isenabled()
        startup.resume_collection()
        assert gc.isenabled()
        startup.resume_collection()  # twice: nothing more
        assert gc.isenabled()
    finally:
        gc.enable()
