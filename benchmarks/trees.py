"""Another commit's ``src/`` beside this checkout's, for a baseline measured in the same run.

``tree_at(commit)`` unpacks ``git archive COMMIT`` into a temporary directory once per process
and builds its C extension in place (where it builds: the reader is optional, and a tree
without it runs, slower), so ``PYTHONPATH=<its src>`` runs that commit's podcache with this
checkout's virtualenv. ``this_tree()`` is this checkout's ``src``. Nothing here measures.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Tree:
    """A podcache source tree to run: its name in reports and its ``src`` directory."""

    name: str
    src: Path

    def env(self) -> dict[str, str]:
        """The environment that runs this tree's podcache (``python -m podcache...``)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.src)
        return env


_made: dict[str, Tree] = {}


def this_tree(name: str = "this") -> Tree:
    return Tree(name, ROOT / "src")


def tree_at(commit: str, name: str | None = None) -> Tree:
    """``commit``'s tree, unpacked and built (removed when this process exits)."""
    if commit in _made:
        return _made[commit]
    full = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{commit}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    directory = Path(tempfile.mkdtemp(prefix=f"podcache-{full[:8]}-"))
    atexit.register(shutil.rmtree, directory, True)
    archive = directory / "tree.tar"
    subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), full], check=True
    )
    with tarfile.open(archive) as unpacked:
        unpacked.extractall(directory, filter="data")
    archive.unlink()
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=directory,
        check=False,  # optional: without a compiler the tree reads lists with protobuf
        capture_output=True,
    )
    tree = _made[commit] = Tree(name or full[:7], directory / "src")
    return tree
