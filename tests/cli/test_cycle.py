"""``mmirage run --wait`` (the whole cycle), ``cancel``, ``runs`` and ``--version``, through
the drivers against the embedded fake (real OpenAI / Anthropic SDKs over HTTP), on 30
GSM8K rows; the parsing and config rules as direct function tests."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pytest

from mmirage_beam.config import config_from_dict
from mmirage_beam.errors import ConfigError
from pipelines.cancel import main as cancel_main
from pipelines.check import main as check_main
from pipelines.cli import main as cli_main
from pipelines.resubmit import main as resubmit_main
from pipelines.runs import main as runs_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config

FLAKY = {2, 9, 17}  # rate-limited the first time the fake sees the prompt, then answered
ROWS = 30


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x]


def _setup(tmp_path, fake, provider="openai", flaky=FLAKY, invalid=()):
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:ROWS]]
    for i in flaky:
        rows[i]["question"] += " FAKE_ERROR:flaky"
    for i in invalid:
        rows[i]["question"] += " FAKE_ERROR:invalid_request"
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    cfg = base_config(tmp_path, provider, base_url=base_url, max_requests_per_chunk=10)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    return cfg


def _sent(fake) -> dict[str, int]:
    counts: dict[str, int] = {}
    for h in fake.submitted_requests():
        counts[h["custom_id"]] = counts.get(h["custom_id"], 0) + 1
    return counts


def test_wait_retries_flaky_rows_until_clean_then_runs_lists_the_chain(
    tmp_path, capsys, provider_env, provider="openai"
):
    # The cycle never asks a provider's name; Anthropic's flaky marker is shown at the
    # fake (test_fake_provider_markers.py), its resubmission in test_resubmit.py.
    fake = provider_env
    cfg = write_config(tmp_path, _setup(tmp_path, fake, provider))
    out = tmp_path / "merged.jsonl"
    argv = ["--config", cfg, "--wait", "--retries", "2", "--poll-interval", "0.2"]
    code = submit_main([*argv, "--output-path", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    merged = _read_jsonl(out)
    assert [m["source_index"] for m in merged] == list(range(ROWS))
    assert all("mmirage_errors" not in m and m["answer"] for m in merged)
    # Each flaky request was sent twice (failed once, then answered); every other once.
    sent = _sent(fake)
    assert {c for c, n in sent.items() if n == 2} == {f"answer-text-{i}" for i in FLAKY}
    assert set(sent.values()) == {1, 2} and len(sent) == ROWS
    resent = len(FLAKY)  # one output: one request per flaky row
    assert f"retries used:      1 of 2 (re-sent {resent} request(s))" in text
    assert "every row succeeded" in text
    assert "rate_limit" in text  # the first merge's failures, by type

    capsys.readouterr()
    assert runs_main(["--config", cfg]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["run", "id", "created", "links"]
    row = table[1].split()
    assert "merged" in row and row[-1].startswith("$") and len(table) == 3  # + the total


def test_retries_used_up_exit_1_then_continued_without_resending(tmp_path, capsys, provider_env):
    fake = provider_env
    cfg_dict = _setup(tmp_path, fake, invalid={5})
    # The config keys do the same as the flags: merge into merge_output_path, retry: 0.
    out = tmp_path / "from_config.jsonl"
    cfg_dict["execution_params"] = {"merge": True, "merge_output_path": str(out), "retry": 0}
    cfg = write_config(tmp_path, cfg_dict)
    assert submit_main(["--config", cfg, "--poll-interval", "0.2"]) == 1
    text = capsys.readouterr().out
    assert "retries used:      0 of 0" in text
    run_id = text.split("cycle summary, run ")[1].split()[0]
    assert f"--wait --run-id {run_id} --retries 1" in text  # what continues it
    assert "(the 0 retries are used up)" in text
    assert "--only all" in text  # the invalid request is not retryable
    errors = _read_jsonl(tmp_path / "from_config.errors.jsonl")
    assert {e["source_index"] for e in errors} == FLAKY | {5}
    state = json.loads((tmp_path / "meta" / f"batch_metadata.cycle.{run_id}.json").read_text())
    assert state["phase"] == "done" and state["runs"] == [run_id]

    before = _sent(fake)
    code = submit_main(
        ["--config", cfg, "--wait", "--run-id", run_id, "--retries", "1", "--poll-interval", "0.2"]
    )
    text = capsys.readouterr().out
    assert code == 1  # the invalid row is left, named
    resent = {c: n - before.get(c, 0) for c, n in _sent(fake).items() if n != before.get(c, 0)}
    assert resent == {f"answer-text-{i}": 1 for i in FLAKY}  # nothing else sent again
    assert [e["source_index"] for e in _read_jsonl(tmp_path / "from_config.errors.jsonl")] == [5]
    assert "retries used:      1 of 1 (re-sent 3 request(s))" in text
    assert "invalid_request_error" in text


def test_resume_at_retrying_does_not_start_a_started_resubmission(tmp_path, capsys, provider_env):
    """A cycle stopped after its resubmission was sent (state 'retrying') goes on to wait
    and merge; the resubmission is not sent a second time."""
    from mmirage_beam.cycle.state import CycleState

    fake = provider_env
    cfg = write_config(tmp_path, _setup(tmp_path, fake))
    out = tmp_path / "merged.jsonl"
    base = str(tmp_path / "meta" / "batch_metadata")
    wait = ["--wait", "--poll-interval", "0.2", "--output-path", str(out)]
    assert submit_main(["--config", cfg, "--run-id", "orig"]) == 0
    assert submit_main(["--config", cfg, *wait, "--run-id", "orig"]) == 1  # retries: 0
    errors = str(tmp_path / "merged.errors.jsonl")
    assert resubmit_main(["--config", cfg, "--from", errors, "--new-run-id", "again"]) == 0
    state = CycleState.load(base, "orig")
    state.phase, state.retry_run, state.retries = "retrying", "again", 1
    state.save(base)
    before = len(fake.submitted_requests())
    capsys.readouterr()
    assert (
        submit_main(["--config", cfg, "--wait", "--run-id", "orig", "--poll-interval", "0.2"]) == 0
    )
    text = capsys.readouterr().out
    assert "continuing the cycle at 'retrying'" in text and "already started" in text
    assert len(fake.submitted_requests()) == before
    assert CycleState.load(base, "orig").runs == ["orig", "again"]


def test_cancel_a_delayed_run_once_then_merge_marks_it_cancelled(
    tmp_path, capsys, monkeypatch, provider_env
):
    fake = provider_env
    cfg = write_config(tmp_path, _setup(tmp_path, fake, flaky=()))
    # Cancelling takes a third of the delay, so a cancel sent later than two thirds in
    # loses to completion: 12 s leaves the submission and the cancel 8 s (3 s did not,
    # on a loaded machine).
    fake.script(processing_delay_secs=12)
    wait = ["--wait", "--poll-interval", "0.2", "--timeout", "0.1"]
    assert submit_main(["--config", cfg, "--run-id", "slow", *wait]) == 1
    text = capsys.readouterr().out
    assert "stopped waiting (--timeout)" in text and "--wait --run-id slow" in text
    state = json.loads((tmp_path / "meta" / "batch_metadata.cycle.slow.json").read_text())
    assert state["phase"] == "waiting"
    monkeypatch.setattr("sys.stdin", None)  # no terminal to ask
    assert cancel_main(["--config", cfg]) == 2
    assert "pass --yes" in capsys.readouterr().err
    assert cancel_main(["--config", cfg, "--yes"]) == 0
    text = capsys.readouterr().out
    assert text.count("now cancelling") == 3  # 30 rows, 10 per batch
    assert cancel_main(["--config", cfg, "--yes"]) == 0  # nothing twice
    assert "not cancelled again" in capsys.readouterr().out
    record = json.loads((tmp_path / "meta" / "batch_metadata.cancel.slow.json").read_text())
    assert len(record["batches"]) == 3
    # the cancels land at the fake (an event, not a fixed sleep: issue 38)
    deadline = time.monotonic() + 60
    while any(b["status"] != "cancelled" for b in fake.batches("openai")):
        assert time.monotonic() < deadline, [b["status"] for b in fake.batches("openai")]
        time.sleep(0.05)
    # check tells a cancel the user asked for as such, not as a failure (newcomer trial:
    # "result: FAILED", exit 1, and advice to resubmit what was cancelled on purpose)
    assert check_main(["--config", cfg, "--run-id", "slow"]) == 0
    text = capsys.readouterr().out
    assert "result: cancelled (3 batch(es) cancelled with 'mmirage cancel', as asked" in text
    assert text.count("  cancelled  ") == 3 and "Fix: " not in text
    assert "mmirage merge --config " in text
    out = tmp_path / "merged.jsonl"
    code = submit_main(
        ["--config", cfg, "--wait", "--run-id", "slow", "--retries", "2"]
        + ["--poll-interval", "0.2", "--output-path", str(out)]
    )
    text = capsys.readouterr().out
    assert code == 1 and "the run was cancelled (mmirage cancel)" in text
    assert "retries used:      0 of 2" in text  # what a user cancelled is not re-sent
    errors = _read_jsonl(tmp_path / "merged.errors.jsonl")
    assert errors and {e["error_type"] for e in errors} == {"batch_cancelled"}
    assert len(_read_jsonl(out)) == ROWS


def test_cycle_flags_and_config_keys():
    from mmirage_beam.cycle.flags import cycle_wanted

    cfg = config_from_dict(base_config(Path("/tmp/x")))
    ns = dict(wait=False, output_path=None, retries=None, poll_interval=None, timeout=None)
    ns["export_prompts"] = None
    assert cycle_wanted(argparse.Namespace(**ns), cfg) is False
    with pytest.raises(ConfigError) as info:
        cycle_wanted(argparse.Namespace(**{**ns, "retries": 2}), cfg)
    assert info.value.key == "--retries"
    with pytest.raises(ConfigError) as info:
        cycle_wanted(argparse.Namespace(**{**ns, "wait": True, "export_prompts": "p"}), cfg)
    assert info.value.key == "--wait"
    with pytest.raises(ConfigError):
        cycle_wanted(argparse.Namespace(**{**ns, "wait": True, "poll_interval": 0}), cfg)

    raw = base_config(Path("/tmp/x"))
    raw["execution_params"] = {"retry": True}
    loaded = config_from_dict(raw)
    assert loaded.execution.retries == 2 and loaded.execution.cycle
    assert cycle_wanted(argparse.Namespace(**ns), loaded) is True
    raw["execution_params"] = {"retry": 3, "merge": True, "merge_output_path": "o.jsonl"}
    assert config_from_dict(raw).execution.retries == 3
    for bad, key in (({"retry": -1}, "retry"), ({"merge": "yes"}, "merge")):
        raw["execution_params"] = bad
        with pytest.raises(ConfigError) as info:
            config_from_dict(raw)
        assert info.value.key == f"execution_params.{key}"


def test_version(capsys):
    from importlib.metadata import version

    assert cli_main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"mmirage {version('mmirage-beam')}"


def test_limit_is_a_trial_run_of_the_first_rows_and_merge_says_so(tmp_path, capsys, provider_env):
    import dataclasses

    from mmirage_beam.config import load_config
    from mmirage_beam.run.fingerprint import run_fingerprint
    from mmirage_beam.run.store import RunStore

    fake = provider_env
    cfg = write_config(tmp_path, _setup(tmp_path, fake, flaky=()))
    out = tmp_path / "trial.jsonl"
    argv = ["--config", cfg, "--limit", "5", "--wait", "--poll-interval", "0.2"]
    assert submit_main([*argv, "--output-path", str(out)]) == 0
    text = capsys.readouterr().out
    assert "merging just its first 5 row(s)" in text
    assert [m["source_index"] for m in _read_jsonl(out)] == [0, 1, 2, 3, 4]
    assert sorted(_sent(fake)) == sorted(f"answer-text-{i}" for i in range(5))
    run_id = text.split("cycle summary, run ")[1].split()[0]
    base = str(tmp_path / "meta" / "batch_metadata")
    assert RunStore(base, run_id).read_run_record().limit == 5
    # Its own fingerprint: the full run afterwards is not refused as "already submitted".
    config = load_config(cfg)
    assert run_fingerprint(config) != run_fingerprint(dataclasses.replace(config, row_limit=5))


def test_rows_skipped_as_invalid_are_not_counted_as_succeeded(tmp_path, capsys, provider_env):
    """``run --wait --skip-invalid-rows``: a row left out at submit was never sent, so
    the summary counts it apart and the cycle exits 1 (newcomer trial: "rows succeeded:
    30 ... every row succeeded", exit 0, with 3 rows never sent)."""
    fake = provider_env
    cfg = _setup(tmp_path, fake, flaky=())
    data = Path(cfg["loading_params"]["datasets"][0]["path"])
    rows = [json.loads(x) for x in data.read_text(encoding="utf-8").splitlines()[:6]]
    del rows[2]["question"]  # invalid: its input is missing
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "merged.jsonl"
    argv = ["--config", write_config(tmp_path, cfg), "--wait", "--poll-interval", "0.2"]
    assert submit_main([*argv, "--skip-invalid-rows", "--output-path", str(out)]) == 1
    text = capsys.readouterr().out
    assert "rows succeeded:    5" in text and "rows skipped:      1" in text
    assert "not every row succeeded" in text and "wait: every row succeeded" not in text
    assert "1 row(s) were skipped as invalid at submit" in text
    merged = _read_jsonl(out)
    assert [m["source_index"] for m in merged if "mmirage_skipped" in m] == [2]
    assert sorted(_sent(fake)) == sorted(f"answer-text-{i}" for i in (0, 1, 3, 4, 5))
