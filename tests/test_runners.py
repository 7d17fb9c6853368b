"""The same run, byte for byte, on every runner whose workers are other processes.

Each runner of the matrix (tests/runners.py: DirectRunner in memory; DirectRunner in
``multi_processing`` mode with 2 workers; the PortableRunner against Beam's own job
service with an EXTERNAL worker pool started in another folder; the PortableRunner with
LOOPBACK workers) runs the whole lifecycle as a user would, with ``mmirage`` in a
subprocess whose working directory holds a config with RELATIVE paths: a dry run
(``--export-prompts``), the submission to a fresh embedded fake provider, ``mmirage
check`` and ``mmirage merge``. Every runner must leave every receipt where ``mmirage
check`` finds it, and produce byte-identical merged, errors, invalid-rows and export
files and the same receipts as the in-memory DirectRunner.

The provider keys the workers use are the worker pool's (its environment), never the
launcher's: the two are different here, and a pool without a key stops the run before
anything is submitted.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from mmirage_beam.testing import FakeProviderServer
from tests.conftest import GSM8K_JSONL
from tests.runners import (
    PORTABLE_RUNNERS,
    REPO,
    REQUIRE_ENV_VAR,
    RUNNERS,
    PortableServices,
    ServiceStartError,
    clean_env,
    run_cli,
    runner_flags,
    worker_env,
)

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
    "execution_params": {"mode": "local"},
}


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]


def _launcher_dir(root: Path, provider: str = "openai") -> Path:
    """A launcher folder: config.yaml with relative paths, and data/rows.jsonl (the first
    N_ROWS GSM8K test rows, two with failure markers, one without its question)."""
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
    cfg["processors"][0]["provider"] = provider
    (root / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return root


def _files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def beam_services(tmp_path_factory):
    """Beam's job service and an EXTERNAL worker pool, each in its own empty folder, for
    the module. The pool holds the workers' keys: OPENAI_API_KEY (not the launcher's) and
    TRACER_API_KEY_FILE; the tracer plugin's folder is on its PYTHONPATH."""
    root = tmp_path_factory.mktemp("beam")
    secrets = root / "secrets"
    secrets.mkdir()
    (secrets / "tracer_key").write_text(TRACER_WORKER_KEY + "\n", encoding="utf-8")
    env = worker_env(
        {
            "OPENAI_API_KEY": WORKER_KEY,
            "TRACER_API_KEY_FILE": str(secrets / "tracer_key"),
            "MMIRAGE_TRACE_FILE": str(root / "trace.jsonl"),
        },
        pythonpath=[PLUGIN_SITE],
    )
    services = PortableServices(root / "services", env)
    try:
        services.start()
    except ServiceStartError as exc:
        if os.environ.get(REQUIRE_ENV_VAR) == "1":
            raise
        pytest.skip(f"Beam's portable job service or worker pool cannot start here: {exc}")
    services.trace_file = root / "trace.jsonl"
    yield services
    leftovers = services.stop()
    assert leftovers == [], f"processes of the Beam services not reaped: {leftovers}"


def _services_for(runner: str, request) -> PortableServices | None:  # noqa: ANN001
    return request.getfixturevalue("beam_services") if runner in PORTABLE_RUNNERS else None


def _lifecycle(root: Path, runner: str, services: PortableServices | None) -> dict:
    """Dry run, submission, check and merge of the launcher folder on ``runner``, each
    ``mmirage`` command in a subprocess in ``root``, against a fresh fake. Returns what the
    runs produced, and asserts what must hold on any runner."""
    flags = runner_flags(runner, services)
    timings = {}
    with FakeProviderServer() as fake:
        env = clean_env(
            {"OPENAI_API_KEY": LAUNCHER_KEY, "MMIRAGE_OPENAI_BASE_URL": fake.openai_base_url}
        )

        def mmirage(*args: str) -> subprocess.CompletedProcess:
            start = time.monotonic()
            proc = run_cli(args, cwd=root, env=env)
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
            f"no receipts in the launcher's folder; files: {_files_under(root)}\n{run.stdout}"
        )
        receipts = _read_jsonl(receipt_file)
        assert f"receipts:            meta/batch_metadata.text.{RUN_ID}.jsonl" in run.stdout or (
            str(receipt_file) in run.stdout
        ), run.stdout

        check = mmirage("check", "--config", "config.yaml", "--run-id", RUN_ID)
        assert check.returncode == 0, check.stdout + check.stderr[-3000:]
        batches = fake.batches("openai")
        assert len(batches) == len(receipts) == 10
        for b in batches:  # check sees every batch the provider holds
            assert b["id"] in check.stdout, check.stdout

        merge = mmirage(
            "merge",
            "--config",
            "config.yaml",
            "--run-id",
            RUN_ID,
            "--output-path",
            "out/merged.jsonl",
            *flags,
        )
        assert merge.returncode == 1, merge.stdout + merge.stderr[-4000:]  # 4 failed outputs
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
    # Nothing was written where the services run, and no receipt part was left behind.
    if services is not None:
        assert _files_under(services.pool.cwd) == [] and _files_under(services.job.cwd) == []
    assert not list((root / "meta").glob("*.parts"))
    normalised = sorted(
        json.dumps(
            {k: v for k, v in r.items() if k != "provider_batch_id" and not k.endswith("_at_utc")},
            sort_keys=True,
        )
        for r in receipts
    )
    return {
        "export": b"\n".join(
            sorted(export_lines, key=lambda x: json.loads(x)["request"]["custom_id"])
        ),
        "merged": merged,
        "errors": errors,
        "invalid_rows": (
            root / "meta" / f"batch_metadata.invalid_rows.{RUN_ID}.jsonl"
        ).read_bytes(),
        "receipts": normalised,
        "timings": timings,
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The lifecycle on the in-memory DirectRunner: what every other runner must match."""
    return _lifecycle(_launcher_dir(tmp_path_factory.mktemp("direct") / "launch"), "direct", None)


@pytest.mark.parametrize("runner", RUNNERS)
def test_every_runner_gives_the_same_files(runner, reference, tmp_path, request):
    if runner == "direct":
        got = reference
    else:
        got = _lifecycle(_launcher_dir(tmp_path / "launch"), runner, _services_for(runner, request))
    print(f"{runner}: {got['timings']}")
    for what in ("export", "merged", "errors", "invalid_rows", "receipts"):
        assert got[what] == reference[what], f"{runner}: {what} differs from the DirectRunner's"
