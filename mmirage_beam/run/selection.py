"""Selecting what to collect: a run, the runs linked to it, and their batches' status.

Shared by ``mmirage merge`` and ``mmirage resubmit``. Runs are linked by the
``parent_run_id`` of resubmission receipts; per request, the newest successful result
across linked runs wins (see :class:`mmirage_beam.transforms.fetch.OutputResult`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Sequence

from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.run.discovery import collect_receipts
from mmirage_beam.run.lookup import (
    LOOKUP_FAILED,
    NOT_FOUND_HERE,
    TERMINAL_STATUSES,
    BatchStatusChecker,
)
from mmirage_beam.run.receipts import read_receipt_at
from mmirage_beam.run.records import RunState
from mmirage_beam.run.store import RunStore


class BatchToFetch(NamedTuple):
    """One receipted provider batch whose results are to be fetched.

    Attributes:
        provider: registry name of the provider.
        provider_batch_id: the provider's batch id.
        status: normalised status from the launcher's lookup (``completed | failed |
            in_progress | unknown``).
        provider_status: the provider's own status word.
        failure: batch-level failure ``{"type", "message"}`` (e.g.
            ``token_limit_exceeded``), or None.
        run_id: the run that submitted it.
        output_name: the output all its requests belong to.
        custom_id_to_source_index: the receipt's mapping, or None to read it from
            ``receipt_location`` in the worker that fetches the batch (so the launcher
            and the job graph hold no per-request map).
        run_rank: order of its run among linked runs (higher = submitted later).
        receipt_location: where the receipt is stored
            (:class:`~mmirage_beam.run.receipts.ReceiptLocation`), or None.
    """

    provider: str
    provider_batch_id: str
    status: str
    provider_status: str
    failure: Optional[dict]
    run_id: str
    output_name: str
    custom_id_to_source_index: Optional[dict]
    run_rank: int = 0
    receipt_location: Optional[Any] = None
    #: a reused receipt (:mod:`mmirage_beam.reuse`): the run whose batch this is, whose
    #: answers this run reuses for the receipt's requests only
    reused_from: Optional[str] = None
    #: a reused receipt's ``reused_custom_ids`` when carried (else read from the receipt)
    reused_custom_ids: Optional[dict] = None

    def reuse_map(self) -> dict[str, str]:
        """A reused receipt's ``reused_custom_ids`` (this run's custom_id -> the earlier
        batch's), read from the receipt when not carried; ``{}`` for other receipts."""
        if not self.reused_from:
            return {}
        if self.reused_custom_ids is not None:
            return self.reused_custom_ids
        if self.receipt_location is None:
            return {}
        return read_receipt_at(self.receipt_location).get("reused_custom_ids") or {}

    def mapping(self) -> dict[str, int]:
        """``custom_id_to_source_index``, read from the receipt when not carried.

        Raises:
            ValueError: the receipt at ``receipt_location`` is gone or changed.
        """
        if self.custom_id_to_source_index is not None:
            return self.custom_id_to_source_index
        if self.receipt_location is None:
            raise ValueError(f"batch {self.provider_batch_id}: no receipt mapping")
        gone = (
            f"the receipt of batch {self.provider_batch_id} is no longer at "
            f"{self.receipt_location.path} (the file changed during the merge; merge again)"
        )
        try:
            receipt = read_receipt_at(self.receipt_location)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{gone}: {exc}") from None
        if receipt.get("provider_batch_id") != self.provider_batch_id:
            raise ValueError(gone)
        return receipt.get("custom_id_to_source_index") or {}


@dataclass
class RunSelection:
    """The batches of a run and its linked runs, looked up at their providers.

    Attributes:
        run: the run asked for (or the newest).
        linked: it and its linked runs, oldest first.
        entries: their receipts (:class:`mmirage_beam.run.discovery.ReceiptEntry`).
        batches: one :class:`BatchToFetch` per receipt.
        pending: those whose batch has not ended.
        lookup_failed: statuses of batches the provider could not resolve.
        providers: provider -> (adapter class, provider config).
        starts: the runs asked for (or the newest), before linking.
    """

    run: str
    linked: list[str]
    entries: list[Any]
    batches: list[Any]
    pending: list[Any]
    lookup_failed: list[Any]
    providers: dict[str, tuple[type, Any]]
    starts: list[str] = field(default_factory=list)


