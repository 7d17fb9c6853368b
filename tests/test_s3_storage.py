"""The whole lifecycle with its shared storage on a real S3 server, through Beam's own S3
filesystem, byte for byte the same as on the local disk; and storage faults while a
submission publishes its receipts.

moto's S3 server runs in its own process (``tests/storage_servers.py``). The config's
``metadata_output_path`` and ``output_dir``, the dry run's export and ``merge
--output-path`` are all ``s3://`` URIs; Beam reaches the server through its pipeline
options ``--s3_endpoint_url`` / ``--s3_region_name`` (the commands that run no pipeline,
``check``, ``runs`` and ``cancel``, take the same flags, or boto3's
``AWS_ENDPOINT_URL_S3``), and the credentials come from the environment only. The same
config with local paths is the reference: the merged, errors, export, invalid-rows and
placeholder files must match it byte for byte, read back from the bucket with boto3, and
the fake provider must have seen each custom_id created exactly once.

Skipped when moto (or boto3) cannot be imported, failed instead with
``$MMIRAGE_REQUIRE_PORTABLE=1`` (CI).
"""

from __future__ import annotations

import collections
import json
import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional

import pytest
import yaml

from mmirage_beam.testing import FakeProviderServer
from tests.conftest import GSM8K_JSONL
from tests.runners import clean_env, run_cli, run_cli_in_process
from tests.storage_servers import S3Server, skip_unless_moto

N_ROWS = 40
#: row 3 is rate-limited the first time (a resubmission then answers it); row 11 is an
#: invalid request (not retryable); row 20 has no question (an invalid row, skipped).
MARKERS = {3: "FAKE_ERROR:flaky", 11: "FAKE_ERROR:invalid_request"}
INVALID_ROW = 20
VALID = [i for i in range(N_ROWS) if i != INVALID_ROW]
RUN, DRY, RESUB, SLOW = "s3run", "s3dry", "s3resub", "s3slow"
KEY = "sk-s3-storage-test"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    skip_unless_moto()
    server = S3Server(tmp_path_factory.mktemp("moto"))
    server.start()
    yield server
    assert server.stop() == [], "moto's process group was not reaped"


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory) -> Path:
    """The first N_ROWS GSM8K rows, with the markers and the invalid row; one local file
    both configs read (the files that name their dataset name the same path)."""
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:N_ROWS]]
    for i, marker in MARKERS.items():
        rows[i]["question"] += f" {marker}"
    rows[INVALID_ROW]["question"] = None
    path = tmp_path_factory.mktemp("data") / "rows.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


def _launcher(root: Path, rows: Path, store: str) -> Path:
    """``root/config.yaml`` whose receipts and placeholder rows are under ``store`` (a
    local folder or ``s3://bucket/prefix``); 4 chunks of at most 10 requests."""
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


