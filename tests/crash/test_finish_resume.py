"""A run whose batches all exist but whose finish step died is completed by a resume
that contacts no provider; merge and check call it "finish step pending", not unfinished.

Each finish step is killed once with the project's crash hook (``MMIRAGE_CRASH_AT``,
:mod:`mmirage_beam.crashpoints`): ``publishing`` (placeholder rows being moved into
``output_dir``), ``consolidated`` (a receipt file rewritten, its parts not yet removed),
``finishing`` (receipts consolidated, run record not yet marked finished). The fake's
call counters prove the resume sends nothing: no upload, no create, no call at all.

The ``publishing`` case keeps its receipts (and so the staged rows) on a tmpfs,
``/dev/shm``, and its rows on the test disk, so the placeholder files cross filesystems
(on the main disk where ``/dev/shm`` is not a filesystem of its own): killed, ``check``
(exit 0, "finish step pending"), the resume, then ``merge`` (exit 0, every row).

The killed run is a CLI subprocess (only a process can be SIGKILLed); ``check``, the
resume and ``merge`` after it run ``mmirage`` in the test process
(``tests.runners.run_cli_in_process``: same folder, environment, exit status and
output; a cold process costs seconds of imports each). ``MMIRAGE_SLOW_TESTS=1`` also runs the
``consolidated`` and ``finishing`` cases (a killed run, merge's "finish step pending",
the resume; ``benchmarks/crash_suite.py`` runs them too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import GSM8K_JSONL, REPO, base_config, write_config
from tests.runners import run_cli_in_process

ROWS = 30
SLOW = os.environ.get("MMIRAGE_SLOW_TESTS") == "1"
_slow = pytest.mark.skipif(not SLOW, reason="set MMIRAGE_SLOW_TESTS=1 (two CLI runs each)")


def _cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``mmirage ARGS`` in a subprocess (for the run that is killed)."""
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _setup(tmp_path: Path, fake, meta_dir: Path | None = None) -> tuple[str, dict[str, str]]:  # noqa: ANN001
    data = tmp_path / "rows.jsonl"
    with open(GSM8K_JSONL, encoding="utf-8") as src:
        data.write_text("".join(next(src) for _ in range(ROWS)), encoding="utf-8")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url, max_requests_per_chunk=8)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    if meta_dir is not None:
        cfg["processors"][0]["metadata_output_path"] = str(meta_dir / "batch_metadata.jsonl")
    env = dict(os.environ, PYTHONPATH=str(REPO), OPENAI_API_KEY="sk-test-openai")
    env.pop("MMIRAGE_CRASH_AT", None)
    return write_config(tmp_path, cfg), env


def _placeholder_lines(tmp_path: Path) -> list[str]:
    files = sorted((tmp_path / "shards" / "shard_0").glob("placeholders.r1-*.jsonl"))
    return [line for f in files for line in f.read_text(encoding="utf-8").splitlines()]


def _assert_finished(tmp_path: Path, meta: Path, fake) -> None:  # noqa: ANN001
    record = json.loads((meta / "batch_metadata.run.r1.json").read_text(encoding="utf-8"))
    assert record["finished"] is True
    assert not (meta / "batch_metadata.submitted.r1.json").exists()
    assert not list(meta.glob("*.parts"))  # consolidated
    lines = _placeholder_lines(tmp_path)
    assert len(lines) == ROWS  # every row once
    assert sorted(json.loads(x)["answer"] for x in lines) == sorted(
        f"__BATCH_SUBMITTED__:answer-text-{i}" for i in range(ROWS)
    )
    counts = fake.create_counts()
    assert sorted(counts) == sorted(f"answer-text-{i}" for i in range(ROWS))
    assert set(counts.values()) == {1}  # 0 duplicates, 0 unsent


def _ramdisk_or_none(tmp_path: Path) -> Path | None:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        if os.stat(shm).st_dev != os.stat(tmp_path).st_dev:
            return shm / f"mmirage-test-{uuid.uuid4().hex[:12]}"
    return None


@pytest.mark.parametrize(
    "step",
    [
        "publishing",
        pytest.param("consolidated", marks=_slow),
        pytest.param("finishing", marks=_slow),
    ],
)
def test_a_killed_finish_step_is_completed_by_a_resume_that_sends_nothing(
    tmp_path, fake_provider, step
):
    ramdisk = _ramdisk_or_none(tmp_path) if step == "publishing" else None
    meta = ramdisk or tmp_path / "meta"
    try:
        _killed_then_finished(tmp_path, fake_provider, step, meta)
    finally:
        if ramdisk is not None:
            import shutil

            shutil.rmtree(ramdisk, ignore_errors=True)


