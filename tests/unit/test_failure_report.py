"""What a submit job that failed or was stopped says (``run.reports.failure_report``)."""

from __future__ import annotations

import json
import types

from mmirage_beam.run.receipts import receipt_path
from mmirage_beam.run.reports import failure_report


def _one_receipt(tmp_path) -> types.SimpleNamespace:
    base = str(tmp_path / "batch_metadata")
    with open(receipt_path(base, "text", "r1"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"chunk_id": "text-00000", "batch_id": "b1"}) + "\n")
    return types.SimpleNamespace(receipts_base=base)


def test_a_stopped_run_is_not_called_a_failure(tmp_path) -> None:
    """Issue 38: a Ctrl-C said "Receipts of the batches accepted before the failure"."""
    plan = _one_receipt(tmp_path)
    text = failure_report(plan, "r1", KeyboardInterrupt(), "mmirage run --run-id r1", True)
    assert text.startswith("mmirage run r1: stopped (Ctrl-C or SIGTERM)")
    assert "accepted before it stopped: " in text
    assert "failure" not in text


def test_a_failed_run_names_the_failure(tmp_path) -> None:
    plan = _one_receipt(tmp_path)
    text = failure_report(plan, "r1", RuntimeError("worker died"), "mmirage run --run-id r1")
    assert "the pipeline failed: worker died" in text
    assert "accepted before the failure: " in text
