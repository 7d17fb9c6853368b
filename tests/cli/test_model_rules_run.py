"""``mmirage run`` catches the mistakes the services refuse before it spends: a model
the SDK does not list is warned about at config load (before any upload: the fake's
request log is empty when the warning is emitted), a setting the model family refuses
stops the run with exit 2 naming the YAML key (nothing sent), and the dry run
(``--export-prompts``) applies the same rules."""

from __future__ import annotations

import logging

from pipelines.submit import main as run_main
from tests.conftest import base_config, write_config


class _Snapshot(logging.Handler):
    """Records each warning with the fake's call counts at the moment it is emitted."""

    def __init__(self, fake) -> None:
        super().__init__(logging.WARNING)
        self.fake = fake
        self.seen: list[tuple[str, dict[str, int]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.getMessage(), self.fake.call_counts()))


def _watch(fake):
    handler = _Snapshot(fake)
    logger = logging.getLogger("mmirage_beam.config.validation")
    logger.addHandler(handler)
    return handler, logger


def test_a_typod_model_is_warned_before_any_upload(tmp_path, capsys, provider_env):
    fake = provider_env
    cfg = base_config(tmp_path, model="gpt-4o-mini-TYPO", base_url=fake.openai_base_url)
    handler, logger = _watch(fake)
    try:
        code = run_main(["--config", write_config(tmp_path, cfg), "--run-id", "typo"])
    finally:
        logger.removeHandler(handler)
    out = capsys.readouterr().out
    assert code == 0, out
    # repeated at the end of the summary, where it is read (it was one log line at the top)
    assert out.rstrip().splitlines()[-1].startswith("warning: processors[0].model")
    warnings = [(m, counts) for m, counts in handler.seen if "is not a model" in m]
    assert warnings, handler.seen
    message, counts_then = warnings[0]
    assert "processors[0].model" in message and "did you mean 'gpt-4o-mini'?" in message
    assert counts_then == {}  # nothing had been uploaded or created when it was warned
    # ... and the run then went on: the fake refuses every line as OpenAI does.
    assert fake.call_counts().get("files_create", 0) >= 1
    (batch,) = fake.batches("openai")
    assert batch["request_counts"]["failed"] == batch["request_counts"]["total"] > 0


def test_a_refused_setting_stops_the_run_naming_the_key_and_sends_nothing(
    tmp_path, capsys, provider_env
):
    fake = provider_env
    cfg = base_config(tmp_path, model="o3", temperature=0.2, base_url=fake.openai_base_url)
    code = run_main(["--config", write_config(tmp_path, cfg), "--run-id", "refused"])
    captured = capsys.readouterr()
    assert code == 2
    assert "processors[0].temperature" in captured.err + captured.out
    assert "Only the default (1) value is supported" in captured.err + captured.out
    assert fake.call_counts() == {} and fake.submitted_requests() == []


def test_the_dry_run_applies_the_same_rules(tmp_path, capsys, caplog):
    export = str(tmp_path / "export.jsonl")
    typo = base_config(tmp_path, "anthropic", model="claude-haiku-4-5-TYPO")
    with caplog.at_level(logging.WARNING):
        code = run_main(
            ["--config", write_config(tmp_path, typo), "--run-id", "d1", "--export-prompts", export]
        )
    assert code == 0
    assert "'claude-haiku-4-5-TYPO' is not a model the anthropic SDK lists" in caplog.text
    assert "did you mean 'claude-haiku-4-5'?" in caplog.text
    refused = base_config(tmp_path, model="gpt-5-mini", top_p=0.5)
    code = run_main(
        [
            "--config",
            write_config(tmp_path, refused, "r.yaml"),
            "--run-id",
            "d2",
            "--export-prompts",
            export,
        ]
    )
    captured = capsys.readouterr()
    assert code == 2 and "processors[0].top_p" in captured.err + captured.out
