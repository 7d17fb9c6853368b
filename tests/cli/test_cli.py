"""The command line: unknown flags are refused before anything runs."""

from __future__ import annotations

import pytest

from pipelines.cli import main as cli_main
from tests.conftest import base_config, write_config


@pytest.mark.parametrize("command", ["run", "merge", "resubmit"])
def test_mistyped_flag_is_refused_not_passed_to_beam(tmp_path, capsys, provider_env, command):
    fake = provider_env
    cfg = write_config(tmp_path, base_config(tmp_path, base_url=fake.openai_base_url))
    extra = ["--output-path", str(tmp_path / "o.jsonl")] if command == "merge" else []
    # A dry run with a typo must not become a real (paid) submission.
    code = cli_main([command, "--config", cfg, *extra, "--export-promts", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert code == 2
    assert "--export-promts" in err and "unknown flag" in err
    assert fake.submitted_requests() == [] and fake.batches() == []


@pytest.mark.parametrize("command", ["run", "merge"])
def test_misspelt_runner_is_named_with_the_closest_runner(tmp_path, capsys, provider_env, command):
    fake = provider_env
    cfg = write_config(tmp_path, base_config(tmp_path, base_url=fake.openai_base_url))
    extra = ["--output-path", str(tmp_path / "o.jsonl")] if command == "merge" else []
    code = cli_main([command, "--config", cfg, *extra, "--runner", "DirectRunnr"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "unknown runner 'DirectRunnr'; did you mean DirectRunner?" in err
    assert "local path" not in err
    assert fake.submitted_requests() == [] and fake.batches() == []


def test_misspelt_provider_field_says_did_you_mean(tmp_path, capsys):
    cfg = write_config(tmp_path, base_config(tmp_path, temprature=0.5))
    code = cli_main(["run", "--config", cfg, "--export-prompts", str(tmp_path / "p.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert "processors[0].temprature: unknown field" in err
    assert "did you mean 'temperature'?" in err


def test_beam_options_are_accepted(tmp_path, capsys):
    cfg = write_config(tmp_path, base_config(tmp_path))
    code = cli_main(
        [
            "run",
            "--config",
            cfg,
            "--export-prompts",
            str(tmp_path / "p.jsonl"),
            "--runner",
            "DirectRunner",
            "--direct_num_workers=1",
        ]
    )
    assert code == 0, capsys.readouterr()


def test_usage(capsys):
    assert cli_main([]) == 2
    assert cli_main(["--help"]) == 0
    assert "resubmit" in capsys.readouterr().out
    assert cli_main(["nonsense"]) == 2
    capsys.readouterr()
    assert cli_main(["rn"]) == 2  # a typo of a command gets its did-you-mean
    assert "unknown command 'rn'; did you mean 'run'?" in capsys.readouterr().err


def test_usage_lists_every_command():
    from pipelines.cli import COMMANDS, USAGE

    listed = [line.split()[0] for line in USAGE.split("commands:")[1].splitlines() if line.strip()]
    assert tuple(listed[: len(COMMANDS)]) == COMMANDS


def test_fake_provider_help_names_every_api_it_serves(capsys):
    """Issue 38: the first line of ``mmirage fake-provider --help`` named OpenAI and
    Anthropic only; it serves the batch APIs of all seven providers."""
    with pytest.raises(SystemExit) as done:
        cli_main(["fake-provider", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    first = text.split("\n\n")[1].splitlines()[0]  # the description's first line
    for name in ("OpenAI", "Anthropic", "Gemini", "Mistral", "Azure OpenAI", "Groq", "Together"):
        assert name in first, first
