"""The dashboard's JSON views, built from the run store as the CLI builds its output.

- :func:`runs_view`: one entry per chain of runs, from
  :func:`mmirage_beam.run.listing.list_runs` (what ``mmirage runs`` prints; its cells
  are :func:`~mmirage_beam.run.listing.row_cells`, so the page shows the same text);
- :func:`run_view`: one chain's batches looked up as ``mmirage check`` looks them up
  (:class:`~mmirage_beam.run.lookup.BatchStatusChecker`) and its failures by error type
  from the last merge record (:class:`~mmirage_beam.run.records.MergeRecord`);
- :func:`failures_view`: the failed rows of one error type, from the merge's errors
  file (``OUT.errors.jsonl``, :func:`mmirage_beam.settings.errors_path_for`) joined to
  the merged file's rows by ``source_index``;
- :func:`spend_view`: the cost ledger (estimated and actual USD per run) summed by day
  and by provider.

Every value is JSON-ready (str, int, float, None, lists and dicts of them).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Optional, Sequence

from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.errors import CredentialsError
from mmirage_beam.jsonl import iter_jsonl_file
from mmirage_beam.run.discovery import NoReceiptsError, collect_receipts
from mmirage_beam.run.layout import receipts_base
from mmirage_beam.run.listing import (
    COLUMNS,
    MERGED_WHOLE,
    RunRow,
    list_runs,
    merged_whole,
    row_cells,
)
from mmirage_beam.run.lookup import TERMINAL_STATUSES, BatchStatusChecker
from mmirage_beam.run.selection import linked_runs
from mmirage_beam.run.store import RunStore
from mmirage_beam.settings import errors_path_for
from mmirage_beam.ui.views import FailuresView, RunJson, RunsView, RunView, SpendView

__all__ = ["Source", "config_at_state", "failures_view", "run_view", "runs_view", "spend_view"]

_LOG = logging.getLogger(__name__)
#: failed rows a drill-down returns at most (the errors file may hold millions)
MAX_FAILED_ROWS = 500


@dataclasses.dataclass(frozen=True)
class Source:
    """One config whose state the dashboard shows.

    Attributes:
        index: its position on the command line (``--config``, then ``--state`` order),
            which names it in the URLs (two configs may hold the same run id).
        path: the config file as given.
        config: the loaded config (moved to ``state`` when set).
        state: the ``--state`` folder it was moved to (:func:`config_at_state`); None:
            the config's own state.
    """

    index: int
    path: str
    config: PipelineConfig
    state: Optional[str] = None

    @property
    def label(self) -> str:
        """How the page names it: the config, and the state folder when moved."""
        return self.path + (f" --state {self.state}" if self.state else "")

    @property
    def base(self) -> str:
        """The receipts base (:func:`mmirage_beam.run.layout.receipts_base`)."""
        return receipts_base(self.config.processor.metadata_output_path, self.config.state_dir)

    @property
    def provider(self) -> str:
        """The processor's provider (``openai``, ``anthropic``...)."""
        return str(self.config.processor.provider)

    @property
    def model(self) -> Optional[str]:
        """The processor's ``model``; None: the adapter's default."""
        return getattr(self.config.processor, "model", None)


def config_at_state(config: PipelineConfig, state_dir: str) -> PipelineConfig:
    """``config`` with its state moved to ``state_dir`` (``mmirage ui --state DIR``): the
    receipts base becomes ``<state_dir>/<basename of metadata_output_path>`` (the default
    ``batch_metadata`` when the config sets none), so the runs another copy of the same
    config left in ``state_dir`` are read with this config's provider, model and prices.

    Args:
        config: the loaded config.
        state_dir: a folder, local or any Beam filesystem path (``gs://``, ``s3://``).
    """
    from mmirage_beam.io.filesystems import FileSystems

    name = config.processor.metadata_output_path.rstrip("/").rsplit("/", 1)[-1]
    metadata = FileSystems.join(state_dir, name) if name else ""
    processor = dataclasses.replace(config.processor, metadata_output_path=metadata)
    return dataclasses.replace(config, processor=processor, state_dir=state_dir)


