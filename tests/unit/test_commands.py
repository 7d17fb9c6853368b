"""The command objects the drivers and ``mmirage run --wait`` share
(``mmirage_beam/commands/``)."""

from __future__ import annotations

import dataclasses

import pytest

from mmirage_beam.commands.merge import MergeCommand
from pipelines import merge as merge_driver


@pytest.mark.parametrize(
    "command",
    [
        MergeCommand("c.yaml", "/o/merged.jsonl"),
        MergeCommand(
            "c.yaml",
            "/o/merged.parquet",
            output_format="parquet",
            metadata_paths=("/r/a.jsonl", "/r/b.jsonl"),
            run_ids=("r1", "r2"),
            allow_partial=True,
            verify_source=False,
            partitions=3,
        ),
    ],
)
@pytest.mark.parametrize("verbose", [False, True])
def test_a_merge_commands_line_parses_back_to_the_same_command(
    command: MergeCommand, verbose: bool
) -> None:
    """What a failed merge job prints to run again is the command that ran."""
    args, beam_args = merge_driver.parse_args(command.command_line(verbose))
    assert beam_args == []
    assert args.verbose == verbose
    again = merge_driver.command_of(args)
    assert again == command


def test_commands_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        MergeCommand("c.yaml", "/o/m.jsonl").run_ids = ("x",)  # type: ignore[misc]


def test_the_drivers_import_no_beam_before_their_flags_are_parsed() -> None:
    import subprocess
    import sys

    code = "import sys, pipelines.merge, pipelines.resubmit; print('apache_beam' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