def _lifecycle(
    root: Path,
    store: str,
    read: Callable[[str], bytes],
    flags: list[str],
    env_extra: dict,
    runs_env: dict,
) -> dict:
    """Dry run, submission, check, merge, resubmission of the retryable failure, merge
    again, ``runs`` and ``cancel``, each ``mmirage`` command in this process on the
    DirectRunner, with ``flags`` (``runs``: without them, with ``runs_env`` added to the
    environment); ``read(relative path) -> bytes`` reads what ``store`` holds. Returns
    what the files hold and what the fake saw."""
    out: dict = {}
    with FakeProviderServer() as fake:
        env = clean_env(
            {"OPENAI_API_KEY": KEY, "MMIRAGE_OPENAI_BASE_URL": fake.openai_base_url, **env_extra}
        )

        def mmirage(
            *args: str, expect: int = 0, more_env: Optional[dict] = None
        ) -> subprocess.CompletedProcess:
            start = time.monotonic()
            proc = run_cli_in_process(args, cwd=root, env={**env, **(more_env or {})})
            print(f"{args[0]}: {time.monotonic() - start:.1f}s")
            assert proc.returncode == expect, f"{args}: {proc.stdout}\n{proc.stderr[-4000:]}"
            assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
            return proc

        cfg = ("--config", "config.yaml")
        mmirage("run", *cfg, "--export-prompts", f"{store}/out/export.jsonl", "--run-id", DRY,
                "--skip-invalid-rows", *flags)  # fmt: skip
        assert fake.batches() == []
        run = mmirage("run", *cfg, "--run-id", RUN, "--skip-invalid-rows", *flags)
        assert f"receipts:            {store}/meta/batch_metadata.text.{RUN}.jsonl" in run.stdout
        out["submitted"] = collections.Counter(r["custom_id"] for r in fake.submitted_requests())
        out["creates"] = dict(fake.create_counts())
        check = mmirage("check", *cfg, "--run-id", RUN, *flags)
        batches = fake.batches("openai")
        assert len(batches) >= 4 and all(b["id"] in check.stdout for b in batches), check.stdout
        mmirage("merge", *cfg, "--run-id", RUN, "--output-path", f"{store}/out/merged.jsonl",
                *flags, expect=1)  # fmt: skip  # rows 3 and 11 failed
        out["merged"] = read("out/merged.jsonl")
        out["errors"] = read("out/merged.errors.jsonl")
        mmirage("resubmit", *cfg, "--run-id", RUN, "--new-run-id", RESUB, *flags)
        out["resent"] = [r["custom_id"] for r in fake.submitted_requests()][
            sum(out["submitted"].values()) :
        ]
        mmirage("merge", *cfg, "--run-id", RUN, "--output-path", f"{store}/out/merged2.jsonl",
                *flags, expect=1)  # fmt: skip  # row 11 still failed
        out["merged2"] = read("out/merged2.jsonl")
        out["errors2"] = read("out/merged2.errors.jsonl")
        runs = mmirage("runs", *cfg, more_env=runs_env)
        out["runs"] = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "<time>", runs.stdout)
        cancel = mmirage("cancel", *cfg, "--run-id", RUN, "--yes", *flags)
        assert "nothing to cancel" in cancel.stdout, cancel.stdout
        # a run whose batch is still running (4 rows, answers not reused), then cancelled
        fake.script(processing_delay_secs=300)
        mmirage("run", *cfg, "--run-id", SLOW, "--limit", "4", "--no-reuse", *flags)
        cancel = mmirage("cancel", *cfg, "--run-id", SLOW, "--yes", *flags)
        assert "now cancelling" in cancel.stdout, cancel.stdout
        record = json.loads(read(f"meta/batch_metadata.cancel.{SLOW}.json"))
        out["cancelled"] = [(b["status_before"], b["status_after"]) for b in record["batches"]]
    out["export"] = read(f"out/export.{DRY}.jsonl")
    out["invalid_rows"] = read(f"meta/batch_metadata.invalid_rows.{RUN}.jsonl")
    out["placeholders"] = read(f"shards/shard_0/placeholders.{RUN}-00000-of-00001.jsonl")
    return out


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, rows_file) -> dict:
    """The lifecycle with every path on the local disk: what S3 must match."""
    root = tmp_path_factory.mktemp("local")
    store = str(root / "store")
    launch = _launcher(root / "launch", rows_file, store)
    return _lifecycle(launch, store, lambda rel: Path(store, rel).read_bytes(), [], {}, {})


COMPARED = ("export", "merged", "errors", "merged2", "errors2", "invalid_rows", "placeholders")


def _assert_sent_once(got: dict) -> None:
    assert sorted(got["submitted"]) == sorted(f"answer-text-{i}" for i in VALID)
    assert set(got["submitted"].values()) == {1}, "a custom_id was created twice"
    assert set(got["creates"].values()) == {1}, got["creates"]
    assert got["resent"] == ["answer-text-3"]  # only the retryable failure, once