def select_run(
    config: PipelineConfig,
    metadata_paths: Sequence[str],
    run_id: Optional[str | Sequence[str]],
    verb: str,
) -> RunSelection:
    """Find the receipts of ``run_id`` (default: the newest run; several ids, e.g. one
    run per shard, are merged together) and its linked runs, and look every batch up.
    Messages for the user go to stderr, prefixed ``mmirage <verb>``.

    Raises:
        mmirage_beam.run.discovery.NoReceiptsError: no receipt found (exit 2).
        mmirage_beam.errors.CredentialsError: a provider key is missing (exit 2).
    """
    asked = [run_id] if isinstance(run_id, str) else list(run_id or [])
    for r in asked:  # each asked run must exist (NoReceiptsError names the patterns)
        collect_receipts(config, metadata_paths, r)
    every = collect_receipts(config, metadata_paths)
    # Receipt files given explicitly: all their runs; else the newest run.
    starts = asked or (every.run_ids if metadata_paths else [every.run_ids[0]])
    run = ", ".join(starts)
    linked, rank = linked_runs(every.receipts, starts)
    entries = [e for e in every.receipts if e.run_id in linked]
    others = [r for r in every.run_ids if r not in linked]
    resubmissions = [r for r in linked if r not in starts]
    if resubmissions:
        print(
            f"mmirage {verb}: run {run} is linked to run(s) {', '.join(resubmissions)} "
            "(resubmissions): per request, the newest successful result is kept",
            file=sys.stderr,
        )
    if others and not asked and not metadata_paths:
        several = (  # merge's hint only: resubmit takes the failures of one run
            " (repeat it to merge several runs, e.g. one per shard)" if verb == "merge" else ""
        )
        print(
            f"mmirage {verb}: using run {run} (the newest); also found run(s) "
            f"{', '.join(others)}: pass --run-id to choose another{several}",
            file=sys.stderr,
        )
    batch_entries = list({e.key: e for e in entries}.values())
    with BatchStatusChecker({e.provider for e in batch_entries}, config) as checker:
        statuses = checker.check(batch_entries)
        providers = checker.adapter_plans()
    batches, pending, lookup_failed = batches_to_fetch(entries, statuses, rank)
    print(
        f"mmirage {verb}: run {run}: {len(batches)} batch(es), "
        f"{sum(e.request_count for e in entries)} request(s)",
        file=sys.stderr,
    )
    for line in lookup_failure_lines(lookup_failed):
        print(line, file=sys.stderr)
    return RunSelection(
        run, linked, entries, batches, pending, lookup_failed, providers, list(starts)
    )


#: lookup failures named one by one (the rest are counted in one line)
LOOKUP_FAILURES_SHOWN = 5


def lookup_failure_lines(failed: Sequence[Any]) -> list[str]:
    """The lines that name the batches whose lookup failed (``BatchStatus``): the first
    :data:`LOOKUP_FAILURES_SHOWN`, then one line for the rest, and when every one was a
    404 what that means (issue 38: a merge against the wrong account printed a line, and
    retries, per batch)."""
    lines = [
        f"  cannot look up {st.receipt.provider_batch_id}: {st.error}"
        for st in failed[:LOOKUP_FAILURES_SHOWN]
    ]
    if len(failed) > LOOKUP_FAILURES_SHOWN:
        lines.append(f"  ... and {len(failed) - LOOKUP_FAILURES_SHOWN:,} more batch(es)")
    if failed and all(getattr(st, "not_found", False) for st in failed):
        lines.append(
            f"  every lookup that failed answered 404: those batches are {NOT_FOUND_HERE} "
            "(is base_url, the API key or the project the one the run was submitted with?)"
        )
    return lines


def linked_runs(
    receipts: Sequence[Any], runs: str | Sequence[str]
) -> tuple[list[str], dict[str, int]]:
    """The runs linked to ``runs`` by ``parent_run_id`` (both ways), oldest first, and
    each one's rank (0 = oldest), from the receipts' submission times."""
    edges: dict[str, set[str]] = {}
    first_seen: dict[str, float] = {}
    for e in receipts:
        parent = e.receipt.get("parent_run_id")
        edges.setdefault(e.run_id, set())
        if parent:
            edges[e.run_id].add(parent)
            edges.setdefault(parent, set()).add(e.run_id)
        t = e.submitted_at or 0.0
        first_seen[e.run_id] = min(first_seen.get(e.run_id, t), t)
    starts = [runs] if isinstance(runs, str) else list(runs)
    seen, todo = set(starts), list(starts)
    while todo:
        for other in edges.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    ordered = sorted(seen, key=lambda r: (first_seen.get(r, 0.0), r))
    return ordered, {r: i for i, r in enumerate(ordered)}


