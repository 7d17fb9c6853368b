"""``mmirage_beam.notify``: events derived from batch statuses and run records, the
signature (checked against OpenSSL's HMAC-SHA256), the bodies, delivery with retries
against a local receiver, the record that stops a second delivery, and the config's
``execution_params.notify`` rules."""

from __future__ import annotations

import json

import pytest

from mmirage_beam.config import config_from_dict
from mmirage_beam.errors import ConfigError
from mmirage_beam.notify import (
    build_body,
    delivered_ids,
    event_id,
    events_for,
    notifications_path,
    notify_run,
    redact_url,
    sign,
    slack_text,
    snapshot_of,
    webhooks,
)
from mmirage_beam.providers.batch_status import BatchProgress
from mmirage_beam.run.discovery import ReceiptEntry
from mmirage_beam.run.lookup import LOOKUP_FAILED, BatchStatus
from mmirage_beam.run.records import CancelRecord, MergeRecord, RunRecord
from mmirage_beam.run.store import RunStore
from tests.conftest import base_config
from tests.webhook_receiver import WebhookReceiver

RUN = "20261206-120000-abcdef"


def _status(
    status, word, done=None, failed=None, total=10, code=None, detail="", run=RUN, n=0, parent=None
):
    entry = ReceiptEntry(
        provider="openai",
        provider_batch_id=f"batch_{n}",
        run_id=run,
        modality="text",
        chunk_id=f"c{n}",
        output_name="answer",
        request_count=total,
        submitted_at=None,
        path="x.jsonl",
        receipt={"parent_run_id": parent} if parent else {},
    )
    progress = None
    if status != LOOKUP_FAILED:
        progress = BatchProgress(word, done, failed, total, detail=detail, error_code=code)
    return BatchStatus(entry, status, progress, "gone" if progress is None else None)


def _config(tmp_path, notify=None):
    cfg = base_config(tmp_path, model="gpt-4o-mini")
    if notify is not None:
        cfg["execution_params"] = {"notify": notify}
    return config_from_dict(cfg)


@pytest.fixture
def base(tmp_path):
    (tmp_path / "meta").mkdir()
    return str(tmp_path / "meta" / "batch_metadata")


def _events(base, tmp_path, statuses):
    return [e.name for e in events_for(snapshot_of(base, RUN, _config(tmp_path), statuses))]


def test_a_running_run_has_no_event_and_an_ended_clean_one_is_completed(base, tmp_path):
    running = [_status("completed", "completed", 10, 0), _status("in_progress", "in_progress", n=1)]
    assert _events(base, tmp_path, running) == []
    assert _events(base, tmp_path, [_status("completed", "completed", 10, 0)]) == ["completed"]
    assert _events(base, tmp_path, []) == []  # nothing of this run was looked up


def test_failures_expiry_cancel_and_budget_each_have_their_event(base, tmp_path):
    failed_requests = [_status("completed", "completed", 8, 2)]
    assert _events(base, tmp_path, failed_requests) == ["failed"]
    assert _events(base, tmp_path, [_status(LOOKUP_FAILED, "")]) == ["failed"]
    expired = [_status("completed", "expired", 6, 0)]  # 4 never ran
    assert _events(base, tmp_path, expired) == ["expired"]
    cancelled = [_status("completed", "cancelled", 3, 0)]
    assert _events(base, tmp_path, cancelled) == ["cancelled"]
    budget = _status("failed", "failed", 0, 0, code="token_limit_exceeded")
    assert _events(base, tmp_path, [budget]) == ["failed", "budget_reached"]
    # reached while another batch still runs: told at once, the terminal event later
    running = _status("in_progress", "in_progress", n=1)
    assert _events(base, tmp_path, [budget, running]) == ["budget_reached"]


def test_cancel_record_and_merge_record_decide(base, tmp_path):
    store = RunStore(base, RUN)
    clean = [_status("completed", "completed", 8, 2)]
    # merged with its resubmission: no row failed, whatever the first batch said
    store.write_merge_record(
        MergeRecord(RUN, [RUN], "/out/m.jsonl", stats={"rows_written": 10, "rows_with_failures": 0})
    )
    snap = snapshot_of(base, RUN, _config(tmp_path), clean, "c.yaml")
    assert [e.name for e in events_for(snap)] == ["completed"]
    assert (snap.counted_from, snap.requests_done, snap.next_command) == ("merge", 10, None)
    assert snap.merged_file == "/out/m.jsonl"
    store.write_merge_record(
        MergeRecord(RUN, [RUN], "/out/m.jsonl", stats={"rows_written": 10, "rows_with_failures": 1})
    )
    snap = snapshot_of(base, RUN, _config(tmp_path), clean, "c.yaml")
    assert [e.name for e in events_for(snap)] == ["failed"]
    assert snap.next_command == (
        f"mmirage resubmit --config c.yaml --from /out/m.errors.jsonl --run-id {RUN}"
    )
    store.write_cancel_record(CancelRecord(run_id=RUN))
    assert _events(base, tmp_path, clean) == ["cancelled"]


