"""Anthropic: a create whose answer was lost is found by creation time and request count
and adopted (live retry and resume), confirmed by custom_ids once results exist."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

from pipelines.submit import main as submit_main
from tests.conftest import REPO, base_config, write_config
from tests.runners import run_cli_in_process
from tests.slow_proxy import SlowProxy


def _sent(fake) -> collections.Counter:
    return collections.Counter(r["custom_id"] for r in fake.submitted_requests())


def _all_once(fake) -> bool:
    sent = _sent(fake)
    return sorted(sent) == sorted(f"answer-text-{i}" for i in range(1319)) and set(
        sent.values()
    ) == {1}


def test_a_create_stored_but_answered_500_is_adopted_not_duplicated(tmp_path, provider_env, caplog):
    fake = provider_env
    fake.script(fail_batch_creates={"nth": 2, "status": 500, "created": True})
    cfg = base_config(
        tmp_path, "anthropic", base_url=fake.anthropic_base_url, max_requests_per_chunk=300
    )
    assert submit_main(["--config", write_config(tmp_path, cfg)]) == 0
    assert len(fake.batches("anthropic")) == 5 and _all_once(fake)
    receipts = tmp_path / "meta" / "batch_metadata.text.jsonl"
    lines = [
        json.loads(x)
        for p in (tmp_path / "meta").glob("batch_metadata.text.*.jsonl")
        for x in p.read_text().splitlines()
    ]
    del receipts
    adopted = [r for r in lines if r.get("adoption")]
    assert len(adopted) == 1 and adopted[0]["adoption"]["method"] == "created_at+request_count"
    assert len({r["provider_batch_id"] for r in lines}) == 5
    assert "not creating a second batch" in caplog.text


def test_a_create_whose_answer_times_out_is_adopted(tmp_path, provider_env):
    fake = provider_env
    with SlowProxy(fake.base_url) as proxy:
        proxy.delay("POST", "/v1/messages/batches", 3.0, count=1)
        cfg = base_config(
            tmp_path,
            "anthropic",
            base_url=proxy.base_url,
            timeout_seconds=1,
            max_requests_per_chunk=500,
        )
        assert submit_main(["--config", write_config(tmp_path, cfg)]) == 0
    assert len(fake.batches("anthropic")) == 3 and _all_once(fake)


def _crash_then_resume(tmp_path, fake, step: str, chunk: int = 300):
    cfg = base_config(
        tmp_path, "anthropic", base_url=fake.anthropic_base_url, max_requests_per_chunk=chunk
    )
    path = write_config(tmp_path, cfg)
    cmd = [sys.executable, "-m", "pipelines.submit", "--config", path, "--run-id", "k"]
    env = dict(os.environ, PYTHONPATH=str(REPO), MMIRAGE_CRASH_AT=step)
    crashed = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, timeout=300)
    assert crashed.returncode == -9, crashed.stderr.decode()[-2000:]
    env.pop("MMIRAGE_CRASH_AT")
    # the resume in this process (only the killed run needs a process of its own)
    return run_cli_in_process(["run", *cmd[3:]], cwd=tmp_path, env=env)


def test_a_crash_after_acceptance_is_adopted_and_confirmed_on_resume(tmp_path, provider_env):
    fake = provider_env
    resumed = _crash_then_resume(tmp_path, fake, "batch_created:2")
    assert resumed.returncode == 0, resumed.stderr
    assert "adopted batch" in resumed.stderr
    assert len(fake.batches("anthropic")) == 5 and _all_once(fake)
    lines = [
        json.loads(x)
        for x in (tmp_path / "meta" / "batch_metadata.text.k.jsonl").read_text().splitlines()
    ]
    (adopted,) = [r for r in lines if r.get("adoption")]
    assert adopted["adoption"] == {"method": "created_at+request_count", "confirmed": True}


def test_an_ambiguous_match_is_sent_again_never_guessed(tmp_path, provider_env):
    """Another workload made a batch of the same size in the window: two candidates."""
    import anthropic

    fake = provider_env
    client = anthropic.Anthropic(api_key="sk-ant-test", base_url=fake.anthropic_base_url)
    cfg = base_config(
        tmp_path, "anthropic", base_url=fake.anthropic_base_url, max_requests_per_chunk=300
    )
    path = write_config(tmp_path, cfg)
    cmd = [sys.executable, "-m", "pipelines.submit", "--config", path, "--run-id", "k"]
    env = dict(os.environ, PYTHONPATH=str(REPO), MMIRAGE_CRASH_AT="batch_created:1")
    crashed = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, timeout=300)
    assert crashed.returncode == -9
    other = [
        {
            "custom_id": f"x{i}",
            "params": {
                "model": "claude-haiku-4-5",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "hi"}],
            },
        }
        for i in range(300)
    ]
    client.messages.batches.create(requests=other)
    env.pop("MMIRAGE_CRASH_AT")
    resumed = run_cli_in_process(["run", *cmd[3:]], cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "cannot tell which" in resumed.stderr
    sent = _sent(fake)
    ours = {k: v for k, v in sent.items() if k.startswith("answer-")}
    assert len(ours) == 1319 and sum(v - 1 for v in ours.values()) == 300  # one chunk twice
