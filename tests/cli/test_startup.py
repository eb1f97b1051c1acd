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

_OBSERVED = (
    "import gc, importlib.machinery, json, sys, atexit\n"
    "seen = {}\n"
    "def observe(module):\n"
    "    callback = module.completion_command.callback\n"
    "    def observed(*args, **kwargs):\n"
    "        seen['running the command'] = gc.isenabled()\n"
    "        return callback(*args, **kwargs)\n"
    "    module.completion_command.callback = observed\n"
    "class Watch:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'click':\n"
    "            seen['importing click'] = gc.isenabled()\n"
    "        if name != 'podcache.cli.commands.completion':\n"
    "            return None\n"
    "        spec = importlib.machinery.PathFinder.find_spec(name, path)\n"
    "        run = spec.loader.exec_module\n"
    "        spec.loader.exec_module = lambda module: (run(module), observe(module))\n"
    "        return spec\n"
    "sys.meta_path.insert(0, Watch())\n"
    "atexit.register(lambda: print(json.dumps(seen), file=sys.stderr))\n"
)


@pytest.mark.parametrize(
    "call", ["main()", "main(['completion', 'bash'])", "run(['completion', 'bash'])"]
)
def test_collection_is_paused_for_start_up_only_by_the_console_script(call: str) -> None:
    """``main()``: off while click is imported, on when the command runs. ``main(argv)`` and
    ``run(argv)`` (Python callers) leave the collector on throughout."""
    code = _OBSERVED + f"from podcache.cli import main, run\n{call}\n"
    done = subprocess.run(
        [sys.executable, "-c", code, "completion", "bash"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stderr.strip().splitlines()[-1])
    paused = call == "main()"
    assert seen == {"importing click": not paused, "running the command": True}


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
