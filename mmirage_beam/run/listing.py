"""``mmirage runs``: the runs under a config's state, with their state and a cost ledger.

One row per chain of linked runs (a run and its resubmissions, linked by the receipts'
``parent_run_id``; :func:`mmirage_beam.run.selection.linked_runs`), built from what is on disk
beside the receipts and one status lookup per batch:

- the run records (``<base>.run.<run_id>.json``, :mod:`mmirage_beam.run.fingerprint`): when the
  run started, whether its submission finished, and its token estimate;
- the receipts (:mod:`mmirage_beam.run.discovery`): batches and requests;
- the merge records and cancel records (:mod:`mmirage_beam.run.ledger`): failures and the
  cost of the tokens the provider reported, summed over the linked runs;
- the cycle state (:mod:`mmirage_beam.cycle.loop`), when the run was started with ``--wait``.

State, first that applies: ``submitting`` (its launcher holds the run's lease now),
``unfinished`` (the submission stopped before every chunk was sent: resume it),
``in progress`` (a batch has not ended), ``merged`` (merged after its newest batch was
submitted), ``ended`` (every batch ended; not merged since), ``empty`` (its submission
finished having read no row: nothing was sent). A run whose answers were all reused
holds reused receipts of the earlier batches, whose states are its own. ``cancelled`` is
added when ``mmirage cancel`` was used on it.
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.costs.prices import batch_price
from mmirage_beam.costs.report import USED_INPUT_TOKENS, USED_OUTPUT_TOKENS, per_output
from mmirage_beam.costs.tokens import (
    INPUT_TOKENS,
    MAX_OUTPUT_TOKENS,
    REQUESTS_WITHOUT_OUTPUT_LIMIT,
    TOKEN_METRICS,
)
from mmirage_beam.run.discovery import NoReceiptsError, collect_receipts
from mmirage_beam.run.layout import receipts_base
from mmirage_beam.run.lease import REFRESH_SECS, is_stale
from mmirage_beam.run.lookup import TERMINAL_STATUSES, BatchStatusChecker
from mmirage_beam.run.records import JsonRecord, MergeRecord, RunRecord
from mmirage_beam.run.selection import find_unfinished, linked_runs
from mmirage_beam.run.store import RunStore, run_records

#: ``by_status`` of a chain merged whole (:func:`merged_whole`): its batches are not
#: looked up again.
MERGED_WHOLE = "ended (merged)"


@dataclass
class RunRow:
    """One chain of linked runs.

    Attributes:
        run_id: the chain's first run.
        created: when it started (ISO 8601 UTC), from its run record or first receipt.
        links: its resubmission runs, oldest first.
        state: see the module docstring.
        batches, requests: distinct provider batches and the requests they hold.
        failures: failed outputs (the last merge's count once merged, else the
            providers' failed request counts so far); None when unknown.
        estimated_usd: the submit-time estimate (input tokens, plus the output-token
            upper bound when every request set one), None when unknown.
        estimate_is_lower_bound: the estimate covers input tokens only.
        actual_usd: the cost of the tokens the provider reported, at the last merge.
        cancelled: ``mmirage cancel`` was used on a run of the chain.
        done: requests that succeeded (the providers' completed counts, once every
            batch was looked up); None when unknown.
        by_status: batches per looked-up status (``completed``, ``in_progress``,
            ``failed``, ``lookup_failed``...; ``not looked up`` without a lookup).
        ended: when it ended as far as the store knows (ISO 8601 UTC): the last merge's
            time once merged, else None.
        estimated_tokens: the run record's estimate, ``{"input": int, "max_output": int}``
            (tokens; ``max_output`` is None when some request set no output limit, so
            there is no upper bound); None when the run recorded none.
        used_tokens: the tokens the provider reported at the last merge,
            ``{"input": int, "output": int}``; None before a merge.
    """

    run_id: str
    created: Optional[str]
    links: list[str] = field(default_factory=list)
    state: str = "ended"
    batches: int = 0
    requests: int = 0
    failures: Optional[int] = None
    estimated_usd: Optional[float] = None
    estimate_is_lower_bound: bool = False
    actual_usd: Optional[float] = None
    cancelled: bool = False
    done: Optional[int] = None
    by_status: dict[str, int] = field(default_factory=dict)
    ended: Optional[str] = None
    estimated_tokens: Optional[dict[str, Optional[int]]] = None
    used_tokens: Optional[dict[str, int]] = None


def _iso(ts: Optional[float]) -> Optional[str]:
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat(timespec="seconds")


def estimate_tokens(estimate: Mapping[str, int]) -> dict[str, int]:
    """A run record's token counters (``<metric>:<output>`` -> tokens) summed over its
    outputs, per metric of :data:`~mmirage_beam.costs.tokens.TOKEN_METRICS`."""
    total = {m: 0 for m in TOKEN_METRICS}
    for key, value in estimate.items():
        metric = key.partition(":")[0]
        if metric in total:
            total[metric] += int(value)
    return total


def used_tokens(stats: Mapping[str, int]) -> dict[str, int]:
    """``{"input": int, "output": int}``: the usage a merge counted
    (``used_input_tokens:<output>`` ...), summed over the outputs."""
    rows = per_output(stats, (USED_INPUT_TOKENS, USED_OUTPUT_TOKENS))
    return {
        "input": sum(r.get(USED_INPUT_TOKENS, 0) for r in rows.values()),
        "output": sum(r.get(USED_OUTPUT_TOKENS, 0) for r in rows.values()),
    }


def estimate_usd(estimate: Mapping[str, int], price: Any) -> tuple[Optional[float], bool]:
    """``(USD, input only?)`` from a run record's token counters, at ``price``
    (:class:`mmirage_beam.costs.prices.BatchPrice`; None: unknown)."""
    if price is None or not estimate:
        return None, False
    total = estimate_tokens(estimate)
    if total[REQUESTS_WITHOUT_OUTPUT_LIMIT]:
        return price.cost_usd(total[INPUT_TOKENS]), True
    return price.cost_usd(total[INPUT_TOKENS], total[MAX_OUTPUT_TOKENS]), False


def actual_usd(stats: Mapping[str, int], price: Any) -> Optional[float]:
    """USD of the usage a merge counted (``used_input_tokens:<output>`` ...)."""
    if price is None:
        return None
    used = used_tokens(stats)
    return price.cost_usd(used["input"], used["output"])


def _holds(record: Optional[JsonRecord]) -> bool:
    """A record that exists and holds a key (a file holding ``{}`` counts as none)."""
    return record is not None and bool(record.to_json())


def list_runs(config: PipelineConfig, lookup: bool = True) -> list[RunRow]:
    """Every chain of runs under the config's state, newest first.

    Args:
        config: the loaded config.
        lookup: look every batch up at its provider (needs the keys); without it a run
            whose batches are not known to have ended shows ``submitted``.

    Raises:
        mmirage_beam.errors.CredentialsError: a provider key is missing (exit 2).
    """
    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    proc = config.processor
    price = batch_price(proc.provider, getattr(proc, "model", None), proc)
    try:
        entries = list(collect_receipts(config).receipts)
    except NoReceiptsError:
        entries = []
    records = {str(r.run_id): r for r in run_records(base)}
    parent = {e.run_id: e.record.parent_run_id for e in entries}
    every_run = list(dict.fromkeys([*records, *(e.run_id for e in entries)]))
    roots = [r for r in every_run if not parent.get(r)]
    chains: dict[str, tuple[list[str], list[Any]]] = {}
    merges: dict[str, Optional[MergeRecord]] = {}
    for root in roots:
        chain, _rank = linked_runs(entries, [root]) if root in parent else ([root], {root: 0})
        # its own receipts, one per batch: a reused receipt names an earlier run's batch
        chains[root] = (chain, list({e.key: e for e in entries if e.run_id in chain}.values()))
        merged = RunStore(base, root).read_merge_record()
        merges[root] = merged if _holds(merged) else None
    statuses: dict[tuple[str, str], Any] = {}
    # a chain merged whole after its last batch was submitted has only ended batches (merge
    # refuses while any runs, unless --allow-partial, whose rows are "pending"): its
    # batches are not looked up again (a dashboard over old runs of a provider, or a fake,
    # that is gone answered only after every lookup's retries, issue 38)
    batches = [
        e
        for root, (_chain, mine) in chains.items()
        if not merged_whole(merges[root], mine)
        for e in mine
    ]
    batches = list({e.key: e for e in batches}.values())
    if lookup and batches:
        with BatchStatusChecker({e.provider for e in batches}, config) as checker:
            statuses = {s.receipt.key: s for s in checker.check(batches)}
    rows: list[RunRow] = []
    for root in roots:
        chain, mine = chains[root]
        record: Optional[RunRecord] = records.get(root)
        first = min((e.submitted_at for e in mine if e.submitted_at), default=None)
        newest = max((e.submitted_at for e in mine if e.submitted_at), default=None)
        row = RunRow(
            run_id=root,
            created=(record.started_at if record else None) or _iso(first),
            links=[r for r in chain if r != root],
            batches=len(mine),
            requests=sum(e.request_count for e in mine),
        )
        row.cancelled = any(_holds(RunStore(base, r).read_cancel_record()) for r in chain)
        estimate = (record.estimate if record else None) or {}
        row.estimated_usd, row.estimate_is_lower_bound = estimate_usd(estimate, price)
        if estimate:
            tokens = estimate_tokens(estimate)
            limited = not tokens[REQUESTS_WITHOUT_OUTPUT_LIMIT]
            row.estimated_tokens = {
                "input": tokens[INPUT_TOKENS],
                "max_output": tokens[MAX_OUTPUT_TOKENS] if limited else None,
            }
        store = RunStore(base, root)
        merged = merges[root]
        looked = [statuses.get(e.key) for e in mine]
        ended = bool(mine) and all(s is not None and s.status in TERMINAL_STATUSES for s in looked)
        if merged_whole(merged, mine):
            looked, ended = [], True
            row.by_status[MERGED_WHOLE] = len(mine)
        for s in looked:
            name = s.status if s is not None else "not looked up"
            row.by_status[name] = row.by_status.get(name, 0) + 1
        lease = store.read_lease()
        if lease is not None and not is_stale(lease, time.time(), 3 * REFRESH_SECS):
            row.state = "submitting"
        elif find_unfinished(base, chain, [e for e in entries if e.run_id in chain]):
            row.state = "unfinished"
        elif not mine and record is not None and record.finished and not record.rows_read:
            row.state = "empty"  # it read no row: nothing was sent, nothing to merge
        elif not mine:
            row.state = "unfinished" if record and not record.finished else "ended"
        elif not lookup and not merged:
            row.state = "submitted"
        elif lookup and not ended:
            row.state = "in progress"
        elif merged and float(merged.merged_at_unix or 0) >= (newest or 0):
            row.state = "merged"
        else:
            row.state = "ended"
        if looked and all(s is not None and s.done is not None for s in looked):
            row.done = sum(int(s.done or 0) for s in looked)
        if merged:
            row.failures = merged.failures
            row.actual_usd = actual_usd(merged.stats or {}, price)
            row.used_tokens = used_tokens(merged.stats or {})
            row.ended = merged.merged_at
        elif looked and all(s is not None for s in looked):
            row.failures = sum(int(s.failed or 0) for s in looked)
        rows.append(row)
    rows.sort(key=lambda r: r.created or "", reverse=True)
    return rows


def merged_whole(merged: Optional[MergeRecord], mine: Sequence[Any]) -> bool:
    """True when the chain's merge record ``merged`` (its root's, None before a merge) is
    newer than its last submitted batch of ``mine`` and holds no ``pending`` row: every
    batch had ended when it was merged."""
    if not _holds(merged) or not mine:
        return False
    newest = max((e.submitted_at for e in mine if e.submitted_at), default=None)
    if float(merged.merged_at_unix or 0) < (newest or 0):
        return False
    return not (merged.failed_by_type or {}).get("pending")


def _usd(x: Optional[float], lower_bound: bool = False) -> str:
    if x is None:
        return "-"
    text = f"${x:,.2f}" if x >= 1 else f"${x:,.4f}"
    return f"{text}+" if lower_bound else text


def row_cells(r: RunRow) -> tuple[str, ...]:
    """The cells of one chain's line of ``mmirage runs`` (and of the dashboard's runs
    table): run id, created, links, state, batches, requests, failures, est. cost,
    actual cost."""
    return (
        r.run_id,
        (r.created or "-")[:19].replace("T", " "),
        ", ".join(r.links) if r.links else "-",
        r.state + (" (cancelled)" if r.cancelled else ""),
        f"{r.batches:,}",
        f"{r.requests:,}",
        "-" if r.failures is None else f"{r.failures:,}",
        _usd(r.estimated_usd, r.estimate_is_lower_bound),
        _usd(r.actual_usd),
    )


#: the columns of :func:`row_cells`
COLUMNS = (
    "run id",
    "created",
    "links",
    "state",
    "batches",
    "requests",
    "failures",
    "est. cost",
    "actual cost",
)


def format_table(rows: Sequence[RunRow]) -> list[str]:
    """Plain aligned lines: a header, one line per chain, and the ledger's total."""
    header = COLUMNS
    table = [header, *(row_cells(r) for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    right = {4, 5, 6, 7, 8}
    lines = [
        "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))
        ).rstrip()
        for row in table
    ]
    actual = [r.actual_usd for r in rows if r.actual_usd is not None]
    estimated = [r.estimated_usd for r in rows if r.estimated_usd is not None]
    spent = _usd(sum(actual) if actual else None)
    guess = _usd(
        sum(estimated) if estimated else None, any(r.estimate_is_lower_bound for r in rows)
    )
    lines.append(
        f"{len(rows)} run(s); actual cost of the merged runs {spent}; estimated {guess} "
        "('+': input tokens only, some requests set no output limit)"
    )
    return lines
