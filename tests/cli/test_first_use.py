"""What a new user meets first (issue 17's list): summaries that read the same way,
hints that fit the command, and the provider's error details kept."""

from __future__ import annotations

import json
from pathlib import Path

from mmirage_beam.providers.openai.adapter import normalise_result_line
from pipelines.resubmit import main as resubmit_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config


def test_summary_numbers_estimate_level_and_resubmit_hint(tmp_path, capsys, provider_env):
    fake = provider_env
    rows = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:20]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path, "--run-id", "first"]) == 0
    captured = capsys.readouterr()
    # one number format: thousands separated like the cost lines (8,226 not 8226)
    line = next(x for x in captured.out.splitlines() if x.startswith("request bytes:"))
    count = line.split()[2]
    assert "," in count and int(count.replace(",", "")) > 999, line
    # the estimate before submitting is information, not a warning
    assert "WARNING mmirage_beam.transforms.submit: before submitting" not in captured.err
    assert "WARNING mmirage_beam.progress: before submitting" not in captured.err
    # told once, by the launcher
    assert captured.err.count("INFO mmirage_beam.progress: before submitting") == 1

    assert submit_main(["--config", path, "--run-id", "second"]) == 0
    capsys.readouterr()
    assert resubmit_main(["--config", path]) == 0  # the newest run: second
    err = capsys.readouterr().err
    # resubmit names the other run, without merge's "repeat it to merge several runs"
    assert "found run(s) first: pass --run-id to choose another" in err
    assert "merge several runs" not in err


def test_an_openai_error_keeps_its_code_and_param():
    """A failed request's error keeps OpenAI's code and param beside the message (the
    errors file and mmirage_errors carry them); a code that is already the type is not
    repeated."""
    line = {
        "custom_id": "answer-text-3",
        "response": {
            "status_code": 400,
            "body": {
                "error": {
                    "message": "Invalid 'temperature': must be a number between 0 and 2.",
                    "type": "invalid_request_error",
                    "param": "temperature",
                    "code": "invalid_value",
                }
            },
        },
        "error": None,
    }
    err = normalise_result_line(json.loads(json.dumps(line))).to_json()["error"]
    assert err["type"] == "invalid_request_error" and err["status_code"] == 400
    assert err["code"] == "invalid_value" and err["param"] == "temperature"
    limited = json.loads(json.dumps(line))
    limited["response"]["body"]["error"] = {
        "message": "Rate limit reached.",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    err = normalise_result_line(limited).to_json()["error"]
    assert err["type"] == "rate_limit_exceeded" and "code" not in err and "param" not in err


def test_check_and_merge_say_which_failures_are_which(tmp_path, capsys, provider_env):
    """check counts what the provider failed (a refusal is 'done' for it); merge also
    counts unusable answers: both say so, so 2 in check and 4 in merge agree."""
    from pipelines.check import main as check_main
    from pipelines.merge import main as merge_main

    fake = provider_env
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:20]]
    for i, marker in ((2, "invalid_request"), (5, "invalid_request"), (7, "refusal")):
        rows[i]["question"] += f" FAKE_ERROR:{marker}"
    rows[9]["question"] += " FAKE_ERROR:refusal"
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path, "--run-id", "kinds"]) == 0
    capsys.readouterr()
    # Issue 38: it said "result: ok" and exited 0; ok only when every request succeeded.
    assert check_main(["--config", path]) == 1
    out = capsys.readouterr().out
    assert "result: completed with failures (every batch ended; 2 request(s) failed" in out
    assert "result: ok" not in out
    assert "refusals, truncations, invalid JSON" in out
    assert merge_main(["--config", path, "--output-path", str(tmp_path / "m.jsonl")]) == 1
    out = capsys.readouterr().out
    assert "outputs failed:      4" in out
    assert "of these, 2 unusable answer(s)" in out and "the other 2 failed at the provider" in out


