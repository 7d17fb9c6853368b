"""The JSON documents the dashboard's views answer with (``mmirage ui``'s ``/api/...``
routes, :mod:`mmirage_beam.ui.data`), as ``TypedDict``: the page's ``static/app.js``
reads these keys. Money is USD, times are ISO 8601 UTC, ages are seconds."""

from __future__ import annotations

from typing import Any, Optional, TypedDict

__all__ = [
    "BatchJson",
    "FailedRowJson",
    "FailuresView",
    "RunJson",
    "RunView",
    "RunsView",
    "SpendRow",
    "SpendView",
]


class RunJson(TypedDict):
    """One chain of runs as the runs list shows it (``run.listing.RunRow`` and its
    source); ``cells`` are the texts ``mmirage runs`` prints."""

    config: int
    config_path: str
    provider: str
    model: Optional[str]
    run_id: str
    links: list[str]
    state: str
    cancelled: bool
    created: Optional[str]
    ended: Optional[str]
    batches: int
    by_status: dict[str, int]
    requests: int
    done: Optional[int]
    failures: Optional[int]
    estimated_tokens: Optional[dict[str, Optional[int]]]
    used_tokens: Optional[dict[str, int]]
    estimated_usd: Optional[float]
    estimate_is_lower_bound: bool
    actual_usd: Optional[float]
    cells: list[str]


class RunsView(TypedDict):
    """Every chain of runs of every source, the column titles, and the notices (a
    source whose batches could not be looked up)."""

    columns: list[str]
    runs: list[RunJson]
    notices: list[str]


class BatchJson(TypedDict):
    """One batch of a chain, its status as ``mmirage check`` reports it."""

    run_id: str
    provider: str
    provider_batch_id: str
    chunk_id: str
    output_name: str
    status: str
    provider_status: Optional[str]
    done: Optional[int]
    failed: Optional[int]
    total: Optional[int]
    age_secs: Optional[float]
    detail: str
    submitted_at: Optional[str]


class RunView(TypedDict):
    """One chain of runs: its batches, whether one is in flight, its last merge's
    failures (``{merged, merged_at?, output_path?, errors_path?, by_type?,
    retryable?}``) and the webhook events just sent."""

    config: int
    config_path: str
    provider: str
    model: Optional[str]
    run_id: str
    runs: list[str]
    batches: list[BatchJson]
    in_flight: bool
    failures: dict[str, Any]
    notified: list[Any]


class FailedRowJson(TypedDict):
    """One failed row of the errors file, with the merged file's row (None when the
    merged file is not JSONL or is gone)."""

    source_index: Optional[int]
    output_name: Optional[str]
    custom_id: Optional[str]
    error_type: Optional[str]
    message: Optional[str]
    status_code: Optional[int]
    retryable: Optional[bool]
    row: Optional[dict[str, Any]]


class FailuresView(TypedDict):
    """A chain's failed rows at its last merge, the first ones of ``error_type``."""

    run_id: str
    errors_path: str
    error_type: Optional[str]
    total: int
    rows: list[FailedRowJson]


class SpendRow(TypedDict):
    """The cost of one chain of runs in the ledger; ``day``: its creation day (UTC,
    ``YYYY-MM-DD``)."""

    config: int
    run_id: str
    provider: str
    model: Optional[str]
    state: str
    estimated_usd: Optional[float]
    estimate_is_lower_bound: bool
    actual_usd: Optional[float]
    estimated_tokens: Optional[dict[str, Optional[int]]]
    used_tokens: Optional[dict[str, int]]
    day: str


class SpendView(TypedDict):
    """The cost ledger: the runs, the sums by day and by provider (``{day | provider,
    estimated_usd, actual_usd, runs}``) and the total (``{estimated_usd, actual_usd,
    runs}``)."""

    runs: list[SpendRow]
    by_day: list[dict[str, Any]]
    by_provider: list[dict[str, Any]]
    total: dict[str, float]
