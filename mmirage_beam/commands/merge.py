"""``MergeCommand``: fetch a run's results and join them onto the source rows (what
``mmirage merge`` runs once its flags are parsed; ``mmirage run --wait`` runs it too)."""

from __future__ import annotations

import dataclasses
import sys
from typing import Optional, Sequence

from mmirage_beam.commands import say, show
from mmirage_beam.launch.flags import beam_options
from mmirage_beam.launch.jobs import metric_counters, run_pipeline
from mmirage_beam.run.records import MergeRecord

__all__ = ["MergeCommand", "MergeOutcome"]


@dataclasses.dataclass(frozen=True)
class MergeOutcome:
    """What a merge did.

    Attributes:
        exit_code: 0 merged and every request succeeded; 1 merged with failed requests,
            refused (batches still running, the source changed) or the job failed.
        record: the merge record as written beside the receipts
            (:class:`~mmirage_beam.run.records.MergeRecord`); None when nothing was
            merged or it could not be written.
    """

    exit_code: int
    record: Optional[MergeRecord] = None


@dataclasses.dataclass(frozen=True)
class MergeCommand:
    """``mmirage merge``'s inputs (its flags, relative paths already made absolute).

    Attributes:
        config_path: the config the run was submitted with.
        output_path: the merged file to write.
        output_format: ``jsonl``, ``parquet`` or ``hf``.
        metadata_paths: receipt files; empty: found from ``metadata_output_path``.
        run_ids: the runs to merge; empty: the newest.
        allow_partial: merge while batches are still running.
        verify_source: rebuild the requests to check that the source did not change.
        partitions: range partitions of the ordered write; None: one per 25,000 rows.
    """

    config_path: str
    output_path: str
    output_format: str = "jsonl"
    metadata_paths: tuple[str, ...] = ()
    run_ids: tuple[str, ...] = ()
    allow_partial: bool = False
    verify_source: bool = True
    partitions: Optional[int] = None

    def command_line(self, verbose: bool = False) -> list[str]:
        """The ``mmirage merge`` arguments that run this command again (for messages)."""
        words = ["--config", self.config_path, *(["-v"] if verbose else [])]
        words += ["--output-path", self.output_path]
        if self.output_format != "jsonl":
            words += ["--output-format", self.output_format]
        for path in self.metadata_paths:
            words += ["--metadata-path", path]
        for run_id in self.run_ids:
            words += ["--run-id", run_id]
        words += ["--allow-partial"] if self.allow_partial else []
        words += [] if self.verify_source else ["--no-verify-source"]
        if self.partitions is not None:
            words += ["--partitions", str(self.partitions)]
        return words

    def run(self, beam_args: Sequence[str], verbose: bool, again: Sequence[str]) -> MergeOutcome:
        """Find the run, build and run the merge job on the runner of ``beam_args``,
        convert the output, write the merge record; print what ``mmirage merge`` prints.

        Args:
            beam_args: Beam pipeline options (the runner and its flags).
            verbose: ``-v``: the workers' own logging is not lowered.
            again: the ``mmirage merge`` arguments a failed job's message repeats.

        Raises:
            ConfigError: a bad ``partitions``, config or output location (exit 2).
            mmirage_beam.errors.MmirageError: no receipts, a missing key...
        """
        # Beam and the modules that build the job load only now: --help and a bad flag
        # answer without the seconds Beam's import takes.
        import apache_beam as beam

        from mmirage_beam.config import load_config
        from mmirage_beam.costs.prices import processor_price
        from mmirage_beam.errors import ConfigError
        from mmirage_beam.progress import counters
        from mmirage_beam.run import merge_plans
        from mmirage_beam.run.storage import (
            check_job_endpoint,
            check_locations,
            config_locations,
        )
        from mmirage_beam.transforms.merge_rows import build_merge_pipeline

        if self.partitions is not None and self.partitions < 1:
            raise ConfigError("--partitions", "must be >= 1")
        # Beam's FileSystems get the options (--s3_endpoint_url...) before anything is read.
        options = beam_options(beam_args, verbose)
        start = merge_plans.start_merge(
            load_config(self.config_path),
            self.config_path,
            metadata_paths=self.metadata_paths,
            run_ids=self.run_ids,
            allow_partial=self.allow_partial,
            verify_source=self.verify_source,
        )
        say(start.messages)
        if start.blocked:
            return MergeOutcome(1)
        show(start.lines)  # a --limit run: which rows are merged
        config, sel = start.config, start.selection
        outputs = merge_plans.merge_outputs(self.output_path, self.output_format, config)
        check_locations(config_locations(config, output_path=outputs.out), options)
        check_job_endpoint(options)
        pipeline = beam.Pipeline(options=options)
        settings = merge_plans.merge_settings(start, outputs, self.partitions)
        receipts = list(start.plan.receipts)  # ReceiptEntry: workers read the maps
        plan = build_merge_pipeline(
            pipeline, config, sel.batches, receipts, sel.providers, settings
        )
        counters.expect(
            totals={"results fetched": start.results_expected or None},
            price=processor_price(config.processor),
        )
        ran = _run_job(pipeline, plan, options, outputs, config, again)
        if isinstance(ran, int):  # the job failed (1) or the runner only translated it (0)
            return MergeOutcome(ran)
        report = merge_plans.finish_merge(start, plan, outputs, *ran)
        say(report.messages)
        show(report.lines)
        return MergeOutcome(report.exit_code, report.record)


def _run_job(pipeline, plan, options, outputs, config, again):  # noqa: ANN001, ANN202
    """Run the merge job: ``(counters, the merged file as shown)``, or the exit status
    when the runner only translated it (0) or the job failed (1; what to run again is
    printed). Temporary files are removed either way."""
    from mmirage_beam.run import merge_plans, reports
    from mmirage_beam.run.storage import translation_only

    try:
        result = run_pipeline(pipeline)
        if translation_only(options):
            print(reports.MERGE_TRANSLATED)
            return 0
        stats = metric_counters(result)
        shown, lines = merge_plans.convert_output(outputs, config, stats)
        show(lines)
        return stats, shown
    except Exception as exc:  # the runner's job failed (a worker died, storage failed...)
        print(reports.merge_failure_message(exc, list(again)), file=sys.stderr)
        return 1
    finally:  # the job removes its temporary files once written; after a failure, here
        say(merge_plans.remove_temp_dir(plan.temp_dir))
        outputs.discard()
