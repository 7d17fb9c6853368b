"""Verdicts that can be trusted: check, merge and resubmit agree, across providers, through
transient failures, for unfinished runs and for text holding any Unicode.

Real submissions (``pipelines.submit.main``) through the real SDKs to the embedded fake,
then the real ``check`` / ``merge`` / ``resubmit`` drivers on the DirectRunner.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmirage_beam.testing import fake_answer_text
from pipelines.check import main as check_main
from pipelines.merge import main as merge_main
from pipelines.resubmit import main as resubmit_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config

#: Lookups fail here on purpose (404s, unknown batch ids): retried as often, without the
#: real backoff's seconds of sleep (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fast_provider_retries")

PROMPT = "Answer concisely:\n"


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_bytes().split(b"\n") if x.strip()]


def _rows(n, markers=None):
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").split("\n")[:n]]
    for i, marker in (markers or {}).items():
        rows[i]["question"] += f" {marker}"
    return rows


def _setup(tmp_path, provider, fake, rows, json_output=False, **proc):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = base_config(tmp_path, provider, base_url=fake.base_url_for(provider), **proc)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    if json_output:
        cfg["processing_params"]["outputs"][0].update(
            output_type="JSON", output_schema={"value": "str"}
        )
        cfg["processing_params"]["output_schema"]["answer"] = "{{ answer.value }}"
    return write_config(tmp_path, cfg)


def _merge(tmp_path, cfg, *extra):
    out = tmp_path / "merged.jsonl"
    code = merge_main(["--config", cfg, "--output-path", str(out), *extra])
    merged = _read_jsonl(out) if out.exists() else None
    errors_file = tmp_path / "merged.errors.jsonl"
    return code, merged, (_read_jsonl(errors_file) if errors_file.exists() else [])


def _check(capsys, *args):
    code = check_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# -- consistent verdicts ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["expire", "cancel"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_expired_or_cancelled_batch_is_a_failure_everywhere(
    tmp_path, capsys, provider_env, provider, kind
):
    """check (exit 1, advice), merge and ``resubmit --only all`` count the same failures,
    whichever the provider, and never from completed + failed == total; the merge keeps
    the batch's partial results (was test_merge.py's
    test_expired_and_cancelled_keep_partial_results, on a run of its own)."""
    fake = provider_env
    rows = _rows(10)
    cfg = _setup(tmp_path, provider, fake, rows)
    fake.script(**{f"{kind}_after_requests": 6})
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    capsys.readouterr()
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 1, out + err
    assert " failed " in out
    assert "requests done 6, failed 4, total 10" in " ".join(out.split())
    assert "what this means:" in out and "mmirage resubmit --config" in out
    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 1 and len(merged) == 10
    assert len(errors) == 4 and all(e["retryable"] for e in errors)
    # The batch's partial results are kept: every row written, in order, the answered
    # ones joined, the rest marked with the provider's own word for it.
    assert [m["source_index"] for m in merged] == list(range(10))
    done = [m for m in merged if "mmirage_errors" not in m]
    assert len(done) == 6
    for m in done:
        assert m["answer"] == fake_answer_text(PROMPT + rows[m["source_index"]]["question"])
    expected = {
        ("openai", "expire"): {"batch_expired"},
        ("openai", "cancel"): {"batch_cancelled"},
        ("anthropic", "expire"): {"expired"},
        ("anthropic", "cancel"): {"canceled"},
    }[(provider, kind)]
    assert {e["error_type"] for e in errors} == expected
    failed_ids = {e["custom_id"] for e in errors}
    assert resubmit_main(["--config", cfg, "--only", "all", "--new-run-id", "r2"]) == 0
    err = capsys.readouterr().err
    assert "re-sending 4 failed request(s) (all)" in err
    sent = {r["custom_id"] for r in fake.submitted_requests(provider)}
    assert failed_ids <= sent


def test_only_all_resends_invalid_json_like_merge_counts_it(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(6, {2: "FAKE_ERROR:not_json", 4: "FAKE_ERROR:not_json"})
    cfg = _setup(tmp_path, "openai", fake, rows, json_output=True)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 1
    assert sorted((e["source_index"], e["error_type"]) for e in errors) == [
        (2, "invalid_json"),
        (4, "invalid_json"),
    ]
    capsys.readouterr()
    # From the provider's results (no errors file): the same two, only under --only all.
    assert resubmit_main(["--config", cfg, "--run-id", "r1"]) == 0
    assert "nothing to resubmit" in capsys.readouterr().out
    assert resubmit_main(["--config", cfg, "--run-id", "r1", "--only", "all"]) == 0
    assert "re-sending 2 failed request(s) (all)" in capsys.readouterr().err


# -- transient lookups ----------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_transient_404_on_lookup_is_retried(tmp_path, capsys, provider_env, provider):
    fake = provider_env
    rows = _rows(4)
    cfg = _setup(tmp_path, provider, fake, rows)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    endpoint = {
        "openai": "batches_retrieve",
        "anthropic": "messages_batches_retrieve",
        "gemini": "gemini_batches_get",
    }[provider]
    fake.script(leading_errors={"status": 404, "count": 1, "paths": [endpoint]})
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 0, out + err
    assert "result: ok (every batch completed and the provider reports no failed request" in out
    fake.script(leading_errors={"status": 404, "count": 1, "paths": [endpoint]})
    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 0 and errors == []
    assert [m["answer"] for m in merged] == [fake_answer_text(PROMPT + r["question"]) for r in rows]


def test_watch_keeps_watching_through_a_failed_lookup(tmp_path, capsys, provider_env):
    """More 5xx than one lookup's retries: that poll fails, the watch goes on."""
    fake = provider_env
    cfg = _setup(tmp_path, "openai", fake, _rows(4))
    fake.script(processing_delay_secs=0.6)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    capsys.readouterr()
    fake.script(leading_errors={"status": 503, "count": 7, "paths": ["batches_retrieve"]})
    code, out, err = _check(capsys, "--config", cfg, "--watch", "--interval", "0.3")
    assert code == 0, out + err
    polls = [ln for ln in out.split("\n") if ln.startswith("poll ")]
    assert "lookup_failed 1" in polls[0]
    assert len(polls) >= 2 and "completed 1" in polls[-1]
    assert "result: ok (every batch completed and the provider reports no failed request" in out