def batches_to_fetch(
    entries: list[Any], statuses: list[Any], rank: dict[str, int]
) -> tuple[list, list, list]:
    """Receipts + their statuses -> (BatchToFetch per receipt, not ended, lookup failed)."""
    by_key = {st.receipt.key: st for st in statuses}
    batches, pending = [], []
    for e in entries:
        st = by_key[e.key]
        progress = st.progress
        provider_status = progress.provider_status if progress else st.status
        failure = None
        if st.status == "failed":
            failure = {
                "type": (progress.error_code if progress else None) or f"batch_{provider_status}",
                "message": progress.detail if progress else "",
            }
        b = BatchToFetch(
            provider=e.provider,
            provider_batch_id=e.provider_batch_id,
            status=st.status,
            provider_status=provider_status,
            failure=failure,
            run_id=e.run_id,
            output_name=e.output_name or "",
            # read back by the worker that fetches the batch: the launcher holds none
            custom_id_to_source_index=(
                e.receipt["custom_id_to_source_index"] if e.location is None else None
            ),
            run_rank=rank.get(e.run_id, 0),
            receipt_location=e.location,
            reused_from=e.receipt.get("reused_from"),  # a reused receipt (mmirage_beam.reuse)
            reused_custom_ids=(
                e.receipt.get("reused_custom_ids") or {}
                if e.location is None and e.receipt.get("reused_from")
                else None
            ),
        )
        batches.append(b)
        if st.status not in TERMINAL_STATUSES:
            pending.append(b)
    failed = [st for st in statuses if st.status == LOOKUP_FAILED]
    return batches, pending, failed


@dataclass
class Unfinished:
    """What the receipts folder says about runs that stopped before every chunk was
    submitted.

    Attributes:
        intents: leftover ``*.intent`` files (chunks whose submission was interrupted).
        intent_requests: custom_ids of those chunks that no receipt holds.
        states: run id -> its run state (:meth:`RunStore.read_run_state`, as its dict
            ``{"run_id", "state"}``) when it says the run did not finish (``state``
            other than ``finished``; ``stopped``: no record, its stop marker left).
        short_by: run id -> requests the run built (``requests_total`` of a finished
            record) minus the requests its receipts hold, when positive.
        finish_pending: runs whose every batch is receipted (the submitted marker,
            :func:`receipts.submission_complete`) but whose finish steps did not all
            run (record not finished): not unfinished, ``mmirage run --run-id``
            completes them without sending anything.
    """

    intents: list[str]
    intent_requests: set[str]
    states: dict[str, dict[str, Any]]
    short_by: dict[str, int]
    finish_pending: list[str] = field(default_factory=list)

    @property
    def runs(self) -> list[str]:
        """The runs that are unfinished by any signal, sorted."""
        from_intents = {_run_of_intent(p) for p in self.intents}
        return sorted(from_intents | set(self.states) | set(self.short_by))

    def __bool__(self) -> bool:
        return bool(self.intents or self.states or self.short_by)


def _run_of_intent(path: str) -> str:
    # <base>.<modality>.<run_id>.jsonl.parts/<chunk_id>.intent
    folder = path.rsplit("/", 1)[0]
    return folder[: -len(".jsonl.parts")].rsplit(".", 1)[-1]


def find_unfinished(base: str, runs: Sequence[str], entries: Sequence[Any]) -> Unfinished:
    """Signals that ``runs`` stopped before all their chunks were submitted: leftover
    intents, a run's stop marker still present, a run record that is not
    ``finished``, or receipts holding fewer requests than the record says the run built.

    Args:
        base: the receipts base (``receipts.receipts_base``).
        runs: the runs of the merge (linked runs included).
        entries: their receipts (:class:`~mmirage_beam.run.discovery.ReceiptEntry`).
    """
    intents: list[str] = []
    intent_requests: set[str] = set()
    stores = [RunStore(base, run) for run in runs]
    for store in stores:
        for path in store.pending_intents():
            intents.append(path)
            intent_requests.update(store.read_intent(path).custom_id_to_source_index or {})
    if intent_requests:  # only then: no set of every receipted custom_id otherwise
        for e in entries:  # one receipt's map at a time
            intent_requests.difference_update(
                e.full_receipt().get("custom_id_to_source_index") or {}
            )
    states: dict[str, dict[str, Any]] = {}
    short_by: dict[str, int] = {}
    finish_pending: list[str] = []
    for store in stores:
        run = store.run_id
        state: Optional[RunState] = store.read_run_state()
        if state is None and store.stop_requested():
            # the launcher was stopped (Ctrl-C / SIGTERM) and did not clean up after it
            state = RunState(run, "stopped")
        if state is None:
            continue
        if not state.is_finished:
            if (
                state.state == "submitting"
                and not any(_run_of_intent(p) == run for p in intents)
                and not store.stop_requested()
                and store.submission_complete()
            ):
                finish_pending.append(run)
            else:
                states[run] = state.to_json()
            continue
        total = state.requests_total
        if isinstance(total, int) and not isinstance(total, bool):
            held = sum(e.mapped_count for e in entries if e.run_id == run)
            if total > held:
                short_by[run] = total - held
    return Unfinished(sorted(intents), intent_requests, states, short_by, sorted(finish_pending))