def test_the_lifecycle_on_s3_matches_the_local_disk(s3, rows_file, local_reference, tmp_path):
    """Dry run, submit, check, merge, resubmit, merge, runs and cancel (of this run: nothing
    left; of a run still running: cancelled) with the receipts, placeholder rows, export
    and merged files in the bucket: the same bytes as on disk."""
    prefix = "lifecycle"
    store = s3.uri(prefix)
    got = _lifecycle(
        _launcher(tmp_path / "launch", rows_file, store),
        store,
        lambda rel: s3.read(f"{prefix}/{rel}"),
        s3.flags,  # the endpoint: Beam's options; the credentials: the environment only
        s3.env,
        {"AWS_ENDPOINT_URL_S3": s3.endpoint},  # `runs`: boto3's variable instead of flags
    )
    for what in COMPARED:
        assert got[what] == local_reference[what], f"{what} differs from the local disk's"
    assert got["runs"] == local_reference["runs"]
    assert got["cancelled"] == local_reference["cancelled"] == [("validating", "cancelling")]
    _assert_sent_once(got)
    _assert_sent_once(local_reference)
    rows = [json.loads(x) for x in got["merged2"].splitlines()]
    assert [r["source_index"] for r in rows] == list(range(N_ROWS))
    assert json.loads(got["errors2"])["custom_id"] == "answer-text-11"
    # the run's state is in the bucket: receipts, run records, merge ledgers; no receipt
    # part, intent, lease, probe or staged chunk is left behind
    keys = s3.keys(prefix)
    assert f"{prefix}/meta/batch_metadata.text.{RUN}.jsonl" in keys
    assert f"{prefix}/meta/batch_metadata.text.{RESUB}.jsonl" in keys
    assert f"{prefix}/meta/batch_metadata.run.{RUN}.json" in keys
    leftovers = [k for k in keys if re.search(r"\.parts/|\.lease\.|\.probe\.|\.staged\.|\.tmp-", k)]
    assert leftovers == []


