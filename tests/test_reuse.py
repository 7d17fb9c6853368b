"""Answers already paid for are reused, not bought again (mmirage_beam.reuse): a re-run
under the same metadata base sends only the requests no earlier run answered."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipelines.merge import main as merge_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, REPO, base_config, write_config
from tests.runners import run_cli

ROWS = 6


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x]


def _config(tmp_path, fake, provider="openai"):
    data = tmp_path / "gsm8k.jsonl"
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:ROWS]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = base_config(tmp_path, provider, base_url=fake.base_url_for(provider))
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    cfg["processing_params"]["output_schema"] = None
    return cfg


def _second_output(cfg):
    cfg["processing_params"]["outputs"].append(
        {
            "name": "hint",
            "type": "batch_api",
            "output_type": "plain",
            "prompt": "Give one hint:\n{{ question }}",
        }
    )
    return cfg


def _sent(fake, provider="openai"):
    return [e["custom_id"] for e in fake.submitted_requests(provider)]


def _merge(tmp_path, cfg_path, name="merged.jsonl"):
    out = tmp_path / name
    code = merge_main(["--config", cfg_path, "--output-path", str(out)])
    return code, _read_jsonl(out)


def _env(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def test_added_output_sends_only_its_requests_openai_cli(tmp_path, provider_env):
    """The whole story through the ``mmirage`` command (subprocesses, real SDK, fake)."""
    fake = provider_env
    cfg = _config(tmp_path, fake)
    cfg_path = write_config(tmp_path, cfg)
    env = _env(tmp_path)
    first = run_cli(["run", "--config", cfg_path], cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    merged = tmp_path / "first.jsonl"
    m1 = run_cli(
        ["merge", "--config", cfg_path, "--output-path", str(merged)], cwd=tmp_path, env=env
    )
    assert m1.returncode == 0, m1.stderr
    assert len(_sent(fake)) == ROWS

    write_config(tmp_path, _second_output(cfg))
    second = run_cli(["run", "--config", cfg_path], cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stderr
    sent = _sent(fake)[ROWS:]
    assert sorted(sent) == sorted(f"hint-text-{i}" for i in range(ROWS))  # only the new output
    assert f"reuse:               {ROWS} request(s) answered by earlier runs" in second.stdout
    assert "saves up to $" in second.stdout

    out = tmp_path / "second.jsonl"
    m2 = run_cli(["merge", "--config", cfg_path, "--output-path", str(out)], cwd=tmp_path, env=env)
    assert m2.returncode == 0, m2.stderr
    rows = _read_jsonl(out)
    first_rows = _read_jsonl(merged)
    run1 = _run_of(first)
    assert len(rows) == ROWS
    for row, before in zip(rows, first_rows):
        assert row["answer"] == before["answer"]  # copied, not asked again
        assert row["hint"]
        assert row["mmirage_reused_from"] == {"answer": run1}
    print(first.stdout, first.stderr, m1.stdout, second.stdout, second.stderr, m2.stdout)


def _run_of(proc):
    for line in proc.stdout.splitlines():
        if line.startswith("run id:"):
            return line.split()[-1]
    raise AssertionError(proc.stdout)


@pytest.mark.parametrize("provider", ["anthropic"])
def test_added_output_reused_anthropic(tmp_path, provider_env, provider, capsys):
    fake = provider_env
    cfg = _config(tmp_path, fake, provider)
    cfg_path = write_config(tmp_path, cfg)
    assert submit_main(["--config", cfg_path]) == 0
    assert _merge(tmp_path, cfg_path, "first.jsonl")[0] == 0
    write_config(tmp_path, _second_output(cfg))
    assert submit_main(["--config", cfg_path]) == 0
    assert sorted(_sent(fake, provider)[ROWS:]) == sorted(f"hint-text-{i}" for i in range(ROWS))
    code, rows = _merge(tmp_path, cfg_path)
    assert code == 0
    assert all(r["answer"] and r["hint"] and r["mmirage_reused_from"]["answer"] for r in rows)
