"""``ResubmitCommand``: re-send the failed requests of a run as a new, linked run (what
``mmirage resubmit`` runs once its flags are parsed; ``mmirage run --wait`` runs it for
its retries)."""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from mmirage_beam.launch.flags import beam_options
from mmirage_beam.launch.jobs import RunOutcome, metric_counters, run_pipeline

if TYPE_CHECKING:  # Beam loads with the config: only once the flags are parsed
    from mmirage_beam.config.loader import PipelineConfig

__all__ = ["ResubmitCommand", "ResubmitOutcome"]


@dataclasses.dataclass(frozen=True)
class ResubmitOutcome:
    """What a resubmission did.

    Attributes:
        exit_code: 0 resubmitted (or nothing to resubmit); 1 a submission failed or
            batches cannot be looked up; 130 stopped by Ctrl-C.
        new_run_id: the run the requests were sent as (None: it was not chosen).
        receipts: receipt file -> receipts written, for the files that hold any.
    """

    exit_code: int
    new_run_id: Optional[str] = None
    receipts: Mapping[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ResubmitCommand:
    """``mmirage resubmit``'s inputs.

    Attributes:
        config_path: the config the run was submitted with.
        errors_file: a merge's errors file to take the failed requests from; None: the
            run's results are fetched from the provider.
        run_id: the run whose failures are re-sent; None: the newest.
        only: ``retryable`` or ``all``.
        new_run_id: the resubmission's run id; None: a fresh one.
    """

    config_path: str
    errors_file: Optional[str] = None
    run_id: Optional[str] = None
    only: str = "retryable"
    new_run_id: Optional[str] = None

    def run(self, beam_args: Sequence[str], verbose: bool) -> ResubmitOutcome:
        """Choose the failed requests, rebuild them from the source rows exactly as at
        submission and submit them as a new run whose receipts carry ``parent_run_id``;
        print what ``mmirage resubmit`` prints.

        Raises:
            mmirage_beam.errors.MmirageError: bad config, no receipts, a missing key.
        """
        import apache_beam as beam

        from mmirage_beam.config import load_config
        from mmirage_beam.errors import ConfigError
        from mmirage_beam.providers.base import BatchAdapterRegistry, resolve_credentials
        from mmirage_beam.run import plans
        from mmirage_beam.run.layout import RunLayout, receipts_base
        from mmirage_beam.run.storage import (
            check_job_endpoint,
            check_locations,
            config_locations,
            probe_location,
        )
        from mmirage_beam.run.store import RunStore
        from mmirage_beam.transforms.merge_rows import build_failures_pipeline

        # Beam's FileSystems get the options (--s3_endpoint_url...) before anything is read.
        options = beam_options(beam_args, verbose)
        config = load_config(self.config_path)
        provider = config.processor.provider
        resolve_credentials(BatchAdapterRegistry.get(provider), provider)
        new_run = plans.choose_run_id(self.new_run_id or None, None, "--new-run-id")
        base = receipts_base(config.processor.metadata_output_path, config.state_dir)
        check_locations(config_locations(config), options)
        check_job_endpoint(options)
        probe_location(base, new_run, "processors[0].metadata_output_path")
        if self.new_run_id and RunStore(base, new_run).has_started():
            raise ConfigError(
                "--new-run-id",
                f"run {new_run} already exists (it has receipts or chunks being "
                "submitted); its paid batches would no longer be in a receipt. Name a new "
                "run, or leave --new-run-id out for a fresh one (nothing was sent)",
            )
        plan = plans.prepare_resubmit(
            config, errors_file=self.errors_file, run_id=self.run_id, only=self.only
        )
        if plan.parent == new_run:  # a run cannot be its own resubmission
            raise ConfigError("--new-run-id", f"names the run resubmitted ({new_run})")
        if plan.blocked == "lookup_failed":
            print("mmirage: error: some batches cannot be looked up.", file=sys.stderr)
            return ResubmitOutcome(1)
        for message in plan.messages:
            print(message.text, file=sys.stderr)
        ids = plan.ids
        if ids is None:  # fetch the parent's results: which requests are still failed
            # Written by the workers, so beside the receipts (a location both sides see).
            ids_path = RunLayout(base, new_run).resubmit_ids
            fetch = beam.Pipeline(options=options)
            sel = plan.selection
            build_failures_pipeline(
                fetch, sel.batches, sel.providers, self.only, ids_path, config.outputs
            )
            run_pipeline(fetch)
            ids = plans.read_failed_ids(ids_path)
        if not ids:
            none = f"({self.only} failures in {plan.source}: none)"
            print(f"mmirage resubmit: nothing to resubmit {none}")
            return ResubmitOutcome(0, new_run)
        print(
            f"mmirage resubmit: re-sending {len(ids)} failed request(s) ({self.only}) of run "
            f"{plan.parent} as run {new_run}",
            file=sys.stderr,
        )
        return _resubmit(self.config_path, config, options, new_run, plan.parent, ids, self.only)


def _resubmit(
    config_path: str,
    config: PipelineConfig,
    options: Any,
    new_run: str,
    parent: Optional[str],
    ids: frozenset[str],
    only: str,
) -> ResubmitOutcome:
    """Submit the requests ``ids`` of run ``parent`` as run ``new_run`` and print the
    summary."""
    import apache_beam as beam

    from mmirage_beam.run.receipts import consolidate_run
    from mmirage_beam.run.reports import resubmit_summary_lines
    from mmirage_beam.run.staging import staging_area
    from mmirage_beam.settings import SubmitSettings
    from mmirage_beam.transforms.submit_rows import build_submit_pipeline

    settings = SubmitSettings(
        new_run, skip_invalid_rows=True, only_custom_ids=frozenset(ids), parent_run_id=parent
    )
    pipeline = beam.Pipeline(options=options)
    plan = build_submit_pipeline(pipeline, config, settings)
    outcome = RunOutcome()
    try:
        with staging_area(plan.receipts_base, new_run):
            result = run_pipeline(pipeline, stop_marker=plan.stop_marker, outcome=outcome)
    except (Exception, KeyboardInterrupt) as exc:  # the runner wraps worker failures
        stopped = isinstance(exc, KeyboardInterrupt) or outcome.stop_requested
        consolidate_run(plan.receipts_base, new_run)
        why = "stopped on request" if stopped else str(exc).strip().split("\n")[-1]
        print(
            f"mmirage: error: the resubmission failed: {why}\n"
            f"Resume it with: mmirage run --config {config_path} --run-id {new_run}",
            file=sys.stderr,
        )
        return ResubmitOutcome(130 if stopped else 1, new_run)
    written = consolidate_run(plan.receipts_base, new_run)
    stats = metric_counters(result)
    lines = resubmit_summary_lines(
        plan, new_run, parent, stats, list(written), len(ids), only, config_path
    )
    print("\n".join(lines))
    return ResubmitOutcome(0, new_run, written)