def _run_json(source: Source, row: RunRow) -> RunJson:
    return {
        "config": source.index,
        "config_path": source.label,
        "provider": source.provider,
        "model": source.model,
        "run_id": row.run_id,
        "links": list(row.links),
        "state": row.state,
        "cancelled": row.cancelled,
        "created": row.created,
        "ended": row.ended,
        "batches": row.batches,
        "by_status": dict(row.by_status),
        "requests": row.requests,
        "done": row.done,
        "failures": row.failures,
        "estimated_tokens": row.estimated_tokens,
        "used_tokens": row.used_tokens,
        "estimated_usd": row.estimated_usd,
        "estimate_is_lower_bound": row.estimate_is_lower_bound,
        "actual_usd": row.actual_usd,
        "cells": list(row_cells(row)),
    }


def runs_view(sources: Sequence[Source], lookup: bool = True) -> RunsView:
    """``{"columns": [str], "runs": [run]}``: every chain of runs of every source, each
    source's newest first, as :func:`~mmirage_beam.run.listing.list_runs` finds them.

    A run is ``{config, config_path, provider, model, run_id, links, state, cancelled,
    created, ended (ISO 8601 UTC or None), batches, by_status {status: batches},
    requests, done, failures, estimated_tokens {input, max_output}, used_tokens {input,
    output}, estimated_usd, estimate_is_lower_bound, actual_usd (USD or None), cells
    (the ``mmirage runs`` line's cells)}``; ``notices``: one line per source whose
    batches could not be looked up.

    A source whose provider key is missing is listed without lookups (its batches "not
    looked up"), and ``notices`` says so, with the variable to set: one missing key
    must not hide every run (the demo's configs, opened later without their keys).
    """
    runs: list[dict[str, Any]] = []
    notices: list[str] = []
    for s in sources:
        try:
            rows = list_runs(s.config, lookup=lookup)
        except CredentialsError as exc:
            rows = list_runs(s.config, lookup=False)
            notices.append(
                f"{s.label}: batches not looked up: {exc} (or start mmirage ui with --no-lookup)"
            )
        runs += [_run_json(s, row) for row in rows]
    return {"columns": list(COLUMNS), "runs": runs, "notices": notices}


def _chain(source: Source, run_id: str) -> tuple[list[str], list[Any]]:
    """The run's chain (oldest first) and the chain's batches (receipt entries).

    Raises:
        KeyError: no receipt names ``run_id`` and no run record either.
    """
    try:
        every = collect_receipts(source.config)
    except NoReceiptsError:
        every = None
    if every is None or run_id not in {e.run_id for e in every.receipts}:
        if RunStore(source.base, run_id).read_run_record() is None:
            raise KeyError(run_id)
        return [run_id], []
    chain, _rank = linked_runs(every.receipts, [run_id])
    return chain, [e for e in every.batches if e.run_id in chain]


def _merge_record(source: Source, chain: Sequence[str]) -> Optional[Any]:
    """The chain's last merge record (named by its oldest run), None before a merge."""
    record = RunStore(source.base, chain[0]).read_merge_record()
    return record if record is not None and record.to_json() else None


