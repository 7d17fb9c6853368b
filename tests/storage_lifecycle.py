"""The whole lifecycle on a shared storage, and the local disk's files it must match: used
by tests/engines/test_s3_storage.py (moto's S3 server) and tests/engines/test_gcs_storage.py (a GCS
emulator), and in part by tests/engines/test_engines.py (through test_s3_storage's names).

:func:`launcher` writes a config whose receipts, placeholder rows and outputs are under a
``store`` (a local folder or a bucket URI); :func:`lifecycle` runs the dry run,
submission, ``check``, ``merge``, ``resubmit``, ``merge``, ``runs`` and ``cancel`` there
against a fresh fake provider, each command in this process on the DirectRunner (or, given
a portable runner's flags, the pipelines on that engine), and returns what the files hold
and what the fake saw; :func:`local_reference` is the same
with every path on the local disk; :func:`assert_matches_local` compares the two byte for
byte and checks each custom_id was created once and nothing was left behind.
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import yaml

from mmirage_beam.testing import FakeProviderServer
from tests.conftest import GSM8K_JSONL
from tests.runners import clean_env, run_cli, run_cli_in_process

N_ROWS = 40
#: row 3 is rate-limited the first time (a resubmission then answers it); row 11 is an
#: invalid request (not retryable); row 20 has no question (an invalid row, skipped).
MARKERS = {3: "FAKE_ERROR:flaky", 11: "FAKE_ERROR:invalid_request"}
INVALID_ROW = 20
VALID = [i for i in range(N_ROWS) if i != INVALID_ROW]
RUN, DRY, RESUB, SLOW = "lcrun", "lcdry", "lcresub", "lcslow"
KEY = "sk-storage-test"
#: The files compared byte for byte with the local disk's.
COMPARED = ("export", "merged", "errors", "merged2", "errors2", "invalid_rows", "placeholders")


def write_rows(folder: Path) -> Path:
    """``folder/rows.jsonl``: the first N_ROWS GSM8K rows, with the markers and the
    invalid row; one local file every config reads (the files that name their dataset
    name the same path)."""
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:N_ROWS]]
    for i, marker in MARKERS.items():
        rows[i]["question"] += f" {marker}"
    rows[INVALID_ROW]["question"] = None
    path = folder / "rows.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


def launcher(root: Path, rows: Path, store: str) -> Path:
    """``root/config.yaml`` whose receipts and placeholder rows are under ``store`` (a
    local folder or ``s3://bucket/prefix``, ``gs://...``); 4 chunks of at most 10
    requests."""
    root.mkdir(parents=True, exist_ok=True)
    cfg = {
        "processors": [
            {
                "type": "batch_api",
                "provider": "openai",
                "base_url": "${MMIRAGE_OPENAI_BASE_URL}",
                "max_requests_per_chunk": 10,
                "metadata_output_path": f"{store}/meta/batch_metadata.jsonl",
            }
        ],
        "loading_params": {
            "datasets": [{"path": str(rows), "type": "JSONL", "output_dir": f"{store}/shards"}],
            "num_shards": 1,
            "shard_id": 0,
        },
        "processing_params": {
            "inputs": [{"name": "question", "key": "question"}],
            "outputs": [
                {
                    "name": "answer",
                    "type": "batch_api",
                    "output_type": "plain",
                    "prompt": "Answer concisely:\n{{ question }}",
                }
            ],
            "remove_columns": True,
            "output_schema": {"question": "{{ question }}", "answer": "{{ answer }}"},
        },
        "execution_params": {"mode": "local", "chunking_parallelism": 2},
    }
    (root / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return root


def lifecycle(
    root: Path,
    store: str,
    read: Callable[[str], bytes],
    flags: list[str],
    env_extra: dict,
    runs_env: dict,
    runner_flags: Sequence[str] = (),
    engine_steps: Optional[frozenset] = None,
) -> dict:
    """Dry run, submission, check, merge, resubmission of the retryable failure, merge
    again, ``runs`` and ``cancel``, each ``mmirage`` command in this process on the
    DirectRunner, with ``flags`` (``runs``: without them, with ``runs_env`` added to the
    environment); ``read(relative path) -> bytes`` reads what ``store`` holds. With
    ``runner_flags`` (a portable runner's: ``mmirage cluster up``'s last line), the
    commands that run a pipeline (the dry run, submissions, merges and the resubmission)
    run as ``mmirage`` processes with those flags too, so their pipelines run on that
    engine; ``engine_steps`` (of ``dry``, ``submit``, ``merge``, ``resubmit``, ``merge2``,
    ``slow``) keeps the others on the DirectRunner, over the same stored state. Returns
    what the files hold and what the fake saw."""
    out: dict = {}
    with FakeProviderServer() as fake:
        env = clean_env(
            {"OPENAI_API_KEY": KEY, "MMIRAGE_OPENAI_BASE_URL": fake.openai_base_url, **env_extra}
        )

        def mmirage(
            *args: str, expect: int = 0, more_env: Optional[dict] = None, step: str = ""
        ) -> subprocess.CompletedProcess:
            start = time.monotonic()
            full_env = {**env, **(more_env or {})}
            on_engine = engine_steps is None or step in engine_steps
            if runner_flags and on_engine and args[0] in ("run", "merge", "resubmit"):
                proc = run_cli([*args, *runner_flags], cwd=root, env=full_env, timeout=600)
            else:
                proc = run_cli_in_process(args, cwd=root, env=full_env)
            print(f"{args[0]}: {time.monotonic() - start:.1f}s")
            assert proc.returncode == expect, f"{args}: {proc.stdout}\n{proc.stderr[-4000:]}"
            assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
            return proc

        cfg = ("--config", "config.yaml")
        mmirage("run", *cfg, "--export-prompts", f"{store}/out/export.jsonl", "--run-id", DRY,
                "--skip-invalid-rows", *flags, step="dry")  # fmt: skip
        assert fake.batches() == []
        run = mmirage("run", *cfg, "--run-id", RUN, "--skip-invalid-rows", *flags, step="submit")
        assert f"receipts:            {store}/meta/batch_metadata.text.{RUN}.jsonl" in run.stdout
        out["submitted"] = collections.Counter(r["custom_id"] for r in fake.submitted_requests())
        out["creates"] = dict(fake.create_counts())
        # requests failed (rows 3 and 11): every batch ended, not every request succeeded
        check = mmirage("check", *cfg, "--run-id", RUN, *flags, expect=1)
        assert "result: completed with failures" in check.stdout, check.stdout
        batches = fake.batches("openai")
        assert len(batches) >= 4 and all(b["id"] in check.stdout for b in batches), check.stdout
        mmirage("merge", *cfg, "--run-id", RUN, "--output-path", f"{store}/out/merged.jsonl",
                *flags, expect=1, step="merge")  # fmt: skip  # rows 3 and 11 failed
        out["merged"] = read("out/merged.jsonl")
        out["errors"] = read("out/merged.errors.jsonl")
        mmirage("resubmit", *cfg, "--run-id", RUN, "--new-run-id", RESUB, *flags, step="resubmit")
        out["resent"] = [r["custom_id"] for r in fake.submitted_requests()][
            sum(out["submitted"].values()) :
        ]
        mmirage("merge", *cfg, "--run-id", RUN, "--output-path", f"{store}/out/merged2.jsonl",
                *flags, expect=1, step="merge2")  # fmt: skip  # row 11 still failed
        out["merged2"] = read("out/merged2.jsonl")
        out["errors2"] = read("out/merged2.errors.jsonl")
        runs = mmirage("runs", *cfg, more_env=runs_env)
        out["runs"] = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "<time>", runs.stdout)
        cancel = mmirage("cancel", *cfg, "--run-id", RUN, "--yes", *flags)
        assert "nothing to cancel" in cancel.stdout, cancel.stdout
        # a run whose batch is still running (4 rows, answers not reused), then cancelled
        fake.script(processing_delay_secs=300)
        mmirage("run", *cfg, "--run-id", SLOW, "--limit", "4", "--no-reuse", *flags, step="slow")
        cancel = mmirage("cancel", *cfg, "--run-id", SLOW, "--yes", *flags)
        assert "now cancelling" in cancel.stdout, cancel.stdout
        record = json.loads(read(f"meta/batch_metadata.cancel.{SLOW}.json"))
        out["cancelled"] = [(b["status_before"], b["status_after"]) for b in record["batches"]]
    out["export"] = read(f"out/export.{DRY}.jsonl")
    out["invalid_rows"] = read(f"meta/batch_metadata.invalid_rows.{RUN}.jsonl")
    out["placeholders"] = read(f"shards/shard_0/placeholders.{RUN}-00000-of-00001.jsonl")
    return out


def local_reference(root: Path, rows: Path) -> dict:
    """The lifecycle with every path on the local disk (under ``root``): what a shared
    storage must match."""
    store = str(root / "store")
    launch = launcher(root / "launch", rows, store)
    return lifecycle(launch, store, lambda rel: Path(store, rel).read_bytes(), [], {}, {})


def assert_sent_once(got: dict) -> None:
    assert sorted(got["submitted"]) == sorted(f"answer-text-{i}" for i in VALID)
    assert set(got["submitted"].values()) == {1}, "a custom_id was created twice"
    assert set(got["creates"].values()) == {1}, got["creates"]
    assert got["resent"] == ["answer-text-3"]  # only the retryable failure, once


def assert_matches_local(got: dict, reference: dict, keys: list[str], prefix: str) -> None:
    """``got`` (the lifecycle on a shared storage, whose objects under ``prefix`` are
    ``keys``) holds the local ``reference``'s bytes; each custom_id was created once;
    the run's state is in the bucket and nothing temporary is left behind."""
    for what in COMPARED:
        assert got[what] == reference[what], f"{what} differs from the local disk's"
    assert got["runs"] == reference["runs"]
    assert got["cancelled"] == reference["cancelled"] == [("validating", "cancelling")]
    assert_sent_once(got)
    assert_sent_once(reference)
    rows = [json.loads(x) for x in got["merged2"].splitlines()]
    assert [r["source_index"] for r in rows] == list(range(N_ROWS))
    assert json.loads(got["errors2"])["custom_id"] == "answer-text-11"
    # the run's state is in the bucket: receipts, run records, merge ledgers; no receipt
    # part, intent, lease, probe or staged chunk is left behind
    assert f"{prefix}/meta/batch_metadata.text.{RUN}.jsonl" in keys
    assert f"{prefix}/meta/batch_metadata.text.{RESUB}.jsonl" in keys
    assert f"{prefix}/meta/batch_metadata.run.{RUN}.json" in keys
    leftovers = [k for k in keys if re.search(r"\.parts/|\.lease\.|\.probe\.|\.staged\.|\.tmp-", k)]
    assert leftovers == []
