"""The committed CRI stubs are exactly what scripts/gen-proto makes from api.proto now."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROTO_DIR = ROOT / "src" / "podcache" / "cri" / "proto"
GENERATED = ("api_pb2.py", "api_pb2.pyi")


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen-proto"), str(tmp_path)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    fresh_dir = tmp_path / "podcache" / "cri" / "proto"
    stale = [
        name
        for name in GENERATED
        if (fresh_dir / name).read_bytes() != (PROTO_DIR / name).read_bytes()
    ]
    assert not stale, f"stale generated stubs {stale}: run scripts/gen-proto and commit the result"
