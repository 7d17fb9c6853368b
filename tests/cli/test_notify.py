"""Webhook notifications through the drivers: ``mmirage run --wait`` against the
embedded fake (the official OpenAI SDK over HTTP) tells a local receiver, which checks
the HMAC signature and fails the first delivery, that the run ended; ``check --watch``
run again afterwards (a restart) sends nothing more; a run with a failing row sends
``failed``, in JSON and in Slack's form; a notify mistake in the config stops the run
before anything is sent; a receiver that is down is a warning, not an exit status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmirage_beam.notify import event_id, notifications_path, webhooks
from pipelines.check import main as check_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config
from tests.webhook_receiver import WebhookReceiver

ROWS = 12
SECRET = "whsec-test-only"


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch):
    """Retries of a delivery without waiting seconds (the backoff is unit-tested)."""
    monkeypatch.setattr(webhooks, "RETRY_INITIAL_DELAY_SECS", 0.01)
    monkeypatch.setenv("MMIRAGE_TEST_HOOK_SECRET", SECRET)


def _config(tmp_path, fake, notify, *, flaky=(), invalid=(), retry=1):
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:ROWS]]
    for i in flaky:
        rows[i]["question"] += " FAKE_ERROR:flaky"
    for i in invalid:
        rows[i]["question"] += " FAKE_ERROR:invalid_request"
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url, max_requests_per_chunk=5)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    cfg["execution_params"] = {
        "merge": True,
        "merge_output_path": str(tmp_path / "merged.jsonl"),
        "retry": retry,
        "notify": notify,
    }
    return write_config(tmp_path, cfg)


def _run_id(text: str) -> str:
    return text.split("cycle summary, run ")[1].split()[0]


def _base(tmp_path) -> str:
    return str(tmp_path / "meta" / "batch_metadata")


def test_run_wait_sends_completed_once_after_a_retry_and_a_restart_sends_nothing(
    tmp_path, capsys, provider_env
):
    with WebhookReceiver(secret=SECRET, fail_first=1) as hook:
        notify = [{"url": hook.url, "secret_env": "MMIRAGE_TEST_HOOK_SECRET"}]
        # row 4 is rate-limited once: the cycle re-sends it, and the run ends clean
        cfg = _config(tmp_path, provider_env, notify, flaky={4})
        code = submit_main(["--config", cfg, "--poll-interval", "0.2"])
        text = capsys.readouterr().out
        assert code == 0, text
        run_id = _run_id(text)
        assert "every row succeeded" in text
        assert "notify: event 'completed' sent to http://127.0.0.1:" in text
        # the first delivery answered 500, the retry 200; both signed and verified
        assert [s.answered for s in hook.seen] == [500, 200]
        assert all(s.signature_ok for s in hook.seen)
        (doc,) = hook.accepted
        eid = event_id(run_id, "completed", hook.url)
        assert doc["event"] == "completed" and doc["event_id"] == eid
        assert doc["run_id"] == run_id and doc["provider"] == "openai"
        assert doc["requests"] == {
            "total": ROWS,
            "done": ROWS,
            "failed": 0,
            "counted_from": "merge",
        }
        assert doc["tokens"]["kind"] == "reported" and doc["tokens"]["input"] > 0
        assert doc["merged_file"] == str(tmp_path / "merged.jsonl")
        assert doc["next_command"] is None  # merged, nothing failed
        assert {s.headers["X-Mmirage-Event-Id"] for s in hook.seen} == {eid}
        record = Path(notifications_path(_base(tmp_path), run_id)).read_text().splitlines()
        assert [json.loads(x)["event_id"] for x in record] == [eid]

        # A restart: check --watch of the run (its first batch had a failed request;
        # the merge record says the run ended clean) finds the event delivered.
        argv = ["--config", cfg, "--run-id", run_id, "--watch", "--interval", "0.2"]
        # (check's own verdict, 1, counts that batch's failed request: unchanged)
        assert check_main(argv) == 1
        out = capsys.readouterr().out
        assert "notify:" not in out
        # and so does the cycle continued by hand
        code = submit_main(
            ["--config", cfg, "--wait", "--run-id", run_id, "--poll-interval", "0.2"]
        )
        assert code == 0
        assert "notify: event 'completed' sent" not in capsys.readouterr().out
        assert len(hook.seen) == 2


def test_a_failed_run_sends_failed_as_json_and_slack_and_a_dead_receiver_is_a_warning(
    tmp_path, capsys, provider_env
):
    with WebhookReceiver(secret=SECRET) as hook, WebhookReceiver() as slack:
        with WebhookReceiver() as gone:
            dead = gone.url  # nothing listens there once closed
        notify = [
            {"url": hook.url, "events": ["failed"], "secret_env": "MMIRAGE_TEST_HOOK_SECRET"},
            {"url": slack.url, "format": "slack"},
            {"url": dead, "events": ["failed"]},
        ]
        cfg = _config(tmp_path, provider_env, notify, invalid={3}, retry=0)
        code = submit_main(["--config", cfg, "--poll-interval", "0.2"])
        captured = capsys.readouterr()
        assert code == 1, captured.out  # a row failed; the dead receiver changes nothing
        run_id = _run_id(captured.out)
        (doc,) = hook.accepted
        assert hook.seen[0].signature_ok
        assert doc["event"] == "failed" and doc["run_id"] == run_id
        assert doc["requests"]["failed"] == 1 and doc["requests"]["done"] == ROWS - 1
        errors = str(tmp_path / "merged.errors.jsonl")
        assert doc["next_command"] == (
            f"mmirage resubmit --config {cfg} --from {errors} --run-id {run_id}"
        )
        (message,) = slack.accepted
        assert list(message) == ["text"]
        assert message["text"].startswith(f"mmirage run {run_id} (openai")
        assert ": failed\n" in message["text"] and "next: `mmirage resubmit" in message["text"]
        assert "X-Mmirage-Signature" not in slack.seen[0].headers  # no secret_env: unsigned
        assert (
            f"not delivered after {webhooks.MAX_ATTEMPTS} attempt(s)" in captured.out
        )  # the warning
        assert "http://127.0.0.1:" in captured.out and "/…" in captured.out

        # check --watch afterwards: the two delivered events are not sent again; the
        # dead receiver's is tried again (and fails again: a warning on stderr)
        argv = ["--config", cfg, "--run-id", run_id, "--watch", "--interval", "0.2"]
        assert check_main(argv) == 1
        captured = capsys.readouterr()
        assert "notify: failed of run" not in captured.out
        assert "not delivered" in captured.err
        assert len(hook.seen) == 1 and len(slack.seen) == 1


def test_a_notify_mistake_stops_the_run_before_anything_is_sent(tmp_path, capsys, provider_env):
    notify = [{"url": "https://hooks.example/x", "secret_env": "MMIRAGE_TEST_UNSET_SECRET"}]
    cfg = _config(tmp_path, provider_env, notify)
    assert submit_main(["--config", cfg, "--poll-interval", "0.2"]) == 2
    err = capsys.readouterr().err
    assert "execution_params.notify[0].secret_env" in err
    assert "MMIRAGE_TEST_UNSET_SECRET is not set" in err
    assert provider_env.submitted_requests() == []


def test_reading_commands_do_not_need_the_signing_secret(tmp_path, capsys, provider_env):
    """``runs``, ``check`` and ``cancel`` load the same config from shells that need not
    hold the webhook's secret; only ``mmirage run`` refuses without it (newcomer trial:
    ``mmirage runs`` stopped with the config error)."""
    from pipelines.runs import main as runs_main

    notify = [{"url": "https://hooks.example/x", "secret_env": "MMIRAGE_TEST_UNSET_SECRET"}]
    cfg = _config(tmp_path, provider_env, notify)
    assert runs_main(["--config", cfg]) == 0
    assert check_main(["--config", cfg]) == 2  # no run yet: "submit first", not the secret
    err = capsys.readouterr().err
    assert "secret_env" not in err and "MMIRAGE_TEST_UNSET_SECRET" not in err


def _plain_config(tmp_path, fake, notify, rows: slice, name: str) -> str:
    """A config without the cycle (``mmirage run`` only submits) over ``rows`` of GSM8K."""
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[rows]
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url, max_requests_per_chunk=5)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    cfg["execution_params"] = {"notify": notify}
    return write_config(tmp_path, cfg, f"{name}.yaml")


def _submitted_run(capsys, cfg: str) -> str:
    from mmirage_beam.run.store import run_records

    assert submit_main(["--config", cfg]) == 0, capsys.readouterr()
    capsys.readouterr()
    return run_records(str(Path(cfg).parent / "meta" / "batch_metadata"))[0].run_id


def test_check_watch_reports_the_runs_it_saw_running_and_the_run_it_is_named(
    tmp_path, capsys, provider_env
):
    fake = provider_env
    with WebhookReceiver() as hook:
        notify = [{"url": hook.url}]
        # run A ended before anyone watched it (instant batches)
        run_a = _submitted_run(capsys, _plain_config(tmp_path, fake, notify, slice(0, 6), "a"))
        # run B's batches take a second, then expire after 2 requests each
        fake.script(processing_delay_secs=1.0, expire_after_requests=2)
        cfg_b = _plain_config(tmp_path, fake, notify, slice(6, 16), "b")
        run_b = _submitted_run(capsys, cfg_b)

        # every run of the config: B was running at the first poll, A had ended
        assert check_main(["--config", cfg_b, "--watch", "--interval", "0.2"]) == 1
        out = capsys.readouterr().out
        assert f"notify: event 'expired' of run {run_b} sent" in out
        assert [(d["event"], d["run_id"]) for d in hook.accepted] == [("expired", run_b)]
        doc = hook.accepted[0]
        assert doc["requests"]["counted_from"] == "provider"
        assert doc["requests"]["failed"] == 6 and doc["requests"]["done"] == 4  # 2 + 2 + 2 ran
        assert doc["next_command"].startswith(f"mmirage merge --config {cfg_b} --run-id {run_b}")
        assert doc["tokens"]["kind"] == "estimated" and doc["tokens"]["input"] > 0

        # named with --run-id, the run that ended before is reported too, once
        argv = ["--config", cfg_b, "--run-id", run_a, "--watch", "--interval", "0.2"]
        assert check_main(argv) == 0
        assert f"notify: event 'completed' of run {run_a} sent" in capsys.readouterr().out
        assert check_main(argv) == 0
        assert check_main(["--config", cfg_b, "--run-id", run_b, "--watch"]) == 1
        assert "notify:" not in capsys.readouterr().out
        assert [(d["event"], d["run_id"]) for d in hook.accepted] == [
            ("expired", run_b),
            ("completed", run_a),
        ]


def test_a_token_limit_failure_sends_failed_and_budget_reached(tmp_path, capsys, provider_env):
    fake = provider_env
    with WebhookReceiver() as hook:
        cfg = _plain_config(tmp_path, fake, [{"url": hook.url}], slice(0, 4), "budget")
        fake.script(token_limit_exceeded=True)
        run_id = _submitted_run(capsys, cfg)
        assert check_main(["--config", cfg, "--run-id", run_id, "--watch"]) == 1
        assert [d["event"] for d in hook.accepted] == ["failed", "budget_reached"]
        assert len({d["event_id"] for d in hook.accepted}) == 2


def test_a_run_stopped_with_mmirage_cancel_sends_cancelled(tmp_path, capsys, provider_env):
    from pipelines.cancel import main as cancel_main

    fake = provider_env
    with WebhookReceiver() as hook:
        cfg = _plain_config(tmp_path, fake, [{"url": hook.url}], slice(0, 6), "cancel")
        fake.script(processing_delay_secs=9.0)  # still running when cancelled (D/3 to cancel)
        run_id = _submitted_run(capsys, cfg)
        assert cancel_main(["--config", cfg, "--run-id", run_id, "--yes"]) == 0
        capsys.readouterr()
        # a cancel the user asked for is "result: cancelled", exit 0, not a failure
        assert (
            check_main(["--config", cfg, "--run-id", run_id, "--watch", "--interval", "0.2"]) == 0
        )
        (doc,) = hook.accepted
        assert doc["event"] == "cancelled" and doc["run_id"] == run_id


def test_the_dashboards_poller_notifies_the_run_it_shows_once(tmp_path, capsys, provider_env):
    """``mmirage ui``'s one-run view (``ui.data.run_view``, which the page polls) tells
    the webhooks the run's end, once however often it is polled; without a lookup (the
    ``--no-lookup`` dashboard) it sends nothing."""
    from mmirage_beam.config import load_config
    from mmirage_beam.ui.data import Source, run_view

    fake = provider_env
    with WebhookReceiver(secret=SECRET, fail_first=1) as hook:
        notify = [{"url": hook.url, "secret_env": "MMIRAGE_TEST_HOOK_SECRET"}]
        cfg = _plain_config(tmp_path, fake, notify, slice(0, 6), "shown")
        run_id = _submitted_run(capsys, cfg)
        source = Source(0, cfg, load_config(cfg))
        assert run_view(source, run_id, lookup=False)["notified"] == []
        assert hook.seen == []
        view = run_view(source, run_id)
        redacted = webhooks.redact_url(hook.url)  # a webhook's path is often its secret
        assert view["notified"] == [f"event 'completed' of run {run_id} sent to {redacted}"]
        assert run_view(source, run_id)["notified"] == []  # polled again: not sent twice
        assert [s.answered for s in hook.seen] == [500, 200]  # the first delivery failed
        assert all(s.signature_ok for s in hook.seen)
        assert [(d["event"], d["run_id"]) for d in hook.accepted] == [("completed", run_id)]