def test_check_of_a_run_that_stopped_midway_is_unfinished(tmp_path, capsys, provider_env):
    """A create refused for good stops the run part-way: check says UNFINISHED with the
    resume command and exits 1 (it said 'result: ok' and 0), as merge does. The resume's
    summary and estimate split what it sends now from what was already sent."""
    from pipelines.check import main as check_main

    fake = provider_env
    rows = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:6]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url, max_requests_per_chunk=2)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    path = write_config(tmp_path, cfg)
    fake.script(fail_batch_creates={"nth": 2, "permanent": True, "status": 400})
    assert submit_main(["--config", path, "--run-id", "half"]) != 0
    capsys.readouterr()
    assert check_main(["--config", path]) == 1
    out = capsys.readouterr().out
    assert "UNFINISHED: run half stopped before all its chunks were submitted" in out
    # one verdict, agreeing with the exit status (issue 38: "result: ok" came first)
    assert "result: UNFINISHED (run half stopped" in out and "result: ok" not in out
    assert f"mmirage run --config {path} --run-id half" in out
    sent = len(fake.submitted_requests("openai"))
    fake.script(fail_batch_creates=None)
    assert submit_main(["--config", path, "--run-id", "half"]) == 0  # the resume
    out = capsys.readouterr().out
    # its summary and estimate cover what it sends, apart from what was already sent
    assert f"sent now:            {6 - sent} request(s); already sent: {sent}" in out
    assert f"answer: {6 - sent} request(s), input tokens" in out
    assert check_main(["--config", path]) == 0
    assert "UNFINISHED" not in capsys.readouterr().out
    assert submit_main(["--config", path, "--run-id", "half"]) == 0  # nothing left
    out = capsys.readouterr().out
    assert "sent now:            0 request(s); already sent: 6" in out
    assert "tokens and estimated cost: nothing sent now ($0)" in out


def test_a_run_that_skipped_every_row_still_merges(tmp_path, capsys, provider_env):
    """--skip-invalid-rows with every row invalid sends nothing and leaves no receipt;
    merge still writes every row, each marked mmirage_skipped (it said 'no receipt')."""
    from pipelines.merge import main as merge_main

    fake = provider_env
    rows = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:20]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    cfg["processing_params"]["inputs"][0]["key"] = "no_such_column"
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path, "--run-id", "none", "--skip-invalid-rows"]) == 0
    assert fake.batches() == []
    capsys.readouterr()
    out_path = tmp_path / "m.jsonl"
    assert merge_main(["--config", path, "--output-path", str(out_path)]) == 0
    captured = capsys.readouterr()
    assert "run none sent nothing" in captured.err
    assert "skipped at submit:   20 (invalid rows)" in captured.out
    merged = [json.loads(x) for x in out_path.read_text(encoding="utf-8").splitlines()]
    assert [m["source_index"] for m in merged] == list(range(20))
    assert all("no_such_column" in m["mmirage_skipped"] for m in merged)


def test_anthropic_cache_tokens_are_kept_in_rows_and_priced():
    """Anthropic's cache_read_input_tokens / cache_creation_input_tokens (prompt
    caching; not part of input_tokens) reach the merged row and the cost: reads at 0.1x
    and writes at 1.25x the input price."""
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from mmirage_beam.config import config_from_dict
    from mmirage_beam.costs.prices import batch_price
    from mmirage_beam.costs.report import usage_lines
    from mmirage_beam.providers.anthropic.adapter import normalise_result
    from mmirage_beam.transforms.build import ExtractedRow
    from mmirage_beam.transforms.merge import OutputResult, _AssembleFn

    usage = {
        "input_tokens": 12,
        "output_tokens": 5,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 40,
    }
    line = {
        "custom_id": "answer-text-0",
        "result": {
            "type": "succeeded",
            "message": {
                "content": [{"type": "text", "text": "4"}],
                "stop_reason": "end_turn",
                "usage": usage,
            },
        },
    }
    r = normalise_result(line)
    assert r.cache_read_input_tokens == 900 and r.cache_creation_input_tokens == 40

    config = config_from_dict(base_config(Path("/tmp"), "anthropic"))
    cache = {"cache_read_input_tokens": 900, "cache_creation_input_tokens": 40}
    result = OutputResult(0, "answer", "answer-text-0", "4", None, 12, 5, "r1", 0, cache)
    row = ExtractedRow(0, 0, {"question": "2+2?"}, {"question": "2+2?"}, ())
    grouped = {"results": [result], "rows": [row], "changed": [], "skipped": []}
    with TestPipeline() as p:
        lines = (
            p
            | beam.Create([(0, grouped)])
            | beam.ParDo(
                _AssembleFn(config.outputs, config.output_schema, config.remove_columns)
            ).with_outputs("errors", main="rows")
        ).rows | beam.Map(lambda m: json.loads(m.line))
        expected = {"question": "2+2?", "answer": "4", "source_index": 0}
        expected |= {"input_tokens": 12, "output_tokens": 5, **cache}
        assert_that(lines, equal_to([expected]))

    stats = {f"used_{k}:answer": v for k, v in usage.items()}
    price = batch_price("anthropic", config.processor.model, config.processor)
    cost = price.cost_usd(12, 5) + price.cost_usd(900 * 0.1 + 40 * 1.25)
    line = usage_lines(stats, config.processor)[-1]
    assert "cache read 900, cache write 40" in line
    assert f"cost ${cost:,.4f}" in line, line
