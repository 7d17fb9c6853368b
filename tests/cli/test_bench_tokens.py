"""Smoke test of benchmarks/bench_tokens.py at a tiny size: every case in its own
process, the labels right (prose exact, an unbroken run an estimate), the table shaped.
The measured bound itself (20 MB: unbroken at most 2x words' time, under 300 MiB) is the
benchmark's ``--check`` at full size, run by hand: see README, "Benchmarks"."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "bench_tokens.py"


def test_a_tiny_run_prints_every_case_with_its_label():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--mb", "0.05", "--cases", "words,unbroken"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {
        cells[0]: cells
        for line in proc.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| case")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    assert sorted(rows) == ["unbroken", "words"]
    assert rows["words"][4] == "yes" and rows["words"][5] == "1.00x"
    assert rows["unbroken"][4] == "estimate" and rows["unbroken"][3] == "6,250"  # 8 x's a token
    assert str(REPO / "mmirage_beam") in proc.stdout  # the tree measured is named
