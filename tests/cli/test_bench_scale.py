"""Smoke test of benchmarks/bench_scale.py: a tiny run has every case, sane numbers and
the files each case writes; the plain loop's greedy chunking is the greedy minimum."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "bench_scale.py"
ROWS = 300
IMAGES = 3
MAX_CHUNK_BYTES = 40_000  # ~0.2 MiB of requests: several chunks at 300 rows


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _table_rows(text: str, first_cell: str) -> list[list[str]]:
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            out.append(cells)
    return out


def _lines(path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


@pytest.mark.timeout(600)
def test_a_small_run_reports_every_case_with_sane_numbers(tmp_path):
    work = tmp_path / "work"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--rows",
            str(ROWS),
            "--images",
            str(IMAGES),
            "--image-side",
            "1024",
            "--max-chunk-bytes",
            str(MAX_CHUNK_BYTES),
            "--workdir",
            str(work),
            "--keep",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=590,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = (work / "bench.md").read_text(encoding="utf-8")
    assert report in proc.stdout
    for fact in ("nproc", "GiB RAM", "Python 3.", "Apache Beam 2.", "(UTC)"):
        assert fact in report

    cases = {cells[1]: cells for cells in _table_rows(report, f"{ROWS:,}") if len(cells) == 6}
    assert set(cases) == {
        "minimal loop",
        "floor tokens",
        "full loop",
        "dry run",
        "dry run (sample)",
        "submit",
        "merge",
        "dict join",
    }
    for name, (_n, _case, wall, cpu, rss, rate) in cases.items():
        wall_s, cpu_s, rss_mib = float(wall), float(cpu), float(rss)
        assert 0 < wall_s < 600, name
        assert 0 < cpu_s < 600, name
        assert 5 < rss_mib < 4096, name  # the whole tree: at least one Python process
        # The table rounds wall times to 0.01 s and rates to 1 row/s.
        rows_per_s = int(rate.replace(",", ""))
        assert ROWS / (wall_s + 0.005) - 1 <= rows_per_s <= ROWS / (wall_s - 0.005) + 1, name
    # Beam processes are larger than the plain loops.
    assert float(cases["dry run"][4]) > float(cases["minimal loop"][4])

    ratios = [c for c in _table_rows(report, f"{ROWS:,}") if len(c) == 9 and c[1].endswith("x")]
    assert len(ratios) == 1
    dry = float(cases["dry run"][2])
    _n, to_min, to_tokens, to_full, sample_to_min, submit, to_join, dry_rss, merge_rss = ratios[0]
    assert float(to_min[:-1]) == pytest.approx(dry / float(cases["minimal loop"][2]), rel=0.05)
    assert float(to_tokens[:-1]) == pytest.approx(dry / float(cases["floor tokens"][2]), rel=0.05)
    assert float(sample_to_min[:-1]) == pytest.approx(
        float(cases["dry run (sample)"][2]) / float(cases["minimal loop"][2]), rel=0.05
    )
    assert float(to_full[:-1]) == pytest.approx(dry / float(cases["full loop"][2]), rel=0.05)
    assert float(submit.split("x")[0]) == pytest.approx(float(cases["submit"][2]) / dry, rel=0.05)
    assert float(to_join[:-1]) == pytest.approx(
        float(cases["merge"][2]) / float(cases["dict join"][2]), rel=0.05
    )
    # The ratio row rounds the unrounded peak to 1 MiB, the case rows to 0.1 MiB: rounding
    # 298.5 again may give 298 where the bench printed 299 (from 298.52).
    for shown, case in ((dry_rss, "dry run"), (merge_rss, "merge")):
        assert shown.endswith(" MiB"), shown
        assert abs(int(shown[: -len(" MiB")]) - float(cases[case][4])) <= 0.55, (shown, case)

    cpu_ratios = [c for c in _table_rows(report, f"{ROWS:,}") if len(c) == 7 and c[1].endswith("x")]
    assert len(cpu_ratios) == 1
    dry_cpu = float(cases["dry run"][3])
    assert float(cpu_ratios[0][1][:-1]) == pytest.approx(
        dry_cpu / float(cases["minimal loop"][3]), rel=0.1
    )

    chunks = [c for c in _table_rows(report, f"{ROWS:,}") if len(c) == 7 and "MiB" in c[1]]
    assert len(chunks) == 1
    _n, _bytes, dry_chunks, greedy, shards, bound_ok, _largest = chunks[0]
    assert int(greedy) > 1 and int(dry_chunks) >= int(greedy)
    assert bound_ok == "yes" and int(dry_chunks) <= int(greedy) + int(shards)

    images = _table_rows(report, f"{IMAGES:,}")
    assert len(images) == 1 and len(images[0]) == 10
    assert float(images[0][2]) >= 1 and float(images[0][7]) > 5

    assert f"{ROWS:,} request lines identical to the full loop's" in report
    assert f"{ROWS:,} placeholder rows identical" in report
    # the floor counts what the dry run's exact estimate counts; the sampled estimate's
    # bound holds the exact count, and its export is the exact dry run's
    assert re.search(r"exact estimate [\d,]+ input tokens equals the floor's count", report)
    assert "is within the bound" in report
    assert "byte-identical to the exact dry run's" in report
    assert f"merged rows {ROWS:,} of {ROWS:,}; merged file byte-identical" in report

    # The files each case wrote (kept with --keep).
    size = work / f"rows{ROWS}"
    assert _lines(size / "rows.jsonl") == ROWS
    ids = {json.loads(ln)["id"] for ln in (size / "rows.jsonl").open(encoding="utf-8")}
    assert len(ids) == ROWS
    assert _lines(size / "minimal-r0" / "prompts.loopr0.jsonl") == ROWS
    assert not (size / "minimal-r0" / "meta").exists()  # the minimal loop writes the export only
    full = size / "full-r0"
    assert _lines(full / "prompts.loopr0.jsonl") == ROWS
    assert _lines(full / "meta" / "batch_metadata.dry-run.text.loopr0.jsonl") == int(greedy)
    assert _lines(full / "shards" / "shard_0" / "placeholders.loopr0-00000-of-00001.jsonl") == ROWS
    dry_dir = size / "dry-r0"
    assert _lines(dry_dir / "prompts.dryr0.jsonl") == ROWS
    assert _lines(dry_dir / "meta" / "batch_metadata.dry-run.text.dryr0.jsonl") == int(dry_chunks)
    live = size / "live-r0"
    assert _lines(live / "merged.jsonl") == ROWS
    assert (live / "merged.jsonl").read_bytes() == (live / "joined.jsonl").read_bytes()
    first = json.loads((live / "merged.jsonl").open(encoding="utf-8").readline())
    assert first["source_index"] == 0 and first["id"] == "gsm8k-00000000"
    assert first["review"].startswith("FAKE:")
    assert re.search(r"\bsubmit\b.*\bwall\b", proc.stdout)


def test_the_loops_greedy_chunks_are_full_and_within_limits(tmp_path):
    bench = _load_bench()
    rows = tmp_path / "rows.jsonl"
    bench.make_text_rows(120, rows)
    spec = {
        "rows": str(rows),
        "prompt": bench.PROMPT,
        "inputs": bench.INPUTS,
        "model": bench.MODEL,
        "output": bench.OUTPUT,
        "schema": bench.SCHEMA,
        "run_id": "t",
        "max_chunk_bytes": 6000,
        "max_requests_per_chunk": 9,
        "export": str(tmp_path / "export.jsonl"),
        "receipts": str(tmp_path / "meta" / "r.jsonl"),
        "invalid": str(tmp_path / "meta" / "invalid.jsonl"),
        "placeholders": str(tmp_path / "shards" / "p.jsonl"),
    }
    totals = bench.run_loop(spec, full=True)
    receipts = [json.loads(ln) for ln in open(spec["receipts"], encoding="utf-8")]
    assert totals["rows"] == totals["requests"] == 120
    assert totals["chunks"] == len(receipts) > 2
    sizes = [(r["total_bytes"], r["submitted_request_count"]) for r in receipts]
    assert sum(n for _b, n in sizes) == 120
    assert all(b <= 6000 and n <= 9 for b, n in sizes)
    # Greedy: each chunk but the last was closed because the next request did not fit.
    lines = open(spec["export"], "rb").read().splitlines()
    request_bytes = [len(ln.partition(b',"request":')[2][:-1]) + 1 for ln in lines]
    start = 0
    for b, n in sizes[:-1]:
        nxt = request_bytes[start + n]
        assert b + nxt > 6000 or n == 9
        start += n
    assert sum(request_bytes) == totals["request_bytes"]
    placeholders = [json.loads(ln) for ln in open(spec["placeholders"], encoding="utf-8")]
    assert placeholders[5] == {
        "id": "gsm8k-00000005",
        "question": placeholders[5]["question"],
        "review": "__BATCH_SUBMITTED__:review-text-5",
        "source_index": 5,
    }
    assert not (tmp_path / "meta" / "invalid.jsonl").exists()
