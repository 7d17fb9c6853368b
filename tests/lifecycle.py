"""The lifecycle every runner must go through with the same files: a launcher folder
(config with relative paths, 120 GSM8K rows, two with fake-provider failure markers and
one invalid) and :func:`lifecycle`: the dry run, the submission, ``check`` and
``merge`` against a fresh fake, with what must hold on any runner asserted, and what
must match the DirectRunner's returned. Used by tests/engines/test_runners.py (Beam's own
runners) and tests/engines/test_engines.py (a real Flink cluster, Prism).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
import warnings
from pathlib import Path
from typing import Iterable, Sequence

import yaml

from mmirage_beam.testing import FakeProviderServer
from tests.conftest import GSM8K_JSONL
from tests.runners import REPO, clean_env, run_cli, run_cli_in_process

PLUGIN_SITE = REPO / "tests" / "plugins" / "site"  # the entry-point plugin "installed"
RUN_ID = "scale1"
N_ROWS = 120
#: rows whose question carries a fake-provider failure marker, and one invalid row.
MARKERS = {3: "FAKE_ERROR:server_error", 57: "FAKE_ERROR:invalid_request"}
INVALID_ROW = 20
LAUNCHER_KEY = "sk-launcher-only-key"  # the launcher's; workers must not use it
WORKER_KEY = "sk-worker-pool-key"
TRACER_WORKER_KEY = "sk-tracer-worker-key-from-file"
TRACER_LAUNCHER_KEY = "sk-tracer-launcher-key"

CONFIG = {
    "processors": [
        {
            "type": "batch_api",
            "provider": "openai",
            "base_url": "${MMIRAGE_OPENAI_BASE_URL}",
            "max_requests_per_chunk": 25,
            "metadata_output_path": "meta/batch_metadata.jsonl",
        }
    ],
    "loading_params": {
        "datasets": [{"path": "data/rows.jsonl", "type": "JSONL", "output_dir": "shards"}],
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
            },
            {
                "name": "facts",
                "type": "batch_api",
                "output_type": "JSON",
                "prompt": "List the numbers in: {{ question }}",
                "output_schema": ["numbers", "unit"],
            },
        ],
        "remove_columns": True,
        "output_schema": {
            "question": "{{ question }}",
            "answer": "{{ answer }}",
            "numbers": "{{ facts.numbers }}",
        },
    },
    # Fixed, so every runner cuts the same chunks (the default follows the worker count).
    "execution_params": {"mode": "local", "chunking_parallelism": 2},
}


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]


def launcher_dir(root: Path, provider: str = "openai", absolute: bool = False) -> Path:
    """A launcher folder: config.yaml with relative paths (``absolute``: made absolute),
    and data/rows.jsonl (the first N_ROWS GSM8K test rows, two with failure markers, one
    without its question)."""
    root.mkdir(parents=True)
    (root / "data").mkdir()
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:N_ROWS]]
    for i, marker in MARKERS.items():
        rows[i]["question"] += f" {marker}"
    rows[INVALID_ROW]["question"] = None
    (root / "data" / "rows.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    cfg = json.loads(json.dumps(CONFIG))
    proc = cfg["processors"][0]
    proc["provider"] = provider
    if provider == "mistral":
        del proc["base_url"]  # the MMIRAGE example's config has no base_url
    elif provider != "openai":
        proc["base_url"] = proc["base_url"].replace("OPENAI", provider.upper())
    if absolute:
        proc["metadata_output_path"] = str(root / proc["metadata_output_path"])
        for ds in cfg["loading_params"]["datasets"]:
            ds["path"], ds["output_dir"] = str(root / ds["path"]), str(root / ds["output_dir"])
    (root / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return root


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def lifecycle(
    root: Path, flags: Sequence[str], in_process: bool = False, quiet_dirs: Iterable[Path] = ()
) -> dict:
    """Dry run, submission, check and merge of the launcher folder with the runner
    ``flags``, each ``mmirage`` command in a subprocess in ``root`` (``in_process``, for
    the in-memory DirectRunner: in this process, ``run_cli_in_process``), against a fresh
    fake. ``quiet_dirs``: folders of the engine's processes, where nothing may be written.
    Returns what the runs produced, and asserts what must hold on any runner."""
    timings = {}
    with FakeProviderServer() as fake:
        env = clean_env(
            {"OPENAI_API_KEY": LAUNCHER_KEY, "MMIRAGE_OPENAI_BASE_URL": fake.openai_base_url}
        )

        def mmirage(*args: str) -> subprocess.CompletedProcess:
            start = time.monotonic()
            proc = (run_cli_in_process if in_process else run_cli)(args, cwd=root, env=env)
            timings[args[0] + (" --export-prompts" if "--export-prompts" in args else "")] = round(
                time.monotonic() - start, 1
            )
            return proc

        dry = mmirage(
            "run",
            "--config",
            "config.yaml",
            "--export-prompts",
            "out/export.jsonl",
            "--run-id",
            RUN_ID + "-dry",
            "--skip-invalid-rows",
            *flags,
        )
        assert dry.returncode == 0, dry.stderr[-4000:]
        assert fake.call_counts() == {} or not any(fake.call_counts().values())

        run = mmirage(
            "run", "--config", "config.yaml", "--run-id", RUN_ID, "--skip-invalid-rows", *flags
        )
        assert run.returncode == 0, run.stderr[-4000:]
        receipt_file = root / "meta" / f"batch_metadata.text.{RUN_ID}.jsonl"
        assert receipt_file.exists(), (
            f"no receipts in the launcher's folder; files: {files_under(root)}\n{run.stdout}"
        )
        receipts = read_jsonl(receipt_file)
        assert f"receipts:            meta/batch_metadata.text.{RUN_ID}.jsonl" in run.stdout or (
            str(receipt_file) in run.stdout
        ), run.stdout

        check = mmirage("check", "--config", "config.yaml", "--run-id", RUN_ID)
        # the FAKE_ERROR rows failed: every batch ended, not every request succeeded
        assert check.returncode == 1, check.stdout + check.stderr[-3000:]
        assert "result: completed with failures" in check.stdout, check.stdout
        batches = fake.batches("openai")
        assert len(batches) == len(receipts) >= 2 * 2 * 2  # 2 outputs x 2 shards x >= 2
        for b in batches:  # check sees every batch the provider holds
            assert b["id"] in check.stdout, check.stdout

        merge_args = ("merge", "--config", "config.yaml", "--run-id", RUN_ID,
                      "--output-path", "out/merged.jsonl", *flags)  # fmt: skip
        merge = mmirage(*merge_args)
        if merge.returncode == 1 and not (root / "out" / "merged.jsonl").exists() and flags:
            # The merge job itself failed (seen once in ~30 Prism runs, 2026-12-06, without
            # its log): say so loudly with the engine's words, and merge again, as a
            # user would (a merge is idempotent); a second failure fails the test.
            warnings.warn(f"the merge job failed on {flags[:4]}; merging again:\n"
                          f"{merge.stderr[-6000:]}", stacklevel=1)  # fmt: skip
            merge = mmirage(*merge_args)
        # 4 failed outputs: exit 1, and the merged file written (a failed job exits 1 too)
        assert merge.returncode == 1, merge.stdout + merge.stderr[-4000:]
        assert (root / "out" / "merged.jsonl").exists(), merge.stdout + merge.stderr[-6000:]
        held = fake.submitted_requests("openai")
        creates = fake.create_counts()

    # Every request the dry run exports was submitted exactly once, in the batch its
    # receipt names.
    export_lines = (root / "out" / f"export.{RUN_ID}-dry.jsonl").read_bytes().splitlines()
    exported = {
        json.loads(x)["request"]["custom_id"]: json.loads(x)["request"] for x in export_lines
    }
    assert len(exported) == 2 * (N_ROWS - 1)
    assert {h["custom_id"]: h["request"] for h in held} == exported
    assert set(creates.values()) == {1}
    by_batch: dict[str, set] = {}
    for h in held:
        by_batch.setdefault(h["batch_id"], set()).add(h["custom_id"])
    for r in receipts:
        assert set(r["custom_id_to_source_index"]) == by_batch[r["provider_batch_id"]]
    merged = (root / "out" / "merged.jsonl").read_bytes()
    rows = [json.loads(x) for x in merged.splitlines()]
    assert [r["source_index"] for r in rows] == list(range(N_ROWS))
    errors = (root / "out" / "merged.errors.jsonl").read_bytes()
    assert sorted(e["custom_id"] for e in map(json.loads, errors.splitlines())) == sorted(
        f"{o}-text-{i}" for o in ("answer", "facts") for i in MARKERS
    )
    # Nothing was written where the engine's processes run, and no receipt part was left
    # behind.
    for folder in quiet_dirs:
        assert files_under(Path(folder)) == [], folder
    assert not list((root / "meta").glob("*.parts"))
    normalised = sorted(
        json.dumps(
            {k: v for k, v in r.items() if k != "provider_batch_id" and not k.endswith("_at_utc")},
            sort_keys=True,
        )
        for r in receipts
    )
    here = str(root).encode()  # files name their dataset by its absolute path
    return {
        "export": b"\n".join(
            sorted(export_lines, key=lambda x: json.loads(x)["request"]["custom_id"])
        ).replace(here, b"<launcher>"),
        "merged": merged.replace(here, b"<launcher>"),
        "errors": errors.replace(here, b"<launcher>"),
        "invalid_rows": (root / "meta" / f"batch_metadata.invalid_rows.{RUN_ID}.jsonl")
        .read_bytes()
        .replace(here, b"<launcher>"),
        "receipts": [r.replace(str(root), "<launcher>") for r in normalised],
        "timings": timings,
    }