def test_a_resubmission_merged_with_its_chain_takes_the_chains_merge(base, tmp_path):
    """A resubmission whose own batches failed requests, merged with the run it
    resubmits (the merge record is the chain root's, naming both runs): its event and
    next command are the chain's merge's, not its own batches' (issue 38: a late
    ``failed`` event, and a next command that disagreed with check's)."""
    child = "20261206-130000-fedcba"
    again = [_status("completed", "completed", 1, 1, 2, run=child, parent=RUN)]
    before = snapshot_of(base, child, _config(tmp_path), again, "c.yaml")
    assert [e.name for e in events_for(before)] == ["failed"]  # not merged yet: its own
    RunStore(base, RUN).write_merge_record(
        MergeRecord(
            RUN, [RUN, child], "/out/m.jsonl", stats={"rows_written": 10, "rows_with_failures": 0}
        )
    )
    snap = snapshot_of(base, child, _config(tmp_path), again, "c.yaml")
    assert [e.name for e in events_for(snap)] == ["completed"]
    assert (snap.counted_from, snap.next_command, snap.merged_file) == (
        "merge",
        None,
        "/out/m.jsonl",
    )
    RunStore(base, RUN).write_merge_record(
        MergeRecord(
            RUN, [RUN, child], "/out/m.jsonl", stats={"rows_written": 10, "rows_with_failures": 1}
        )
    )
    snap = snapshot_of(base, child, _config(tmp_path), again, "c.yaml")
    assert [e.name for e in events_for(snap)] == ["failed"]
    assert snap.next_command == (
        f"mmirage resubmit --config c.yaml --from /out/m.errors.jsonl --run-id {RUN}"
    )
    # a merge of the root alone, before the resubmission existed, is not the child's
    RunStore(base, RUN).write_merge_record(
        MergeRecord(RUN, [RUN], "/out/m.jsonl", stats={"rows_written": 10, "rows_with_failures": 0})
    )
    alone = snapshot_of(base, child, _config(tmp_path), again, "c.yaml")
    assert alone.counted_from == "provider" and [e.name for e in events_for(alone)] == ["failed"]


def test_snapshot_counts_tokens_cost_and_next_command(base, tmp_path):
    RunStore(base, RUN).write_run_record(
        RunRecord(run_id=RUN, estimate={"input_tokens:answer": 1_000_000})
    )
    statuses = [
        _status("completed", "completed", 8, 2),
        _status("completed", "completed", 5, 0, 5, n=1),
    ]
    snap = snapshot_of(base, RUN, _config(tmp_path), statuses, "my cfg.yaml")
    assert (snap.requests_total, snap.requests_done, snap.requests_failed) == (15, 13, 2)
    assert (snap.input_tokens, snap.tokens_kind) == (1_000_000, "estimated")
    assert snap.cost_usd is not None and snap.cost_usd > 0  # gpt-4o-mini has a batch price
    # check's advice gives the fixing command, with the config path quoted
    assert snap.next_command.startswith("mmirage merge --config 'my cfg.yaml' --run-id ")
    assert any("some requests failed" in line for line in snap.advice)
    running = snapshot_of(base, RUN, _config(tmp_path), [_status("in_progress", "x")], "c.yaml")
    assert running.next_command == f"mmirage check --config c.yaml --run-id {RUN} --watch"


def test_signature_matches_openssl_hmac_sha256():
    # printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac s3cret
    want = "1698a50bc74d1ff1db85c4e0a5297c2ad9fdba245d5737cdb789e4cc6e098940"
    assert sign("s3cret", "1700000000", b'{"a":1}') == "sha256=" + want
    assert sign("other", "1700000000", b'{"a":1}') != "sha256=" + want
    assert sign("s3cret", "1700000001", b'{"a":1}') != "sha256=" + want


def test_event_id_is_stable_and_tells_event_run_and_url_apart():
    a = event_id(RUN, "completed", "https://h/x")
    assert a == event_id(RUN, "completed", "https://h/x") and len(a) == 32
    assert (
        len(
            {
                a,
                event_id(RUN, "failed", "https://h/x"),
                event_id(RUN, "completed", "https://h/y"),
                event_id("other", "completed", "https://h/x"),
            }
        )
        == 4
    )


