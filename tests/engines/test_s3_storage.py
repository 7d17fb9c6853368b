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
the fake provider must have seen each custom_id created exactly once. The lifecycle and
that comparison are ``tests/storage_lifecycle.py``'s, shared with
``tests/engines/test_gcs_storage.py`` (``gs://`` on a GCS emulator).

Skipped when moto (or boto3) cannot be imported, failed instead with
``$MMIRAGE_REQUIRE_PORTABLE=1`` (CI).
"""

from __future__ import annotations

import collections
import re
import shlex
from pathlib import Path
from typing import Sequence

import pytest

from mmirage_beam.testing import FakeProviderServer
from tests import storage_lifecycle as lc
from tests.runners import clean_env, run_cli, run_cli_in_process
from tests.storage_lifecycle import KEY, RUN, VALID
from tests.storage_servers import S3Server


def test_the_lifecycle_on_s3_matches_the_local_disk(s3, rows_file, local_reference, tmp_path):
    """Dry run, submit, check, merge, resubmit, merge, runs and cancel (of this run: nothing
    left; of a run still running: cancelled) with the receipts, placeholder rows, export
    and merged files in the bucket: the same bytes as on disk."""
    prefix = "lifecycle"
    store = s3.uri(prefix)
    got = lc.lifecycle(
        lc.launcher(tmp_path / "launch", rows_file, store),
        store,
        lambda rel: s3.read(f"{prefix}/{rel}"),
        s3.flags,  # the endpoint: Beam's options; the credentials: the environment only
        s3.env,
        {"AWS_ENDPOINT_URL_S3": s3.endpoint},  # `runs`: boto3's variable instead of flags
    )
    lc.assert_matches_local(got, local_reference, s3.keys(prefix), prefix)


def _resume_command(stderr: str) -> list[str]:
    """The ``mmirage run ...`` line a failed run printed, as arguments after ``mmirage``."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip().startswith("mmirage run --")]
    assert len(lines) == 1, stderr[-4000:]
    return shlex.split(lines[0])[1:]


def publish_through_faults(
    s3: S3Server,
    rows_file: Path,
    local_reference: dict,
    tmp_path: Path,
    runner_flags: Sequence[str] = (),
) -> None:
    """While the run writes its intents and receipts, the first three PUTs there land
    1 s late, and once the first receipt is durable the next 8 writes get S3's ``503
    SlowDown`` (boto3 tries each call 3 times; Beam retries a failed copy after 5 s). The
    run either survives, or stops with one error line (no traceback) and the command that
    resumes it (batches accepted without a receipt are adopted, not sent again); either
    way the merged, errors and placeholder files end as on the local disk, and the
    provider saw each request created once.

    With ``runner_flags`` (a portable runner's), the run, its resume and the merge run
    their pipelines on that engine: there the writes come from the engine's SDK workers,
    which reach S3 through the same proxy (its endpoint is a pipeline option)."""
    prefix = "faults"
    store = s3.uri(prefix)
    root = lc.launcher(tmp_path / "launch", rows_file, store)
    with FakeProviderServer() as fake, s3.fault_proxy() as proxy:
        env = clean_env(
            {"OPENAI_API_KEY": KEY, "MMIRAGE_OPENAI_BASE_URL": fake.openai_base_url, **s3.env}
        )
        proxy.slow_writes(1.0, count=3, path="*.parts/*")
        proxy.slow_down(8, armed_by=("PUT", "*.parts/*.json"))
        cmd = ["run", "--config", "config.yaml", "--run-id", RUN, "--skip-invalid-rows"]
        first = run_cli([*cmd, *proxy.flags, *runner_flags], root, env, timeout=600)
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
            assert all(flag in resume for flag in runner_flags), resume
            again = run_cli(resume, root, env, timeout=600)
            assert again.returncode == 0, again.stdout + again.stderr[-4000:]
            assert "Traceback" not in again.stderr
        merge_args = ["merge", "--config", "config.yaml", "--run-id", RUN, "--output-path",
                      f"{store}/out/merged.jsonl", *s3.flags]  # fmt: skip
        if runner_flags:
            merge = run_cli([*merge_args, *runner_flags], root, env, timeout=600)
        else:
            merge = run_cli_in_process(merge_args, root, env)
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


def test_a_burst_of_503s_and_slow_writes_while_the_submission_publishes(
    s3, rows_file, local_reference, tmp_path
):
    """:func:`publish_through_faults` on the DirectRunner."""
    publish_through_faults(s3, rows_file, local_reference, tmp_path)


def test_empty_files_and_one_client_per_setting(s3, monkeypatch):
    """Beam's S3 writer, as mmirage_beam.io.beam_s3 fixes it: an empty file is written
    (S3 needs one part), and its calls share one boto3 client per setting."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from mmirage_beam.io import beam_s3
    from mmirage_beam.io.filesystems import use_filesystem_options
    from mmirage_beam.io.fs import write_durably

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
