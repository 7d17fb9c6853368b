"""Batch lifecycle: a batch's status, timestamps and progress computed from the clock.

Nothing runs in the background: every read computes the phase from ``batch.created``,
``batch.delay_secs`` and a cancellation time (see "Lifecycle" in the package docstring).
Each provider's phases (its status names and timestamps) live with its fake
(``mmirage_beam/providers/<name>/fake_service.py``); this module holds what they share.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from mmirage_beam.testing.fake_provider.store import Batch

#: provider -> seconds after creation at which its batches start processing, as a
#: function of the delay (each provider's fake registers its own; 0 when it has none)
_PROCESSING_STARTS: dict[str, Callable[[float], float]] = {}


def register_processing_start(provider: str, start: Callable[[float], float]) -> None:
    """``provider``'s batches process their requests from ``start(delay_secs)`` seconds
    after their creation (e.g. after a validation phase) until two thirds of the delay."""
    _PROCESSING_STARTS[provider] = start


def processing_window(batch: Batch) -> tuple[float, float]:
    """(start, end) Unix seconds of the window in which requests are processed."""
    d = batch.delay_secs
    start = _PROCESSING_STARTS.get(batch.provider)
    return batch.created + (start(d) if start else 0), batch.created + 2 * d / 3


def processed(batch: Batch, at: float) -> int:
    """How many requests are done at time ``at`` (capped by a scripted stop)."""
    total = len(batch.items)
    start, end = processing_window(batch)
    if at >= end:
        done = total
    elif at <= start:
        done = 0
    else:
        done = int(total * (at - start) / (end - start))
    if batch.stop_after is not None:
        done = min(done, batch.stop_after)
    return done


def request_cancel(batch: Batch, now: float, ended: bool, refusal: Exception) -> None:
    """Ask to cancel ``batch`` at ``now`` (Unix seconds): raises ``refusal`` (the
    provider's error) when the batch has ``ended``; a repeated request keeps the first
    one's time, from which the cancel's phases run."""
    if ended:
        raise refusal
    if batch.cancel_requested_at is None:
        batch.cancel_requested_at = now


def final_processed(batch: Batch) -> int:
    """How many requests were processed once the batch has ended."""
    if batch.cancel_requested_at is not None:
        return processed(batch, batch.cancel_requested_at)
    return processed(batch, math.inf)


def split_processed(batch: Batch) -> tuple[list[Any], list[Any], bool]:
    """(items processed, items never run, whether the batch was cancelled) once it ended."""
    done = final_processed(batch)
    cancelled = batch.cancel_requested_at is not None or batch.stop_kind == "cancelled"
    return batch.items[:done], batch.items[done:], cancelled


def finish_once(
    batch: Batch, write_results: Callable[[Batch, list[Any], list[Any], bool], None]
) -> None:
    """Materialise an ended batch's results, once: the first call marks ``batch``
    finished and calls ``write_results(batch, processed, never_run, cancelled)`` with
    :func:`split_processed`'s ``Item`` lists; later calls do nothing."""
    if batch.finished:
        return
    batch.finished = True
    write_results(batch, *split_processed(batch))