def test_bodies_json_and_slack(base, tmp_path):
    snap = snapshot_of(base, RUN, _config(tmp_path), [_status("completed", "completed", 8, 2)])
    (event,) = events_for(snap)
    doc = json.loads(build_body(event, "https://h/x"))
    assert doc["schema"] == "mmirage.notification/1" and doc["event"] == "failed"
    assert doc["event_id"] == event_id(RUN, "failed", "https://h/x")
    assert doc["requests"] == {"total": 10, "done": 8, "failed": 2, "counted_from": "provider"}
    assert doc["model"] == "gpt-4o-mini" and doc["next_command"].startswith("mmirage merge")
    slack = json.loads(build_body(event, "https://h/x", "slack"))
    assert list(slack) == ["text"] and slack["text"] == slack_text(event)
    assert f"mmirage run {RUN} (openai gpt-4o-mini): failed" in slack["text"]
    assert "next: `mmirage merge" in slack["text"]
    with pytest.raises(ValueError):
        build_body(event, "https://h/x", "xml")


def test_redacted_url_keeps_only_the_host():
    assert (
        redact_url("https://hooks.slack.com/services/T0/B0/SECRET") == "https://hooks.slack.com/…"
    )
    assert redact_url("http://127.0.0.1:8080/x?token=1") == "http://127.0.0.1:8080/…"


def test_delivery_retries_a_500_then_records_and_never_sends_again(base, tmp_path, monkeypatch):
    monkeypatch.setenv("HOOK_SECRET", "s3cret")
    slept = []
    statuses = [_status("completed", "completed", 10, 0)]
    with WebhookReceiver(secret="s3cret", fail_first=1) as hook:
        cfg = _config(tmp_path, [{"url": hook.url, "secret_env": "HOOK_SECRET"}])
        result = notify_run(base, RUN, cfg, statuses=statuses, sleep=slept.append)
        assert [(d.event, d.status, d.attempts) for d in result.deliveries] == [
            ("completed", "delivered", 2)
        ]
        assert len(slept) == 1 and result.warnings == []
        assert [s.answered for s in hook.seen] == [500, 200]
        assert all(s.signature_ok for s in hook.seen)
        eid = event_id(RUN, "completed", hook.url)
        assert {s.headers["X-Mmirage-Event-Id"] for s in hook.seen} == {eid}
        assert delivered_ids(base, RUN) == {eid}
        line = json.loads(open(notifications_path(base, RUN)).read())
        assert line["url"].endswith("/…") and "hooks/mmirage" not in line["url"]
        # a restart: the record says it was delivered, nothing is sent
        again = notify_run(RunStore(base, RUN), None, cfg, statuses=statuses)
        assert [d.status for d in again.deliveries] == ["already_delivered"]
        assert len(hook.seen) == 2


def test_a_wrong_secret_is_refused_and_failed_delivery_is_a_warning(base, tmp_path, monkeypatch):
    monkeypatch.setenv("HOOK_SECRET", "not-the-receivers")
    statuses = [_status("completed", "completed", 10, 0)]
    with WebhookReceiver(secret="s3cret") as hook:
        cfg = _config(tmp_path, [{"url": hook.url, "secret_env": "HOOK_SECRET"}])
        result = notify_run(base, RUN, cfg, statuses=statuses, sleep=lambda s: None)
        assert [s.answered for s in hook.seen] == [401]  # a 4xx is not retried
        (warning,) = result.warnings
        assert "HTTP 401" in warning and "not delivered after 1 attempt" in warning
        assert delivered_ids(base, RUN) == set()


def test_an_unreachable_receiver_is_retried_a_bounded_number_of_times(base, tmp_path):
    with WebhookReceiver() as hook:
        url = hook.url  # closed on exit: nothing listens there any more
    slept = []
    cfg = _config(tmp_path, [{"url": url, "events": ["completed"]}])
    result = notify_run(
        base, RUN, cfg, statuses=[_status("completed", "completed", 10, 0)], sleep=slept.append
    )
    (d,) = result.deliveries
    assert (d.status, d.attempts) == ("failed", webhooks.MAX_ATTEMPTS)
    assert slept == [1.0, 2.0, 4.0]


def test_a_redirect_is_not_followed(base, tmp_path):
    """urllib would re-send a 302'd POST as a GET without its body and call it done."""
    with WebhookReceiver() as target, WebhookReceiver(redirect_to=target.url) as hook:
        cfg = _config(tmp_path, [{"url": hook.url}])
        result = notify_run(base, RUN, cfg, statuses=[_status("completed", "completed", 10, 0)])
        (d,) = result.deliveries
        assert (d.status, d.http_status, d.attempts) == ("failed", 302, 1)
        assert target.seen == [] and delivered_ids(base, RUN) == set()


