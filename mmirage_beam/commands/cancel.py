"""``CancelCommand``: cancel, at the provider, every unfinished batch of a run and of its
linked runs (what ``mmirage cancel`` runs once its flags are parsed; a caller that has
its own consent, such as a dashboard's authorised action, runs it without the question).

Its two steps are :meth:`CancelCommand.plan` (look the batches up: nothing is cancelled)
and :meth:`CancelCommand.cancel` (cancel and record them); both return typed records
whose ``lines`` are what ``mmirage cancel`` prints.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Optional

from mmirage_beam.errors import ConfigError
from mmirage_beam.ids import check_run_id

if TYPE_CHECKING:
    from mmirage_beam.run.cancel import CancelPlan
    from mmirage_beam.run.records import LedgerEntry

__all__ = ["CancelCommand", "CancelOutcome", "PlannedCancel"]


@dataclasses.dataclass
class PlannedCancel:
    """The batches a cancel would ask for, with the lookup client still open.

    Attributes:
        plan: the run, its linked runs and their batches by state
            (:class:`~mmirage_beam.run.cancel.CancelPlan`).
        checker: the opened status checker (closed by :meth:`CancelCommand.cancel`, or
            by :meth:`close` when the caller stops here).
        lines: what ``mmirage cancel`` prints before it asks (batches cancelled before,
            or that nothing is left to cancel).
    """

    plan: CancelPlan
    checker: Any
    lines: list[str]

    @property
    def nothing_to_cancel(self) -> bool:
        """Every batch has ended or is being cancelled already."""
        return not self.plan.to_cancel

    @property
    def what(self) -> str:
        """``"N unfinished batch(es) (R request(s)) of run A, B"``, for the question."""
        return (
            f"{len(self.plan.to_cancel)} unfinished batch(es) ({self.plan.requests:,} "
            f"request(s)) of run {', '.join(self.plan.runs)}"
        )

    def close(self) -> None:
        """Close the lookup client without cancelling anything."""
        self.checker.close()


@dataclasses.dataclass(frozen=True)
class CancelOutcome:
    """What a cancel did.

    Attributes:
        exit_code: 0 every cancel accepted (or nothing to cancel); 1 the provider refused
            some.
        done: one ledger entry per batch asked (``error`` set when refused).
        lines: what ``mmirage cancel`` prints: a line per batch, then the summary with
            the merge command to type.
    """

    exit_code: int
    done: tuple[LedgerEntry, ...] = ()
    lines: tuple[str, ...] = ()

    @property
    def refused(self) -> tuple[LedgerEntry, ...]:
        """The entries whose cancel the provider refused."""
        return tuple(d for d in self.done if d.error)


@dataclasses.dataclass(frozen=True)
class CancelCommand:
    """``mmirage cancel``'s inputs.

    Attributes:
        config_path: the config the run was submitted with.
        run_id: the run to cancel; None: the newest.
    """

    config_path: str
    run_id: Optional[str] = None

    def plan(self, checker_factory: Any = None) -> PlannedCancel:
        """Find the run and its linked runs and look their batches up; nothing is
        cancelled. The caller then calls :meth:`cancel`, or ``close()`` on the result.

        Raises:
            mmirage_beam.errors.ConfigError: a malformed ``--run-id``, or a bad config.
            mmirage_beam.run.discovery.NoReceiptsError: no receipt (exit 2).
            mmirage_beam.errors.CredentialsError: a provider key is missing (exit 2).
        """
        from mmirage_beam.config import load_config
        from mmirage_beam.run.cancel import plan_cancel

        if self.run_id is not None:
            try:
                check_run_id(self.run_id)
            except ValueError as exc:
                raise ConfigError("--run-id", str(exc)) from None
        plan, checker = plan_cancel(load_config(self.config_path), self.run_id, checker_factory)
        runs = ", ".join(plan.runs)
        lines = []
        if plan.already:
            lines.append(
                f"mmirage cancel: {len(plan.already)} batch(es) of run {runs} were cancelled "
                "before and are still ending; not cancelled again"
            )
        if not plan.to_cancel:
            lines.append(
                f"mmirage cancel: nothing to cancel: {plan.ended} batch(es) of run {runs} "
                "have ended" + (", the others are being cancelled" if plan.already else "")
            )
        return PlannedCancel(plan, checker, lines)

    def cancel(self, planned: PlannedCancel) -> CancelOutcome:
        """Cancel the planned batches and record each run's cancellations durably (its
        cancel record), then close the lookup client.

        Raises:
            OSError / apache_beam.io.filesystem.BeamIOError: a cancel record cannot be
                written.
        """
        from mmirage_beam.config import load_config
        from mmirage_beam.run.cancel import cancel_batches
        from mmirage_beam.run.layout import receipts_base

        if planned.nothing_to_cancel:
            planned.close()
            return CancelOutcome(0)
        config = load_config(self.config_path)
        base = receipts_base(config.processor.metadata_output_path, config.state_dir)
        try:
            done = tuple(cancel_batches(base, planned.plan, planned.checker))
        finally:
            planned.close()
        refused = [d for d in done if d.error]
        lines = [
            f"  {d.provider_batch_id} ({d.provider}, run {d.run_id}, was {d.status_before}): "
            + (f"refused: {d.error}" if d.error else f"now {d.status_after}")
            for d in done
        ]
        lines.append(
            f"mmirage cancel: asked to cancel {len(done) - len(refused)} of {len(done)} "
            "batch(es); their processed requests keep their results. Merge once they have "
            f"ended: mmirage merge --config {self.config_path} --output-path OUT.jsonl "
            f"--run-id {planned.plan.runs[0]}"
        )
        return CancelOutcome(1 if refused else 0, done, tuple(lines))
