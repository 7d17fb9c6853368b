"""mmirage check explains batch-level failures in words a user can act on."""

from __future__ import annotations

import pytest

from pipelines.check import main as check_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config


def _submit(tmp_path, fake, provider, **script):
    data = tmp_path / "rows.jsonl"
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:8]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    cfg = base_config(tmp_path, provider, base_url=base_url)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    path = write_config(tmp_path, cfg)
    fake.script(**script)
    assert submit_main(["--config", path, "--run-id", "adv"]) == 0
    return path


@pytest.mark.parametrize(
    "provider, script, words",
    [
        ("openai", {"token_limit_exceeded": True}, "enqueued tokens"),
        ("openai", {"expire_after_requests": 3}, "24 h completion window"),
        ("openai", {"cancel_after_requests": 3}, "was cancelled"),
        ("anthropic", {"expire_after_requests": 3}, "24 h completion window"),
        ("anthropic", {"cancel_after_requests": 3}, "was cancelled"),
    ],
)
def test_failures_are_explained_with_the_fix(
    tmp_path, capsys, provider_env, provider, script, words
):
    path = _submit(tmp_path, provider_env, provider, **script)
    capsys.readouterr()
    code = check_main(["--config", path])
    out = capsys.readouterr().out
    assert "what this means:" in out and words in out
    assert f"mmirage resubmit --config {path} --run-id adv" in out
    if provider == "openai":
        assert code == 1


def test_nothing_to_explain_when_all_completed(tmp_path, capsys, provider_env):
    path = _submit(tmp_path, provider_env, "openai")
    capsys.readouterr()
    assert check_main(["--config", path]) == 0
    assert "what this means" not in capsys.readouterr().out


def test_advice_knows_a_run_was_already_resubmitted(tmp_path, capsys, provider_env):
    from pipelines.resubmit import main as resubmit_main

    fake = provider_env
    path = _submit(tmp_path, fake, "openai", expire_after_requests=3)
    fake.script(expire_after_requests=None)
    assert resubmit_main(["--config", path, "--run-id", "adv", "--new-run-id", "adv2"]) == 0
    capsys.readouterr()
    assert check_main(["--config", path]) == 1  # the original batch still expired
    out = capsys.readouterr().out
    assert "already resubmitted as run(s) adv2" in out
