"""mmirage demo: the whole lifecycle on the bundled sample, as the README's first command."""

from __future__ import annotations

import json

from mmirage_beam.config.loader import load_config
from mmirage_beam.run.listing import MERGED_WHOLE, list_runs
from mmirage_beam.testing import fake_answer_text
from pipelines.cli import main as cli_main
from tests.conftest import GSM8K_JSONL


def test_demo_runs_submit_check_merge(tmp_path, capsys, monkeypatch):
    code = cli_main(["demo", "--workdir", str(tmp_path), "--rows", "20", "--delay", "0.5"])
    out = capsys.readouterr().out
    assert code == 0, out
    for step in ("1/3  mmirage run", "2/3  mmirage check", "3/3  mmirage merge"):
        assert step in out
    merged_file = tmp_path / "openai" / "merged.jsonl"
    merged = [json.loads(x) for x in merged_file.read_text().splitlines()]
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:20]]
    assert [m["source_index"] for m in merged] == list(range(20))
    for m, row in zip(merged, rows):
        assert m["question"] == row["question"]
        prompt = (
            "Solve this grade-school maths problem step by step, then give the final number.\n"
            + row["question"]
        )
        assert m["solution"] == fake_answer_text(prompt)
        assert 1 <= m["difficulty"] <= 5
    assert "rows written:        20" in out
    # the fake's usage (words) cannot match the estimate (tokens): labelled, not hidden
    assert "the fake provider's token usage is synthetic" in out

    # The demo's fake has stopped: a run merged whole is listed from its records, its
    # batches not looked up again (each lookup of a gone provider retried for minutes).
    monkeypatch.setenv("OPENAI_API_KEY", "sk-demo")
    config = load_config(str(tmp_path / "openai" / "demo_openai.yaml"))
    (row,) = list_runs(config, lookup=True)
    assert row.state == "merged"
    assert row.by_status == {MERGED_WHOLE: row.batches}