def run_view(source: Source, run_id: str, lookup: bool = True) -> RunView:
    """One chain of runs: ``{config, run_id, runs, provider, model, batches: [batch],
    in_flight, failures: {merged, merged_at, output_path, errors_path, by_type
    {error_type: rows}, retryable}}``.

    A batch is ``{run_id, provider, provider_batch_id, chunk_id, output_name, status,
    provider_status, done, failed, total, age_secs, detail, submitted_at}`` (status as
    ``mmirage check`` reports it; ``not looked up`` without ``lookup``; ``ended (merged)``,
    not looked up, once the chain was merged whole). ``in_flight``:
    some batch has not ended (the page refreshes while it is true).

    Raises:
        KeyError: the source has no such run.
        mmirage_beam.errors.CredentialsError: with ``lookup``, a provider key is missing.
    """
    chain, batches = _chain(source, run_id)
    statuses: dict[Any, Any] = {}
    merged = _merge_record(source, chain)
    # merged whole: every batch had ended, nothing to look up (as mmirage runs lists it)
    settled = merged_whole(merged, batches)
    if lookup and batches and not settled:
        with BatchStatusChecker({e.provider for e in batches}, source.config) as checker:
            statuses = {s.receipt.key: s for s in checker.check(batches)}
    rows = []
    for e in batches:
        s = statuses.get(e.key)
        rows.append(
            {
                "run_id": e.run_id,
                "provider": e.provider,
                "provider_batch_id": e.provider_batch_id,
                "chunk_id": e.chunk_id,
                "output_name": e.output_name,
                "status": s.status if s else MERGED_WHOLE if settled else "not looked up",
                "provider_status": s.progress.provider_status if s and s.progress else None,
                "done": s.done if s else None,
                "failed": s.failed if s else None,
                "total": s.total if s else e.request_count,
                "age_secs": s.age_secs if s else None,
                "detail": s.detail if s else "",
                "submitted_at": e.submitted_at,
            }
        )
    notified = _notify(source, chain, list(statuses.values())) if statuses else []
    failures: dict[str, Any] = {"merged": merged is not None}
    if merged is not None:
        failures.update(
            merged_at=merged.merged_at,
            output_path=merged.output_path,
            errors_path=errors_path_for(merged.output_path) if merged.output_path else None,
            by_type=dict(sorted((merged.failed_by_type or {}).items())),
            retryable=merged.retryable,
        )
    return {
        "config": source.index,
        "config_path": source.label,
        "provider": source.provider,
        "model": source.model,
        "run_id": run_id,
        "runs": chain,
        "batches": rows,
        "in_flight": lookup
        and not settled
        and any(r["status"] not in TERMINAL_STATUSES for r in rows),
        "failures": failures,
        "notified": notified,
    }


def _notify(source: Source, chain: Sequence[str], statuses: Sequence[Any]) -> list[str]:
    """The dashboard's poller tells the config's webhooks (``execution_params.notify``)
    the events each run of ``chain`` has reached, from the statuses just looked up
    (:func:`mmirage_beam.notify.notify_run`: each event once per run whatever polls it;
    only runs someone looks at in the dashboard are notified from here). Returns one
    line per event delivered now; a failure is a logged warning, never the page's."""
    if not getattr(source.config.execution, "notify", None):
        return []
    from mmirage_beam.notify import notify_run

    sent = []
    for run_id in chain:
        mine = [s for s in statuses if s.receipt.run_id == run_id]
        if not mine:
            continue
        try:
            result = notify_run(
                source.base, run_id, source.config, statuses=mine, config_arg=source.label
            )
        except Exception as exc:  # the page stands whatever the webhook does
            _LOG.warning("notify: run %s: not sent (%s: %s)", run_id, type(exc).__name__, exc)
            continue
        sent += [
            f"event '{d.event}' of run {run_id} sent to {d.url}"
            for d in result.deliveries
            if d.status == "delivered"
        ]
        for warning in result.warnings:
            _LOG.warning("notify: run %s: %s", run_id, warning)
    return sent


def _merged_rows(output_path: str, wanted: set[int]) -> dict[int, dict[str, Any]]:
    """The merged JSONL file's rows whose ``source_index`` is wanted; {} for another
    format or a file that is gone. The file is ordered by ``source_index``, so it is
    streamed (:func:`mmirage_beam.jsonl.iter_jsonl_file`) only up to the last wanted row.

    Raises:
        ValueError: a line before the last wanted row is not JSON (file and line named).
    """
    from mmirage_beam.io.filesystems import FileSystems

    if not wanted or not output_path.endswith(".jsonl") or not FileSystems.exists(output_path):
        return {}
    last = max(wanted)
    rows = {}
    for _line, row in iter_jsonl_file(output_path):
        index = row.get("source_index") if isinstance(row, dict) else None
        if isinstance(index, int):
            if index in wanted:
                rows[index] = row
            if index >= last:
                break
    return rows