def test_events_a_webhook_did_not_ask_for_are_not_sent(base, tmp_path):
    with WebhookReceiver() as hook:
        cfg = _config(tmp_path, [{"url": hook.url, "events": ["failed"]}])
        result = notify_run(base, RUN, cfg, statuses=[_status("completed", "completed", 10, 0)])
        assert result.deliveries == () and hook.seen == []


# config ------------------------------------------------------------------------------


def _load(tmp_path, notify):
    cfg = base_config(tmp_path)
    cfg["execution_params"] = {"notify": notify}
    return config_from_dict(cfg)


def test_config_defaults_and_short_form(tmp_path):
    cfg = _load(
        tmp_path,
        ["https://h.example/x", {"url": "http://h/y", "events": "failed", "format": "slack"}],
    )
    a, b = cfg.execution.notify
    assert (a.url, a.events, a.format, a.secret_env) == (
        "https://h.example/x",
        ("completed", "failed", "expired", "cancelled", "budget_reached"),
        "json",
        None,
    )
    assert (b.events, b.format) == (("failed",), "slack")
    assert config_from_dict(base_config(tmp_path)).execution.notify == ()


@pytest.mark.parametrize(
    "notify, key, words",
    [
        (
            [{"url": "https://h/x", "evnets": ["failed"]}],
            "execution_params.notify[0].evnets",
            "did you mean 'events'",
        ),
        ([{"url": "ftp://h/x"}], "execution_params.notify[0].url", "got scheme 'ftp'"),
        ([{"url": "https://"}], "execution_params.notify[0].url", "got no host"),
        ([{"url": "hooks.example/x"}], "execution_params.notify[0].url", "got no scheme"),
        ([{"events": ["failed"]}], "execution_params.notify[0].url", "is required"),
        (
            [{"url": "https://h/x", "events": ["complted"]}],
            "execution_params.notify[0].events[0]",
            "did you mean 'completed'",
        ),
        ([{"url": "https://h/x", "events": []}], "execution_params.notify[0].events", "non-empty"),
        (
            [{"url": "https://h/x", "format": "slak"}],
            "execution_params.notify[0].format",
            "did you mean 'slack'",
        ),
        (
            [{"url": "https://h/x", "secret_env": "abc def"}],
            "execution_params.notify[0].secret_env",
            "must name an environment variable",
        ),
        ({"url": "https://h/x"}, "execution_params.notify", "must be a list"),
        ([42], "execution_params.notify[0]", "must be a mapping"),
    ],
)
def test_config_errors_name_the_key(tmp_path, monkeypatch, notify, key, words):
    monkeypatch.delenv("MMIRAGE_TEST_UNSET_SECRET", raising=False)
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, notify)
    assert err.value.key == key and words in str(err.value), str(err.value)


def test_an_unset_secret_is_refused_by_run_not_at_load(tmp_path, monkeypatch):
    """The config loads (``check``, ``runs``, ``cancel`` read it from any shell);
    :func:`check_notify_secrets`, which ``mmirage run`` calls first, names the key."""
    from mmirage_beam.config.validation import check_notify_secrets

    monkeypatch.delenv("MMIRAGE_TEST_UNSET_SECRET", raising=False)
    config = _load(tmp_path, [{"url": "https://h/x", "secret_env": "MMIRAGE_TEST_UNSET_SECRET"}])
    with pytest.raises(ConfigError) as err:
        check_notify_secrets(config)
    assert err.value.key == "execution_params.notify[0].secret_env"
    assert "MMIRAGE_TEST_UNSET_SECRET is not set" in str(err.value)
    check_notify_secrets(config, {"MMIRAGE_TEST_UNSET_SECRET": "s"})  # set: nothing raised


def test_a_bad_url_is_not_echoed(tmp_path):
    """A webhook's path is often its secret (Slack's is): the error names the key and
    the scheme, never the URL."""
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, [{"url": "ftp://hooks.example/T0/B0/SECRETPART"}])
    assert "SECRETPART" not in str(err.value) and "hooks.example" not in str(err.value)


def test_a_typo_of_notify_itself_gets_did_you_mean(tmp_path):
    cfg = base_config(tmp_path)
    cfg["execution_params"] = {"notfy": []}
    with pytest.raises(ConfigError, match="did you mean 'notify'"):
        config_from_dict(cfg)
