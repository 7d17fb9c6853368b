"""Idempotent runs: a repeated `mmirage run` of the same config and data sends nothing."""

from __future__ import annotations

import json
import os

from mmirage_beam.run.store import RunStore, run_records
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config

#: The first GSM8K rows, in chunks of 100: four chunks, as the whole file (1,319 rows) makes
#: in chunks of 400, for a third of the rows (the size is not what is tested here).
N = 400


def _setup(tmp_path, fake, provider="openai"):
    data = tmp_path / "rows.jsonl"
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines(True)[:N]
    data.write_text("".join(lines), encoding="utf-8")
    url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    cfg = base_config(tmp_path, provider, base_url=url, max_requests_per_chunk=100)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    return cfg, data


def _submitted_once(tmp_path, fake):
    """The config (on Anthropic) submitted once: ``(its path, the receipts base, the
    run record of that run)``."""
    cfg, _ = _setup(tmp_path, fake, "anthropic")
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path]) == 0
    base = str(tmp_path / "meta" / "batch_metadata")
    (first,) = run_records(base)
    return path, base, first


def test_a_repeated_run_sends_nothing_and_names_the_earlier_run(tmp_path, provider_env, capsys):
    fake = provider_env
    path, base, first = _submitted_once(tmp_path, fake)
    assert first.finished is True
    assert (first.rows_read, first.requests, first.chunks_submitted) == (N, N, 4)
    capsys.readouterr()
    before = len(fake.submitted_requests())
    assert submit_main(["--config", path]) == 3
    err = capsys.readouterr().err
    assert f"nothing sent: run {first.run_id}" in err
    assert f"--run-id {first.run_id}" in err and "--new-run" in err
    assert len(fake.submitted_requests()) == before == N
    assert len(run_records(base)) == 1  # the refused run left no record
    # A dry run is exempt; --new-run submits again on purpose.
    assert submit_main(["--config", path, "--export-prompts", str(tmp_path / "x.jsonl")]) == 0
    assert submit_main(["--config", path, "--new-run"]) == 0
    assert len(fake.submitted_requests()) == 2 * N
    assert submit_main(["--config", path, "--new-run", "--run-id", "x"]) == 2


def test_a_changed_prompt_or_changed_data_sends(tmp_path, provider_env, capsys):
    fake = provider_env
    cfg, data = _setup(tmp_path, fake)
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path]) == 0
    cfg["processing_params"]["outputs"][0]["prompt"] = "Answer briefly:\n{{ question }}"
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path]) == 0
    assert len(fake.submitted_requests()) == 2 * N
    # Same size, one byte changed in the middle of the file: the mtime changes.
    original, st = data.read_bytes(), os.stat(data)
    raw = bytearray(original)
    raw[len(raw) // 2] = ord("7") if raw[len(raw) // 2] != ord("7") else ord("8")
    data.write_bytes(bytes(raw))
    assert submit_main(["--config", path]) == 0
    assert len(fake.submitted_requests()) == 3 * N
    # The original bytes and mtime again: the same data as the second run's.
    data.write_bytes(original)
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert submit_main(["--config", path]) == 3


def test_a_failed_run_does_not_block_a_new_one(tmp_path, provider_env, capsys):
    fake = provider_env
    cfg, _ = _setup(tmp_path, fake)
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path, "--run-id", "gone"]) == 0
    # Every batch of that run failed at the provider (as `check` records it).
    receipts = tmp_path / "meta" / "batch_metadata.text.gone.jsonl"
    lines = [json.loads(x) for x in receipts.read_text().splitlines()]
    receipts.write_text("".join(json.dumps(dict(r, status="failed")) + "\n" for r in lines))
    assert submit_main(["--config", path]) == 0
    assert len(fake.submitted_requests()) == 2 * N
    records = run_records(str(tmp_path / "meta" / "batch_metadata"))
    assert [r.finished for r in records] == [True, True]


def test_a_run_stopped_with_a_chunk_in_flight_counts_as_not_failed(tmp_path, provider_env, capsys):
    """An intent without receipt may be an accepted batch: resume, do not pay again."""
    fake = provider_env
    cfg, _ = _setup(tmp_path, fake)
    path = write_config(tmp_path, cfg)
    fake.script(fail_batch_creates={"nth": 1, "permanent": True, "status": 400})
    assert submit_main(["--config", path, "--run-id", "r0"]) == 1
    fake.script(fail_batch_creates=None)
    capsys.readouterr()
    assert submit_main(["--config", path]) == 3
    assert "--run-id r0" in capsys.readouterr().err
    assert fake.batches() == []


def test_a_resume_keeps_its_record_and_finishes_it(tmp_path, provider_env, capsys):
    fake = provider_env
    cfg, _ = _setup(tmp_path, fake)
    path = write_config(tmp_path, cfg)
    fake.script(fail_batch_creates={"nth": 3, "permanent": True, "status": 400})
    assert submit_main(["--config", path, "--run-id", "r"]) == 1
    base = str(tmp_path / "meta" / "batch_metadata")
    started = RunStore(base, "r").read_run_record()
    assert started.finished is False and started.requests is None
    # A fresh run of the same config is refused: run r has receipts.
    fake.script(fail_batch_creates=None)
    assert submit_main(["--config", path]) == 3
    assert submit_main(["--config", path, "--run-id", "r"]) == 0
    done = RunStore(base, "r").read_run_record()
    assert done.finished is True and done.started_at == started.started_at
    assert len(fake.submitted_requests()) == N
    assert done.to_json()["fingerprint"] == started.fingerprint