def _killed_then_finished(tmp_path: Path, fake, step: str, meta: Path) -> None:  # noqa: ANN001
    config, env = _setup(tmp_path, fake, meta_dir=meta)
    crashed = _cli(
        ["run", "--config", config, "--run-id", "r1"], tmp_path, {**env, "MMIRAGE_CRASH_AT": step}
    )
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    assert (meta / "batch_metadata.submitted.r1.json").exists()  # every batch receipted
    assert len(fake.batches()) == 4

    pending = "finish step pending: run r1"
    command = f"mmirage run --config {config} --run-id r1"
    if step == "publishing":
        checked = run_cli_in_process(["check", "--config", config], tmp_path, env)
        assert checked.returncode == 0, checked.stdout + checked.stderr[-2000:]
        assert pending in checked.stdout and command in checked.stdout, checked.stdout
        assert "UNFINISHED" not in checked.stdout
    else:  # merge writes every row and names the pending step (exit 0)
        out = tmp_path / "early.jsonl"
        merged = run_cli_in_process(
            ["merge", "--config", config, "--output-path", str(out)], tmp_path, env
        )
        assert merged.returncode == 0, merged.stdout + merged.stderr[-2000:]
        assert pending in merged.stdout and command in merged.stdout
        assert "UNFINISHED" not in merged.stdout
        assert len(out.read_text(encoding="utf-8").splitlines()) == ROWS

    calls = fake.call_counts()
    resumed = run_cli_in_process(["run", "--config", config, "--run-id", "r1"], tmp_path, env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert fake.call_counts() == calls  # no upload, no create, no lookup
    assert "nothing left to submit" in resumed.stdout
    _assert_finished(tmp_path, meta, fake)

    if step == "publishing":
        out = tmp_path / "merged.jsonl"
        merged = run_cli_in_process(
            ["merge", "--config", config, "--output-path", str(out)], tmp_path, env
        )
        assert merged.returncode == 0, merged.stdout + merged.stderr[-2000:]
        assert "pending" not in merged.stdout and "UNFINISHED" not in merged.stdout
        rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
        assert [r["source_index"] for r in rows] == list(range(ROWS))


def test_find_unfinished_tells_a_pending_finish_from_an_unfinished_run(tmp_path):
    """Direct: record not finished + submitted marker -> finish_pending; with a leftover
    intent or a stop marker, or without the marker -> unfinished."""
    from mmirage_beam.io.fs import write_durably
    from mmirage_beam.run.layout import intent_path
    from mmirage_beam.run.receipts import mark_submitted, receipt_path
    from mmirage_beam.run.selection import find_unfinished
    from mmirage_beam.transforms.submit_rows import stop_marker_path

    base = str(tmp_path / "batch_metadata")
    record = {"run_id": "x", "fingerprint": "f", "finished": False}
    for run in ("a", "b", "c", "d"):
        write_durably(f"{base}.run.{run}.json", json.dumps({**record, "run_id": run}).encode())
    for run in ("a", "c", "d"):
        assert mark_submitted(3, base, run, attempt=1) == 3
    intent = {"chunk_id": "answer-chunk-000001", "custom_id_to_source_index": {"q": 0}}
    write_durably(
        intent_path(receipt_path(base, "text", "c"), "answer-chunk-000001"),
        json.dumps(intent).encode(),
    )
    write_durably(stop_marker_path(base, "d"), b"stop\n")
    got = find_unfinished(base, ["a", "b", "c", "d"], [])
    assert got.finish_pending == ["a"]
    assert got.runs == ["b", "c", "d"]


def test_a_dead_worker_is_said_in_plain_words():
    from mmirage_beam.launch.failures import describe_failure

    exc = RuntimeError(
        "Pipeline job failed:\nTraceback ...\nRuntimeError: Channel closed prematurely."
    )
    assert describe_failure(exc) == (
        "a worker process of the runner died or lost its connection while the job ran "
        "(the runner said: RuntimeError: Channel closed prematurely.)"
    )
    assert describe_failure(ValueError("disk full\nOSError: [Errno 28]")) == "OSError: [Errno 28]"
