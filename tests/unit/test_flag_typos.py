"""A misspelt flag of the tool's own gets a "did you mean", even when the flag it
stands for is required (issue 38: ``merge --output-pat`` got argparse's "the following
arguments are required: --output-path" and no hint, where every other typo got one)."""

from __future__ import annotations

import pytest

from mmirage_beam.errors import ConfigError
from mmirage_beam.launch.flags import check_own_flag_typos
from pipelines import check, merge, resubmit, runs, submit


@pytest.mark.parametrize(
    ("main", "argv", "meant"),
    [
        (merge.main, ["--config", "c.yaml", "--output-pat", "o.jsonl"], "--output-path"),
        (merge.main, ["--config", "c.yaml", "--output-path=o.jsonl", "--run-idd", "r"], "--run-id"),
        (submit.main, ["--config", "c.yaml", "--export-promts", "p.jsonl"], "--export-prompts"),
        (resubmit.main, ["--confg", "c.yaml"], "--config"),
        (check.main, ["--config", "c.yaml", "--wach"], "--watch"),
        (check.main, ["--confi", "c.yaml"], "--config"),
        (runs.main, ["--config", "c.yaml", "--no-lookp"], "--no-lookup"),
    ],
)
def test_a_typo_of_the_tools_flag_is_named_with_the_flag_meant(
    main, argv: list[str], meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"did you mean {meant}?" in err, err
    assert "the following arguments are required" not in err


def test_beam_options_and_the_tools_own_flags_pass() -> None:
    own = ["--config", "--output-path", "--run-id", "-v", "--verbose"]
    check_own_flag_typos(
        ["--config", "c.yaml", "--output-path=o", "--runner", "DirectRunner", "--num_workers=2"],
        own,
    )


def test_a_flag_close_to_nothing_is_left_to_beams_check() -> None:
    check_own_flag_typos(["--zzz_unrelated"], ["--config", "--output-path"])


def test_the_refusal_names_the_flag_as_its_yaml_key_would() -> None:
    with pytest.raises(ConfigError) as info:
        check_own_flag_typos(["--output-pat", "x"], ["--output-path"])
    assert str(info.value).startswith("--output-pat: unknown flag; did you mean --output-path?")