def test_the_refusal_keeps_wait_and_follows_a_run_another_process_holds(
    tmp_path, provider_env, capsys
):
    """Issue 38: the exit-3 advice said "resume it" for a run another process still held
    (the resume is then refused on its lease), and dropped ``--wait`` from the commands
    it named under ``run --wait``."""
    from mmirage_beam.run.lease import acquire

    fake = provider_env
    path, base, first = _submitted_once(tmp_path, fake)
    run_id = first.run_id
    capsys.readouterr()

    assert submit_main(["--config", path, "--wait"]) == 3
    err = capsys.readouterr().err
    assert f"--wait --run-id {run_id}" in err, err
    # a --limit run's advice keeps --limit: "submit again" must not send every row
    assert submit_main(["--config", path, "--limit", "3"]) == 0
    (limited,) = [r for r in run_records(base) if r.limit == 3]
    capsys.readouterr()
    assert submit_main(["--config", path, "--limit", "3"]) == 3
    err = capsys.readouterr().err
    assert f"--limit 3 --run-id {limited.run_id}" in err and "--limit 3 --new-run" in err, err
    assert "another process" not in err

    lease = acquire(base, run_id)  # a live launcher submitting it now
    try:
        assert submit_main(["--config", path]) == 3
        err = capsys.readouterr().err
    finally:
        lease.release()
    assert "another process is submitting it right now" in err, err
    assert f"mmirage check --config {path} --watch --run-id {run_id}" in err
    assert "resume or complete it:    " not in err
    assert len(fake.submitted_requests()) == N + 3  # the first run and the --limit 3 one


def test_an_empty_dataset_says_nothing_was_read_and_where_from(tmp_path, provider_env, capsys):
    """Issue 38: a dataset with no rows "succeeded" (``rows read: 0``, exit 0) and the
    merge that followed said "submit first"."""
    fake = provider_env
    cfg, data = _setup(tmp_path, fake)
    data.write_text("", encoding="utf-8")
    path = write_config(tmp_path, cfg)
    for extra in ([], ["--export-prompts", str(tmp_path / "x.jsonl")]):
        assert submit_main(["--config", path, "--new-run", *extra]) == 1
        err = capsys.readouterr().err
        assert "no row was read: the datasets hold no rows" in err, err
        assert f"loading_params.datasets[0]: JSONL {data}" in err
    assert fake.submitted_requests() == []


def test_empty_datasets_in_dry_runs_wait_runs_and_beside_others(tmp_path, provider_env, capsys):
    """Issue 38: with an empty dataset the dry run named an export file it never wrote,
    ``run --wait`` advised continuing a run that reads nothing, ``runs`` called the run
    "unfinished", and an empty second dataset beside a full one was silent."""
    from pipelines.runs import main as runs_main

    fake = provider_env
    cfg, data = _setup(tmp_path, fake)
    full = tmp_path / "full.jsonl"
    full.write_text(data.read_text(encoding="utf-8"), encoding="utf-8")
    data.write_text("", encoding="utf-8")
    path = write_config(tmp_path, cfg)
    export = tmp_path / "x.jsonl"
    assert submit_main(["--config", path, "--export-prompts", str(export)]) == 1
    out = capsys.readouterr().out
    assert "exported prompts:    none (no row was read)" in out, out
    assert list(tmp_path.glob("x.*")) == []

    assert submit_main(["--config", path, "--wait", "--poll-interval", "0.1"]) == 1
    out, err = capsys.readouterr()
    assert "no row was read, so there is nothing to wait for or merge" in out + err
    assert "continue with" not in out + err

    assert runs_main(["--config", path]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 3 and " empty " in table[1] and "unfinished" not in table[1], table

    # an empty dataset beside a full one: the run goes on and names the empty one
    cfg["loading_params"]["datasets"].insert(0, {**cfg["loading_params"]["datasets"][0]})
    cfg["loading_params"]["datasets"][0]["path"] = str(full)
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path, "--new-run"]) == 0
    out, err = capsys.readouterr()
    assert f"1 dataset(s) read 0 rows (loading_params.datasets[1]: JSONL {data})" in out + err
    assert len(fake.submitted_requests()) == N


def test_a_refused_wait_run_names_no_run_and_keeps_the_cycle_flags(tmp_path, provider_env, capsys):
    """Issue 38: ``run --wait`` announced a run ("run X: submit, wait, merge into ...")
    before it was refused (exit 3), and the advice dropped ``--retries`` and
    ``--output-path``."""
    fake = provider_env
    path, base, first = _submitted_once(tmp_path, fake)
    capsys.readouterr()
    out_path = tmp_path / "out dir" / "merged.jsonl"
    argv = ["--config", path, "--wait", "--retries", "2", "--output-path", str(out_path)]
    assert submit_main(argv) == 3
    out, err = capsys.readouterr()
    assert "submit, wait, merge" not in out + err
    assert len(run_records(base)) == 1  # no second run named or recorded
    wait = f"--wait --output-path '{out_path}' --retries 2"
    assert f"{wait} --run-id {first.run_id}" in err, err
    assert f"{wait} --new-run --no-reuse" in err, err
