"""Batch lifecycle: a batch's status, timestamps and progress computed from the clock.

Nothing runs in the background: every read computes the phase from ``batch.created``,
``batch.delay_secs`` and a cancellation time (see "Lifecycle" in the package docstring).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from mmirage_beam.testing.fake_provider.store import Batch
from mmirage_beam.testing.fake_provider.wire import OPENAI

OPENAI_TERMINAL = ("completed", "failed", "expired", "cancelled")


def processing_window(batch: Batch) -> tuple[float, float]:
    """(start, end) Unix seconds of the window in which requests are processed."""
    d = batch.delay_secs
    if batch.provider == OPENAI:
        return batch.created + d / 3, batch.created + 2 * d / 3
    return batch.created, batch.created + 2 * d / 3


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


def final_processed(batch: Batch) -> int:
    """How many requests were processed once the batch has ended."""
    if batch.cancel_requested_at is not None:
        return processed(batch, batch.cancel_requested_at)
    return processed(batch, math.inf)


def is_terminal(batch: Batch, now: float) -> bool:
    """Whether the batch has reached a terminal status at ``now``."""
    if batch.provider == OPENAI:
        return openai_phase(batch, now)["status"] in OPENAI_TERMINAL
    return anthropic_phase(batch, now)["processing_status"] == "ended"


def openai_phase(batch: Batch, now: float) -> dict[str, Any]:
    """OpenAI ``status`` and the ``*_at`` timestamps (Unix seconds or None) at ``now``."""
    d, t0 = batch.delay_secs, batch.created
    v_end, ip_end, end = t0 + d / 3, t0 + 2 * d / 3, t0 + d
    out: dict[str, Any] = dict.fromkeys(
        (
            "in_progress_at",
            "finalizing_at",
            "completed_at",
            "failed_at",
            "expired_at",
            "cancelling_at",
            "cancelled_at",
        )
    )
    tc = batch.cancel_requested_at
    if tc is not None:
        out["in_progress_at"] = v_end if tc >= v_end and batch.errors is None else None
        out["finalizing_at"] = ip_end if tc >= ip_end and batch.errors is None else None
        out["cancelling_at"] = tc
        if now < tc + d / 3:
            out["status"] = "cancelling"
        else:
            out["status"] = "cancelled"
            out["cancelled_at"] = tc + d / 3
    elif now < v_end:
        out["status"] = "validating"
    elif batch.errors is not None:
        out["status"], out["failed_at"] = "failed", v_end
    else:
        out["in_progress_at"] = v_end
        if now < ip_end:
            out["status"] = "in_progress"
        elif batch.stop_kind == "cancelled":
            out["cancelling_at"] = ip_end
            if now < end:
                out["status"] = "cancelling"
            else:
                out["status"], out["cancelled_at"] = "cancelled", end
        elif batch.stop_kind == "overrun":  # Azure: an overrunning job is not expired
            out["status"] = "in_progress"
        elif batch.stop_kind == "expired":
            if now < end:
                out["status"] = "in_progress"
            else:
                out["status"], out["expired_at"] = "expired", end
        else:
            out["finalizing_at"] = ip_end
            if now < end:
                out["status"] = "finalizing"
            else:
                out["status"], out["completed_at"] = "completed", end
    return out


def anthropic_phase(batch: Batch, now: float) -> dict[str, Any]:
    """Anthropic ``processing_status``, ``cancel_initiated_at`` and ``ended_at`` at ``now``."""
    d, t0 = batch.delay_secs, batch.created
    end = t0 + d
    out: dict[str, Any] = {"cancel_initiated_at": None, "ended_at": None}
    tc = batch.cancel_requested_at
    if tc is not None:
        out["cancel_initiated_at"] = tc
        end = tc + d / 3
        status = "canceling"
    elif batch.stop_kind == "cancelled":
        initiated = t0 + 2 * d / 3
        out["cancel_initiated_at"] = initiated if now >= initiated else None
        status = "canceling" if now >= initiated else "in_progress"
    else:
        status = "in_progress"
    if now >= end:
        status, out["ended_at"] = "ended", end
    out["processing_status"] = status
    return out


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
