"""House keeping runs with the tests: ruff format and ruff check must pass."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "ruff", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", [("format", "--check", "."), ("check", ".")])
def test_ruff(args):
    proc = _ruff(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