# -- unfinished runs ------------------------------------------------------------------------


def test_merge_of_an_unfinished_run_says_so_and_exits_1(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(6)
    cfg = _setup(tmp_path, "openai", fake, rows, max_requests_per_chunk=2)
    # The first create succeeds, every later one is refused: the run stops part-way.
    fake.script(fail_batch_creates={"nth": 2, "permanent": True, "status": 400})
    assert submit_main(["--config", cfg, "--run-id", "r1"]) != 0
    receipted = {r["custom_id"] for r in fake.submitted_requests("openai")}
    assert 0 < len(receipted) < 6
    capsys.readouterr()
    code, merged, errors = _merge(tmp_path, cfg)
    out = capsys.readouterr().out
    assert code == 1
    never = 6 - len(receipted)
    assert f"{never} row(s) ({never} request(s)) were never submitted" in out
    assert f"mmirage run --config {cfg} --run-id r1" in out
    assert [m["source_index"] for m in merged] == list(range(6))  # every row written
    marked = [m for m in merged if "mmirage_errors" in m]
    assert len(marked) == never
    assert {m["mmirage_errors"]["answer"]["type"] for m in marked} == {"never_submitted"}
    assert sum(1 for e in errors if e["error_type"] == "never_submitted") == never
    assert f"never_submitted:   {never}" in out
    # The resume sends the rest; then the merge is complete.
    fake.script(fail_batch_creates=None)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    capsys.readouterr()
    code, merged, errors = _merge(tmp_path, cfg)
    out = capsys.readouterr().out
    assert code == 0 and errors == [], out
    assert "UNFINISHED" not in out


def test_leftover_intent_means_unfinished(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(4)
    cfg = _setup(tmp_path, "openai", fake, rows, max_requests_per_chunk=2)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    receipt = tmp_path / "meta" / "batch_metadata.text.r1.jsonl"
    lines = _read_jsonl(receipt)
    # As if the run had stopped while submitting the second chunk.
    receipt.write_text(json.dumps(lines[0]) + "\n", encoding="utf-8")
    parts = Path(str(receipt) + ".parts")
    parts.mkdir()
    (parts / f"{lines[1]['chunk_id']}.intent").write_text(json.dumps(lines[1]), "utf-8")
    capsys.readouterr()
    code, merged, errors = _merge(tmp_path, cfg)
    out = capsys.readouterr().out
    assert code == 1
    assert "UNFINISHED: run r1" in out and "1 interrupted chunk submission(s)" in out
    assert "2 row(s) (2 request(s)) were never submitted" in out


# -- Unicode ------------------------------------------------------------------------------


def test_resubmit_from_an_errors_file_with_u2028(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = _rows(5, {1: "FAKE_ERROR:server_error", 3: "FAKE_ERROR:server_error"})
    cfg = _setup(tmp_path, "openai", fake, rows)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    code, merged, errors = _merge(tmp_path, cfg)
    assert code == 1 and len(errors) == 2
    # A provider message holding raw line separators, as real ones can.
    errors_file = tmp_path / "merged.errors.jsonl"
    for e in errors:
        e["message"] = "boom\u2028second line\u2029third\u0085fourth\x1cfifth"
    errors_file.write_text(
        "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in errors), encoding="utf-8"
    )
    assert len(errors_file.read_text(encoding="utf-8").splitlines()) > 2  # the old trap
    capsys.readouterr()
    code = resubmit_main(["--config", cfg, "--from", str(errors_file), "--new-run-id", "r2"])
    assert code == 0
    assert "re-sending 2 failed request(s) (retryable)" in capsys.readouterr().err


def test_receipts_with_u2028_are_read_whole(tmp_path, capsys, provider_env):
    from mmirage_beam.run.receipts import read_receipts

    fake = provider_env
    cfg = _setup(tmp_path, "openai", fake, _rows(3))
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    receipt = tmp_path / "meta" / "batch_metadata.text.r1.jsonl"
    (r,) = _read_jsonl(receipt)
    r["model_params_snapshot"]["note"] = "a\u2028b\u0085c"
    receipt.write_text(json.dumps(r, ensure_ascii=False) + "\n", encoding="utf-8")
    assert read_receipts(str(receipt))[0]["model_params_snapshot"]["note"] == "a\u2028b\u0085c"
    code, out, err = _check(capsys, "--config", cfg)
    assert code == 0, out + err


# -- every outcome in one results file --------------------------------------------------

_BOTH = {
    "FAKE_ERROR:refusal": "refusal",
    "FAKE_ERROR:length": "truncated",  # a cut JSON answer: truncated, not invalid_json
    "FAKE_ERROR:empty": "empty",
    "FAKE_ERROR:malformed_line": "malformed_response",
    "FAKE_ERROR:truncated_line": "malformed_response",
    "FAKE_ERROR:wrong_shape": "malformed_response",
    "FAKE_ERROR:invalid_utf8": "malformed_response",
    "FAKE_ERROR:u2028": "invalid_request_error",
    "FAKE_ERROR:not_json": "invalid_json",
}
MIXED = {
    "openai": {
        **_BOTH,
        "FAKE_ERROR:content_filter": "content_filter",
        "FAKE_ERROR:error_body_200": "malformed_response",
        "FAKE_ERROR:empty_body_200": "malformed_response",
        "FAKE_ERROR:server_error": "server_error",
    },
    "anthropic": {**_BOTH, "FAKE_ERROR:server_error": "api_error"},
    # Gemini has no refusal: the fake blocks the answer (finishReason SAFETY)
    "gemini": {
        **_BOTH,
        "FAKE_ERROR:refusal": "content_filter",
        "FAKE_ERROR:content_filter": "content_filter",
        "FAKE_ERROR:server_error": "server_error",
    },
    # Mistral's chat completion has no refusal field (a refusal is an ordinary answer).
    "mistral": {
        **{k: v for k, v in _BOTH.items() if v != "refusal"},
        "FAKE_ERROR:error_body_200": "malformed_response",
        "FAKE_ERROR:empty_body_200": "malformed_response",
        "FAKE_ERROR:server_error": "server_error",
    },
}
RETRYABLE = {"malformed_response", "empty", "server_error", "api_error"}


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini", "mistral"])
def test_merge_of_every_outcome(tmp_path, capsys, provider_env, provider, monkeypatch):
    """One results file mixing every outcome: every row written, in order, with typed
    errors, tokens and the provider's text kept, correct totals, exit 1; the errors file
    (raw U+2028 inside) then drives resubmit."""
    from mmirage_beam.providers.gemini import adapter as gemini_adapter

    # a results file, not inline answers: the broken-line markers need a file to break
    monkeypatch.setattr(gemini_adapter, "INLINE_MAX_BYTES", 0)
    fake = provider_env
    expected = MIXED[provider]
    markers = {i + 1: m for i, m in enumerate(expected)}  # rows 0 and the last two are fine
    n = len(markers) + 3
    rows = _rows(n, markers)
    cfg = _setup(tmp_path, provider, fake, rows, json_output=True)
    fake.script(shuffle_results=True)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    capsys.readouterr()
    code, merged, errors = _merge(tmp_path, cfg)
    out = capsys.readouterr().out
    assert code == 1, out
    assert [m["source_index"] for m in merged] == list(range(n))
    by_index = {e["source_index"]: e for e in errors}
    assert sorted(by_index) == sorted(markers)
    assert [e["source_index"] for e in errors] == sorted(markers)  # ordered
    for i, m in enumerate(merged):
        assert m["question"] == rows[i]["question"]  # the output_schema shape, always
        if i not in markers:
            assert "mmirage_errors" not in m and isinstance(m["answer"], str)
            continue
        kind = expected[markers[i]]
        err = m["mmirage_errors"]["answer"]
        assert m["answer"] is None
        assert err["type"] == kind == by_index[i]["error_type"], (markers[i], err)
        assert err["retryable"] is (kind in RETRYABLE) is by_index[i]["retryable"]
        if kind in ("refusal", "truncated", "empty", "content_filter", "invalid_json"):
            assert m["input_tokens"] > 0  # usage of an unusable answer is still counted
        if kind == "malformed_response":
            assert "line " in err["message"] and "byte offset" in err["message"]
    refused = merged[next(i for i, mk in markers.items() if mk == "FAKE_ERROR:length")]
    if "FAKE_ERROR:refusal" in expected:
        refused = merged[next(i for i, mk in markers.items() if mk == "FAKE_ERROR:refusal")]
    if provider == "openai":
        assert "can't help" in refused["mmirage_errors"]["answer"]["raw_text"]
    cut = merged[next(i for i, mk in markers.items() if mk == "FAKE_ERROR:length")]
    assert cut["mmirage_errors"]["answer"]["raw_text"].startswith("{")
    u2028 = by_index[next(i for i, mk in markers.items() if mk == "FAKE_ERROR:u2028")]
    assert "\u2028" in u2028["message"]
    squeezed = " ".join(out.split())
    assert f"rows written: {n}" in squeezed
    assert "outputs succeeded: 3" in squeezed
    assert f"outputs failed: {len(markers)}" in squeezed
    for kind in set(expected.values()):
        count = sum(1 for k in expected.values() if k == kind)
        assert f"{kind}: {count}" in squeezed, kind
    assert "unknown custom_ids: 0" in squeezed and "unreadable lines: 0" in squeezed
    total_in = sum(m.get("input_tokens", 0) for m in merged)
    assert f"input tokens: {total_in:,}" in squeezed
    # The errors file, raw U+2028 and all, is read whole by resubmit.
    errors_file = str(tmp_path / "merged.errors.jsonl")
    assert resubmit_main(["--config", cfg, "--from", errors_file, "--new-run-id", "r2"]) == 0
    retryable = sum(1 for k in expected.values() if k in RETRYABLE)
    assert f"re-sending {retryable} failed request(s) (retryable)" in capsys.readouterr().err


def test_a_line_without_a_recoverable_custom_id_is_reported(tmp_path, capsys, provider_env):
    """A result line so damaged that its custom_id is lost: reported with its line
    number; its request has no result (missing_result); the rest merges."""
    fake = provider_env
    rows = _rows(4)
    cfg = _setup(tmp_path, "openai", fake, rows)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    assert check_main(["--config", cfg]) == 0  # the batch ends: its output file exists
    # Damage the stored output file as a storage fault could (the fake has no marker
    # for a line that loses its custom_id).
    (out_file,) = [f for f in fake._store.files.values() if f.purpose == "batch_output"]
    lines = out_file.content.split(b"\n")
    lines[1] = b"\x00\x01 garbage without any id"
    out_file.content = b"\n".join(lines)
    capsys.readouterr()
    code, merged, errors = _merge(tmp_path, cfg)
    out = " ".join(capsys.readouterr().out.split())
    assert code == 1 and [m["source_index"] for m in merged] == [0, 1, 2, 3]
    unreadable = [e for e in errors if e["source_index"] is None]
    assert len(unreadable) == 1 and unreadable[0]["error_type"] == "malformed_response"
    assert "line 2 (byte offset" in unreadable[0]["message"]
    assert [e["error_type"] for e in errors if e["source_index"] is not None] == ["missing_result"]
    assert "unreadable lines: 1" in out and "unknown custom_ids: 0" in out


def test_rows_added_after_submit_are_not_called_an_unfinished_run(tmp_path, capsys, provider_env):
    """Issue 38: rows added to the dataset after a finished submission made the merge
    print "UNFINISHED: ... stopped before all its chunks were submitted". The run did
    finish: the merge says the rows are new since it was submitted, and how to send
    them."""
    fake = provider_env
    rows = _rows(6)
    cfg = _setup(tmp_path, "openai", fake, rows[:4])
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    capsys.readouterr()
    code, merged, errors = _merge(tmp_path, cfg)
    out = capsys.readouterr().out
    assert code == 1, out
    assert "UNFINISHED" not in out and "stopped before" not in out, out
    assert "2 row(s) (2 request(s)) were not in the data when run r1 was submitted" in out
    assert f"mmirage run --config {cfg}" in out
    assert sum(1 for e in errors if e["error_type"] == "never_submitted") == 2
    # the advice holds: a new run sends only the 2 new rows (the 4 answers are reused)
    sent = len(fake.submitted_requests("openai"))
    assert submit_main(["--config", cfg]) == 0
    assert len(fake.submitted_requests("openai")) == sent + 2