def failures_view(source: Source, run_id: str, error_type: Optional[str] = None) -> FailuresView:
    """The chain's failed rows at its last merge: ``{run_id, errors_path, error_type,
    total, rows: [{source_index, output_name, custom_id, error_type, message,
    status_code, retryable, prompt, prompt_chars, row}]}`` (``prompt``: the request's
    prompt text as the merge rebuilt it from the row, None for a merge that kept none or
    a row missing or changed since the submission; ``prompt_chars``: its whole length
    when the errors file kept only its start; ``row``: the merged file's row of that
    ``source_index``, None when the merged file is not JSONL or is gone), the first
    :data:`MAX_FAILED_ROWS` of ``error_type`` (None: every type), in the errors file's
    order (``source_index``).

    Raises:
        KeyError: the source has no such run, or it was never merged.
        ValueError: a line of the errors file is not JSON (file and line named).
        OSError / apache_beam.io.filesystem.BeamIOError: the errors file is unreadable.
    """
    chain, _batches = _chain(source, run_id)
    merged = _merge_record(source, chain)
    if merged is None or not merged.output_path:
        raise KeyError(run_id)
    path = errors_path_for(merged.output_path)
    shown: list[dict[str, Any]] = []
    total = 0
    for _line, e in iter_jsonl_file(path):  # streamed: it may hold millions of lines
        if not isinstance(e, dict) or e.get("source_index") is None:
            continue  # unknown custom_ids and unreadable result lines have no row
        if error_type is None or e.get("error_type") == error_type:
            total += 1
            if len(shown) < MAX_FAILED_ROWS:
                shown.append(e)
    rows = _merged_rows(merged.output_path, {int(e["source_index"]) for e in shown})
    return {
        "run_id": run_id,
        "errors_path": path,
        "error_type": error_type,
        "total": total,
        "rows": [
            {
                "source_index": e.get("source_index"),
                "output_name": e.get("output_name"),
                "custom_id": e.get("custom_id"),
                "error_type": e.get("error_type"),
                "message": e.get("message"),
                "status_code": e.get("status_code"),
                "retryable": e.get("retryable"),
                "prompt": e.get("prompt"),
                "prompt_chars": e.get("prompt_chars"),
                "row": rows.get(int(e["source_index"])),
            }
            for e in shown
        ],
    }


def _add(into: dict[str, dict[str, float]], key: str, run: dict[str, Any]) -> None:
    slot = into.setdefault(key, {"estimated_usd": 0.0, "actual_usd": 0.0, "runs": 0})
    slot["runs"] += 1
    slot["estimated_usd"] += run["estimated_usd"] or 0.0
    slot["actual_usd"] += run["actual_usd"] or 0.0


def spend_view(sources: Sequence[Source]) -> SpendView:
    """The cost ledger: ``{runs: [{config, run_id, provider, model, day, state,
    estimated_usd, estimate_is_lower_bound, actual_usd, estimated_tokens, used_tokens}],
    by_day: [{day, estimated_usd, actual_usd, runs}], by_provider: [{provider, ...}],
    total: {estimated_usd, actual_usd, runs}}``, USD; ``day`` is the run's creation day
    (UTC, ``YYYY-MM-DD``). Runs are listed without a status lookup (cost does not
    depend on it). A run with no estimate or not merged counts 0 in the sums.
    """
    runs = runs_view(sources, lookup=False)["runs"]
    ledger = []
    by_day: dict[str, dict[str, float]] = {}
    by_provider: dict[str, dict[str, float]] = {}
    total: dict[str, dict[str, float]] = {}
    for r in runs:
        day = (r["created"] or "")[:10] or "unknown"
        ledger.append(
            {
                k: r[k]
                for k in (
                    "config",
                    "run_id",
                    "provider",
                    "model",
                    "state",
                    "estimated_usd",
                    "estimate_is_lower_bound",
                    "actual_usd",
                    "estimated_tokens",
                    "used_tokens",
                )
            }
            | {"day": day}
        )
        _add(by_day, day, r)
        _add(by_provider, r["provider"], r)
        _add(total, "all", r)
    return {
        "runs": ledger,
        "by_day": [{"day": d, **v} for d, v in sorted(by_day.items())],
        "by_provider": [{"provider": p, **v} for p, v in sorted(by_provider.items())],
        "total": total.get("all", {"estimated_usd": 0.0, "actual_usd": 0.0, "runs": 0}),
    }