def finish_pending_lines(runs: Sequence[str], config_arg: str) -> list[str]:
    """What ``merge`` and ``check`` print for runs whose only missing part is their
    finish steps (:attr:`Unfinished.finish_pending`): the run and the command that
    completes it."""
    lines = []
    for run in runs:
        lines.append(
            f"finish step pending: run {run}: every batch is submitted and receipted, but "
            "its placeholder rows, receipt consolidation or run record were not completed. "
            "Complete it (nothing is sent; the provider is not contacted):\n"
            f"  mmirage run --config {config_arg} --run-id {run}"
        )
    return lines


class RunStates(NamedTuple):
    """What ``mmirage check`` says of the runs beside their batches (:func:`run_states`).

    Attributes:
        lines: the lines to print, each with the command to run.
        unfinished: the runs that stopped before all their chunks were submitted.
    """

    lines: list[str]
    unfinished: tuple[str, ...]


def run_states(base: str, receipts: Any, config_arg: str) -> RunStates:
    """What ``mmirage check`` says of the runs of ``receipts`` (``CollectedReceipts``)
    beside their batches: a run still submitting (its lease held), "finish step
    pending" and "UNFINISHED" (stopped before all its chunks were submitted), each with
    the command to run, and which runs are unfinished; from the run records, intents,
    markers and leases under ``base``, no provider call."""
    runs = [r for r in receipts.run_ids if r and r != "?"]
    live = [r for r in runs if RunStore(base, r).lease_held()]  # still submitting
    runs = [r for r in runs if r not in live]
    unfinished = find_unfinished(base, runs, [e for e in receipts.receipts if e.run_id in runs])
    lines = [
        f"run {r} is still submitting (its lease is held); check again when it ends" for r in live
    ]
    lines += finish_pending_lines(unfinished.finish_pending, config_arg)
    for run in unfinished.runs:
        lines.append(
            f"UNFINISHED: run {run} stopped before all its chunks were submitted; resume it "
            f"(only what has no receipt is sent):\n  mmirage run --config {config_arg} "
            f"--run-id {run}"
        )
    return RunStates(lines, tuple(unfinished.runs))


class JudgedRuns(NamedTuple):
    """The receipts ``mmirage check`` judges (:func:`judged_runs`).

    Attributes:
        receipts: the judged runs' receipts (a ``ReceiptSet``).
        runs: the runs asked for (or the newest), before linking.
        others: the runs found under the same base and left out, newest first.
    """

    receipts: Any
    runs: list[str]
    others: list[str]


def judged_runs(receipts: Any, newest_only: bool) -> JudgedRuns:
    """The receipts of the newest run and the runs linked to it by ``parent_run_id``
    (its resubmissions), as ``mmirage merge`` selects them (:func:`select_run`), when
    ``newest_only``; else every run of ``receipts`` (a ``ReceiptSet``: ``--run-id`` or
    ``--metadata-path`` already chose). An old cancelled or failed run then no longer
    makes the newest run's check FAILED (issue 38).
    """
    from mmirage_beam.run.discovery import ReceiptSet

    every = list(receipts.run_ids)
    if not newest_only or len(every) <= 1:
        return JudgedRuns(receipts, every, [])
    linked, _rank = linked_runs(receipts.receipts, every[0])
    kept = tuple(e for e in receipts.receipts if e.run_id in linked)
    files = tuple(f for f in receipts.files if any(e.path == f for e in kept))
    others = [r for r in every if r not in linked]
    return JudgedRuns(ReceiptSet(kept, files, receipts.skipped_dry_run), [every[0]], others)
