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


def _cancel_plan_double(monkeypatch, statuses, refuse=()):
    """``run.cancel.plan_cancel`` answering ``statuses`` (batch id -> provider status)
    with a checker that refuses the ids in ``refuse``; returns the checker's calls."""
    from types import SimpleNamespace

    from mmirage_beam.run import cancel as run_cancel

    calls = {"cancelled": [], "closed": 0}

    class Checker:
        def cancel_one(self, receipt):
            calls["cancelled"].append(receipt.provider_batch_id)
            refused = receipt.provider_batch_id in refuse
            return SimpleNamespace(
                progress=None if refused else SimpleNamespace(provider_status="cancelling"),
                error="409 already completing" if refused else None,
            )

        def close(self):
            calls["closed"] += 1

    def status(batch, before):
        rec = SimpleNamespace(
            provider="openai", provider_batch_id=batch, run_id="r", request_count=5
        )
        return SimpleNamespace(
            receipt=rec, status=before, progress=SimpleNamespace(provider_status=before)
        )

    def plan_cancel(config, run_id, checker_factory=None):
        to_cancel = [status(b, s) for b, s in statuses.items()]
        return run_cancel.CancelPlan(["r"], to_cancel, [], 0), Checker()

    monkeypatch.setattr(run_cancel, "plan_cancel", plan_cancel)
    return calls


def test_cancel_command_plans_then_cancels_and_records(tmp_path, monkeypatch) -> None:
    from mmirage_beam.commands.cancel import CancelCommand
    from mmirage_beam.run.layout import receipts_base
    from mmirage_beam.run.store import RunStore
    from tests.conftest import base_config, write_config

    cfg = write_config(tmp_path, base_config(tmp_path))
    calls = _cancel_plan_double(monkeypatch, {"b1": "in_progress", "b2": "validating"}, {"b2"})
    command = CancelCommand(cfg, "r")
    planned = command.plan()
    assert not planned.nothing_to_cancel and planned.lines == []
    assert planned.what == "2 unfinished batch(es) (10 request(s)) of run r"
    assert calls["cancelled"] == []  # planning cancels nothing
    outcome = command.cancel(planned)
    assert calls == {"cancelled": ["b1", "b2"], "closed": 1}
    assert outcome.exit_code == 1  # the provider refused one
    assert [d.provider_batch_id for d in outcome.refused] == ["b2"]
    assert outcome.lines[0] == "  b1 (openai, run r, was in_progress): now cancelling"
    assert outcome.lines[1].endswith("refused: 409 already completing")
    assert "mmirage merge --config " + cfg in outcome.lines[-1]
    from mmirage_beam.config import load_config

    config = load_config(cfg)
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    record = RunStore(base, "r").read_cancel_record()
    assert [b.provider_batch_id for b in record.batches] == ["b1", "b2"]


def test_cancel_command_with_nothing_left_says_so_and_closes(tmp_path, monkeypatch) -> None:
    from mmirage_beam.commands.cancel import CancelCommand
    from tests.conftest import base_config, write_config

    cfg = write_config(tmp_path, base_config(tmp_path))
    calls = _cancel_plan_double(monkeypatch, {})
    command = CancelCommand(cfg)
    planned = command.plan()
    assert planned.nothing_to_cancel
    assert planned.lines == ["mmirage cancel: nothing to cancel: 0 batch(es) of run r have ended"]
    assert command.cancel(planned) == type(command.cancel(planned))(0)
    assert calls["cancelled"] == [] and calls["closed"] >= 1


def test_cancel_command_refuses_a_malformed_run_id(tmp_path) -> None:
    from mmirage_beam.commands.cancel import CancelCommand
    from mmirage_beam.errors import ConfigError

    with pytest.raises(ConfigError, match="--run-id"):
        CancelCommand(str(tmp_path / "c.yaml"), "../etc").plan()


def test_the_cycle_command_names_the_wait_flags_as_given() -> None:
    """``mmirage run``'s one command keeps the ``--wait`` flags given, in the words the
    commands it prints repeat (floats as typed: ``0.5``, not ``0.500000``)."""
    from mmirage_beam.commands.submit import SubmitCommand
    from mmirage_beam.cycle.loop import CycleCommand
    from mmirage_beam.run.submit_flags import SubmitFlags

    submit = SubmitCommand(SubmitFlags("c.yaml", export_prompts="p.jsonl"))
    command = CycleCommand(submit, wait=True, retries=2, poll_interval=0.5)
    assert command.given() == ("--retries", "2", "--poll-interval", "0.5")
    assert command.export_prompts == "p.jsonl"
    assert CycleCommand(submit).given() == ()


@pytest.mark.parametrize(
    ("field", "value"),
    [("run_id", "../etc"), ("interval_secs", 0.0), ("timeout_secs", -1.0)],
)
def test_check_command_refuses_bad_flags_before_reading(tmp_path, field, value) -> None:
    """A malformed ``--run-id``, ``--interval`` or ``--timeout`` is refused naming the
    flag, before any config or receipt is read (the config here does not exist)."""
    from mmirage_beam.commands.check import CheckCommand
    from mmirage_beam.errors import ConfigError

    command = CheckCommand(str(tmp_path / "missing.yaml"), **{field: value})
    flag = {"run_id": "--run-id", "interval_secs": "--interval", "timeout_secs": "--timeout"}
    with pytest.raises(ConfigError) as info:
        command.start()
    assert info.value.key == flag[field]