def _resume_command(stderr: str) -> list[str]:
    """The ``mmirage run ...`` line a failed run printed, as arguments after ``mmirage``."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip().startswith("mmirage run --")]
    assert len(lines) == 1, stderr[-4000:]
    return shlex.split(lines[0])[1:]


def test_a_burst_of_503s_and_slow_writes_while_the_submission_publishes(
    s3, rows_file, local_reference, tmp_path
):
    """While the run writes its intents and receipts, the first three PUTs there land
    1 s late, and once the first receipt is durable the next 8 writes get S3's ``503
    SlowDown`` (boto3 tries each call 3 times; Beam retries a failed copy after 5 s). The
    run either survives, or stops with one error line (no traceback) and the command that
    resumes it (batches accepted without a receipt are adopted, not sent again); either
    way the merged, errors and placeholder files end as on the local disk, and the
    provider saw each request created once."""
    prefix = "faults"
    store = s3.uri(prefix)
    root = _launcher(tmp_path / "launch", rows_file, store)
    with FakeProviderServer() as fake, s3.fault_proxy() as proxy:
        env = clean_env(
            {"OPENAI_API_KEY": KEY, "MMIRAGE_OPENAI_BASE_URL": fake.openai_base_url, **s3.env}
        )
        proxy.slow_writes(1.0, count=3, path="*.parts/*")
        proxy.slow_down(8, armed_by=("PUT", "*.parts/*.json"))
        cmd = ["run", "--config", "config.yaml", "--run-id", RUN, "--skip-invalid-rows"]
        first = run_cli([*cmd, *proxy.flags], root, env)
        slowed, failed = proxy.delayed, list(proxy.failed)
        proxy.release()
        print(f"run: exit {first.returncode}; {slowed} slowed, {len(failed)} 503s: {failed}")
        print(first.stderr[-3000:])
        assert slowed == 3 and failed, (slowed, failed)  # the rest may go unused
        assert "Traceback" not in first.stderr, first.stderr[-4000:]
        if first.returncode != 0:
            errors = [ln for ln in first.stderr.splitlines() if ln.startswith("mmirage: error:")]
            assert len(errors) == 1, first.stderr[-4000:]
            assert "SlowDown" in errors[0] or "503" in errors[0], errors
            resume = _resume_command(first.stderr)  # the flags it needs, the proxy's too
            assert resume[resume.index("--run-id") + 1] == RUN, resume
            assert "--skip-invalid-rows" in resume and proxy.endpoint in resume, resume
            again = run_cli(resume, root, env)
            assert again.returncode == 0, again.stdout + again.stderr[-4000:]
            assert "Traceback" not in again.stderr
        merge = run_cli_in_process(
            ["merge", "--config", "config.yaml", "--run-id", RUN, "--output-path",
             f"{store}/out/merged.jsonl", *s3.flags],
            root,
            env,
        )  # fmt: skip
        assert merge.returncode == 1, merge.stdout + merge.stderr[-4000:]  # rows 3 and 11
        sent = collections.Counter(r["custom_id"] for r in fake.submitted_requests())
        creates = fake.create_counts()
    assert sorted(sent) == sorted(f"answer-text-{i}" for i in VALID), "a request was lost"
    assert set(sent.values()) == {1}, f"created twice: {sent}"
    assert set(creates.values()) == {1}, creates
    assert s3.read(f"{prefix}/out/merged.jsonl") == local_reference["merged"]
    assert s3.read(f"{prefix}/out/merged.errors.jsonl") == local_reference["errors"]
    placeholders = f"{prefix}/shards/shard_0/placeholders.{RUN}-00000-of-00001.jsonl"
    assert s3.read(placeholders) == local_reference["placeholders"]
    assert s3.keys(f"{prefix}/shards/") == [placeholders]
    leftovers = [
        k for k in s3.keys(prefix) if re.search(r"\.parts/|\.lease\.|\.probe\.|\.staged\.", k)
    ]
    assert leftovers == []


def test_empty_files_and_one_client_per_setting(s3, monkeypatch):
    """Beam's S3 writer, as mmirage_beam.io.beam_s3 fixes it: an empty file is written
    (S3 needs one part), and its calls share one boto3 client per setting."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from mmirage_beam.io import beam_s3
    from mmirage_beam.io.fs import write_durably
    from mmirage_beam.launch import use_filesystem_options

    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    use_filesystem_options(PipelineOptions(s3.flags))
    beam_s3.clear_client_cache()
    write_durably(s3.uri("unit/empty.jsonl"), b"")
    with FileSystems.create(s3.uri("unit/empty-too.jsonl")):
        pass
    for _ in range(20):
        assert FileSystems.exists(s3.uri("unit/empty.jsonl"))
    assert len(beam_s3._CLIENTS) == 1
    assert s3.read("unit/empty.jsonl") == b"" and s3.read("unit/empty-too.jsonl") == b""
    assert s3.keys("unit/") == ["unit/empty-too.jsonl", "unit/empty.jsonl"]


@pytest.mark.parametrize("command", ["check", "runs", "cancel"])
def test_commands_without_a_pipeline_take_only_beams_filesystem_flags(command, capsys):
    import importlib

    parse_args = importlib.import_module(f"pipelines.{command}").parse_args
    flags = ["--s3_endpoint_url", "http://127.0.0.1:9", "--s3_region_name", "us-east-1"]
    assert parse_args(["--config", "c.yaml", *flags]).filesystem_flags == flags
    assert parse_args(["--config", "c.yaml"]).filesystem_flags == []
    with pytest.raises(SystemExit) as exc:
        parse_args(["--config", "c.yaml", "--runner", "DirectRunner"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert (
        "--runner DirectRunner" in err and "runs no pipeline" in err and "--s3_endpoint_url" in err
    )


@pytest.mark.parametrize("command", ["run", "merge", "check", "runs", "cancel"])
def test_a_storage_secret_is_never_a_flag(command, capsys):
    from pipelines.cli import main as cli_main

    extra = ["--output-path", "o.jsonl"] if command == "merge" else []
    code = cli_main([command, "--config", "c.yaml", *extra, "--s3_secret_access_key", "hush"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--s3_secret_access_key" in err and "AWS_SECRET_ACCESS_KEY" in err
    assert "hush" not in err
