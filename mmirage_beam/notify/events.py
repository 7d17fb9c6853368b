"""What a run's end looks like to a webhook: :class:`RunSnapshot` (the run's counts,
tokens, cost and next command, from the same batch statuses and records ``mmirage
check`` reads) and :func:`events_for` (-> the :class:`Event` s it has reached).

Events (:data:`~mmirage_beam.config.pipeline_config.NOTIFY_EVENTS`), one terminal event
per run once none of its batches is running, in this order of precedence:

- ``cancelled``: ``mmirage cancel`` stopped the run (its cancel record), or a batch's
  provider status is ``cancelled`` / ``canceled``;
- ``expired``: a batch's completion window ended (provider status ``expired``, or an
  ended batch whose detail says so) and requests are left failed;
- ``failed``: a batch failed at the provider, or requests failed: when the run has a
  merge record (``mmirage merge`` / ``run --wait`` merged it with its resubmissions),
  its failed rows decide; otherwise the providers' failed request counts;
- ``completed``: everything else that ended.

``budget_reached`` is reported beside them, even while batches run: a batch failed with
``token_limit_exceeded``, the provider's enqueued-token limit (OpenAI Batch API error
code, https://platform.openai.com/docs/guides/batch#rate-limits).
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from mmirage_beam.check.advice import advice_lines
from mmirage_beam.check.report import CANCELLED_WORDS, StatusReport
from mmirage_beam.costs.prices import batch_price
from mmirage_beam.costs.report import USED_INPUT_TOKENS, USED_OUTPUT_TOKENS, per_output
from mmirage_beam.costs.tokens import INPUT_TOKENS
from mmirage_beam.run.lookup import BatchStatus
from mmirage_beam.run.records import MergeRecord
from mmirage_beam.run.store import RunStore
from mmirage_beam.settings import errors_path_for

__all__ = ["Event", "RunSnapshot", "event_id", "events_for", "snapshot_of"]

_CANCELLED_WORDS = CANCELLED_WORDS
BUDGET_ERROR_CODE = "token_limit_exceeded"


def event_id(run_id: str, event: str, url: str) -> str:
    """The stable id of ``event`` of ``run_id`` for the webhook ``url``: the first 32 hex
    digits of SHA-256 over ``run_id``, ``event`` and ``url`` joined by newlines. The same
    on every attempt and after a restart: a receiver dedupes on it."""
    return hashlib.sha256(f"{run_id}\n{event}\n{url}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class RunSnapshot:
    """One run as a notification tells it.

    Attributes:
        run_id: the run.
        provider, model: the config's processor (model None when the provider has none).
        batches, running: the run's batches, and those not ended yet.
        requests_total, requests_done, requests_failed: requests in the run's batches,
            succeeded and failed (from its merge record when it has one: rows then).
        counted_from: ``merge`` (the merge record's rows) or ``provider`` (batch counts).
        cancelled, expired, budget_reached, batch_failed: what the statuses and records say.
        input_tokens, output_tokens: reported by the provider (merged run), else the
            run record's estimate of input tokens (output None).
        tokens_kind: ``reported``, ``estimated`` or ``unknown``.
        cost_usd: at the batch price (None when the price is unknown).
        next_command: the command to type next (None: nothing left to do).
        advice: ``mmirage check``'s plain-words lines on the failures (may be empty).
        merged_file: the merged file when the run has a merge record.
    """

    run_id: str
    provider: str
    model: Optional[str]
    batches: int
    running: int
    requests_total: int
    requests_done: int
    requests_failed: int
    counted_from: str = "provider"
    cancelled: bool = False
    expired: bool = False
    budget_reached: bool = False
    batch_failed: bool = False
    input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    tokens_kind: str = "unknown"
    cost_usd: Optional[float] = None
    next_command: Optional[str] = None
    advice: tuple[str, ...] = ()
    merged_file: Optional[str] = None


@dataclass(frozen=True)
class Event:
    """One event a run reached: ``name`` (one of ``NOTIFY_EVENTS``) and the snapshot it
    was derived from."""

    name: str
    snapshot: RunSnapshot = field(compare=False)

    @property
    def run_id(self) -> str:
        """The run the event is about."""
        return self.snapshot.run_id


def events_for(snapshot: RunSnapshot) -> list[Event]:
    """The events ``snapshot`` has reached, in ``NOTIFY_EVENTS`` order: at most one
    terminal event (``completed`` / ``failed`` / ``expired`` / ``cancelled``, none while a
    batch runs) and ``budget_reached``. Precedence: see the module docstring."""
    names = []
    if not snapshot.running and snapshot.batches:
        if snapshot.cancelled:
            names.append("cancelled")
        elif snapshot.expired and snapshot.requests_failed:
            names.append("expired")
        elif snapshot.requests_failed or (
            snapshot.batch_failed and snapshot.counted_from == "provider"
        ):
            names.append("failed")
        else:
            names.append("completed")
    if snapshot.budget_reached:
        names.append("budget_reached")
    return [Event(n, snapshot) for n in names]


def snapshot_of(
    base: str,
    run_id: str,
    config: Any,
    statuses: Sequence[BatchStatus],
    config_arg: Optional[str] = None,
) -> RunSnapshot:
    """The snapshot of ``run_id`` from its batches' ``statuses`` (those of other runs are
    ignored) and its files under receipts base ``base`` (run, merge and cancel records).

    Args:
        base: the receipts base (``run.layout.receipts_base``).
        run_id: the run.
        config: the loaded ``PipelineConfig`` (its processor names provider and model).
        statuses: batch statuses as ``mmirage check`` looked them up.
        config_arg: the config path the next command names (default ``C.yaml``).

    Raises:
        OSError / BeamIOError: the run's records cannot be read.
    """
    mine = [s for s in statuses if s.receipt.run_id == run_id]
    store = RunStore(base, run_id)
    proc = config.processor
    model = getattr(proc, "model", None)
    words = [(s.progress.provider_status if s.progress else "").lower() for s in mine]
    running = sum(1 for s in mine if not s.terminal)
    cancelled = store.read_cancel_record() is not None or any(w in _CANCELLED_WORDS for w in words)
    expired = any(
        w == "expired" or (s.terminal and "expired" in (s.progress.detail or "").lower())
        for s, w in zip(mine, words)
        if s.progress is not None
    )
    budget = any(s.progress and s.progress.error_code == BUDGET_ERROR_CODE for s in mine)
    batch_failed = any(s.is_failure for s in mine)
    merged = _merge_of(base, run_id, running, statuses)
    cfg = shlex.quote(config_arg) if config_arg else "C.yaml"
    if merged is not None:
        stats = merged.stats or {}
        total = int(stats.get("rows_written", 0))
        # a row skipped as invalid at submit was never sent: not done
        failed = int(stats.get("rows_with_failures", 0)) + int(stats.get("rows_skipped_invalid", 0))
        done, counted = total - failed, "merge"
    else:
        total = sum(s.total for s in mine)
        done = sum(s.done or 0 for s in mine)
        failed = sum(s.failed or 0 for s in mine)
        counted = "provider"
    tokens_in, tokens_out, kind, cost = _tokens_and_cost(store, merged, proc)
    report = StatusReport(tuple(mine), (), (), (), (), 0.0)
    advice = tuple(advice_lines(report, cfg))
    snapshot = RunSnapshot(
        run_id=run_id,
        provider=str(proc.provider),
        model=model,
        batches=len(mine),
        running=running,
        requests_total=total,
        requests_done=done,
        requests_failed=failed,
        counted_from=counted,
        cancelled=cancelled,
        expired=expired,
        budget_reached=bool(budget),
        batch_failed=batch_failed,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        tokens_kind=kind,
        cost_usd=cost,
        advice=advice,
        merged_file=merged.output_path if merged is not None else None,
    )
    return _with_next_command(snapshot, cfg, advice, merged)


def _merge_of(
    base: str, run_id: str, running: int, statuses: Sequence[BatchStatus]
) -> Optional[MergeRecord]:
    """The merge record that holds the run once its batches ended (a merge of a running
    run is never the run's outcome): its own, else that of the run it resubmits (up its
    chain, by the receipts' ``parent_run_id`` in ``statuses``) when that merge took it
    in. A resubmission merged with its chain was told ``failed`` from its own batches'
    counts, with a next command that disagreed with the chain's (issue 38)."""
    if running:
        return None
    parent = {s.receipt.run_id: s.receipt.record.parent_run_id for s in statuses}
    current: Optional[str] = run_id
    seen: set[str] = set()
    while current and current not in seen:
        seen.add(current)
        record = RunStore(base, current).read_merge_record()
        if record is not None and record.run_id == current:
            if current == run_id or run_id in (record.runs or ()):
                return record
        current = parent.get(current)
    return None


def _tokens_and_cost(
    store: RunStore, merged: Optional[MergeRecord], proc: Any
) -> tuple[Optional[int], Optional[int], str, Optional[float]]:
    """``(input, output, kind, cost_usd)``: the merge's reported usage, else the run
    record's estimated input tokens."""
    try:
        price = batch_price(proc.provider, getattr(proc, "model", None), proc)
    except Exception:  # no price table for the provider: tokens only
        price = None
    if merged is not None and merged.stats:
        rows = per_output(merged.stats, (USED_INPUT_TOKENS, USED_OUTPUT_TOKENS))
        if rows:
            used_in = sum(r.get(USED_INPUT_TOKENS, 0) for r in rows.values())
            used_out = sum(r.get(USED_OUTPUT_TOKENS, 0) for r in rows.values())
            cost = price.cost_usd(used_in, used_out) if price is not None else None
            return used_in, used_out, "reported", _cents(cost)
    record = store.read_run_record()
    estimate: Mapping[str, Any] = (record.estimate if record is not None else None) or {}
    est_in = sum(int(v) for k, v in estimate.items() if k.partition(":")[0] == INPUT_TOKENS and v)
    if not est_in:
        return None, None, "unknown", None
    cost = price.cost_usd(est_in) if price is not None else None
    return est_in, None, "estimated", _cents(cost)


def _cents(cost: Optional[float]) -> Optional[float]:
    return None if cost is None else round(cost, 6)


def _with_next_command(
    s: RunSnapshot, cfg: str, advice: Sequence[str], merged: Optional[MergeRecord]
) -> RunSnapshot:
    """The command the user types next, as ``check`` and ``run --wait`` would say it."""
    from dataclasses import replace

    run = s.run_id
    if s.running:
        command: Optional[str] = f"mmirage check --config {cfg} --run-id {run} --watch"
    elif merged is not None and not s.requests_failed:
        command = None  # merged, nothing failed: done
    elif merged is not None:
        errors = shlex.quote(errors_path_for(merged.output_path or "OUT.jsonl"))
        root = merged.run_id or run  # a resubmission's chain is merged under its root
        command = f"mmirage resubmit --config {cfg} --from {errors} --run-id {root}"
    else:
        fixes = [line.split("Fix: ", 1)[1] for line in advice if "Fix: " in line]
        command = (
            fixes[0].split("\n", 1)[0].split(", then ", 1)[0]  # one command to type
            if fixes
            else f"mmirage merge --config {cfg} --run-id {run} --output-path OUT.jsonl"
        )
    return replace(s, next_command=command)
