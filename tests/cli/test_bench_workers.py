"""Smoke test of benchmarks/bench_workers.py on the portable runner: a run of a few hundred
rows has every case (dry run and merge, 1 and 2 SDK workers), the pool started as many
worker processes as asked, and the outputs of 1 and 2 workers are the same.

It starts five Beam jobs (two dry runs, a submission, two merges, each with a fresh job
service and worker pool), about 1.5 to 2 minutes on a 2-core machine, so it runs only with
``MMIRAGE_SLOW_TESTS=1``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "bench_workers.py"
ROWS = 300

pytestmark = pytest.mark.skipif(
    os.environ.get("MMIRAGE_SLOW_TESTS") != "1",
    reason="set MMIRAGE_SLOW_TESTS=1 (five portable Beam jobs, about 2 minutes)",
)


def _table_rows(text: str, first_cell: str) -> list[list[str]]:
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            out.append(cells)
    return out


@pytest.mark.timeout(900)
def test_a_small_run_has_every_case_two_real_workers_and_the_same_outputs(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--rows", str(ROWS), "--order", "1,2"]
        + ["--workdir", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    for case in ("dry run", "merge"):
        runs = _table_rows(out, case)
        # the runs in order (12 cells), then the 2-vs-1 summary (8 cells)
        per_run = [r for r in runs if len(r) == 12]
        summary = [r for r in runs if len(r) == 8]
        assert [r[1] for r in per_run] == ["1", "2"], runs
        for r in per_run:
            started = int(r[6].split()[0])  # "2 (3.1 + 2.9)": worker processes started
            assert started == int(r[1]), r
            assert float(r[3]) > 0 and float(r[4]) > 0 and int(r[7].replace(",", "")) > 0
        assert len(summary) == 1 and summary[0][2].endswith("x"), runs
        assert summary[0][7].startswith("same:"), summary
        assert f"{ROWS:,}" in summary[0][7]
    assert "check FAILED" not in out
