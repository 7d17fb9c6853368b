"""Writes the golden run files of this folder with the writers of the current release.

Run once from the repository root (``python tests/unit/data/run_files/make_golden.py``);
the README says which commit wrote the committed files. ``test_run_records.py`` reads
them through the typed records and writes them back byte for byte.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import sys
import tempfile
from types import SimpleNamespace

from mmirage_beam.io.fs import write_durably
from mmirage_beam.records import BatchRequest, Chunk, ChunkRef
from mmirage_beam.run import cancel, fingerprint, lease, ledger, receipts
from mmirage_beam.run.layout import RunLayout
from mmirage_beam.run.receipts import reused_receipt
from mmirage_beam.run.staging import RequestMeta

OUT = os.path.dirname(os.path.abspath(__file__))
WHEN = _dt.datetime(2026, 12, 6, 12, 0, 0, 123456, tzinfo=_dt.timezone.utc)


def _chunk(n: int, output: str = "answer", modality: str = "text") -> Chunk:
    reqs = tuple(
        BatchRequest(
            f"{output}-{modality}-{i}",
            i,
            output,
            modality,
            b'{"custom_id":"%s-%s-%d","body":{"q":"caf\\u00e9 %d"}}'
            % (output.encode(), modality.encode(), i, i),
            40,
        )
        for i in range(n)
    )
    return Chunk(f"{output}-chunk-{n:06d}", output, modality, reqs, 40 * n, False, "size")


def main() -> None:
    tmp = tempfile.mkdtemp()
    base = os.path.join(tmp, "batch_metadata")
    run = "r20261206-golden"
    layout = RunLayout(base, run)
    text = receipts.receipt_path(base, "text", run)
    common = dict(provider="openai", run_id=run, output_type="text", submitted_at=WHEN)
    plain = receipts.make_receipt(
        chunk=_chunk(3),
        provider_batch_id="batch_abc",
        status="submitted",
        model="gpt-4o-mini",
        **common,
    )
    resubmit = receipts.make_receipt(
        chunk=_chunk(1, "naïve_output"),
        provider_batch_id="batch_def",
        status="submitted",
        model="modèle-ü",
        attempt=2,
        parent_run_id="r20261205-parent",
        **common,
    )
    budget = receipts.make_receipt(
        chunk=_chunk(2, "b"),
        provider_batch_id="batch_ghi",
        status="submitted",
        model=None,
        **common,
    )
    budget["input_tokens_estimate"] = 1234
    adopted = receipts.make_receipt(
        chunk=_chunk(2, "c"),
        provider_batch_id="batch_jkl",
        status="in_progress",
        model="m",
        **common,
    )
    adopted["adoption"] = {"method": "created_at+request_count", "confirmed": False}
    ref = ChunkRef("d-chunk-000001", "d", "text", "/staged/x.jsonl", 2, 99, "f" * 64, True, "end")
    metas = [
        RequestMeta("d-text-7", 7, 50, "0123456789abcdef"),
        RequestMeta("d-text-8", 8, 49, "fedcba9876543210"),
    ]
    staged = receipts.make_receipt(
        chunk=ref,
        provider_batch_id="batch_mno",
        status="submitted",
        model="m",
        metas=metas,
        **common,
    )
    reused = reused_receipt(
        provider="openai",
        run_id=run,
        attempt=1,
        output_name="e",
        output_type="text",
        modality="text",
        model="m",
        reused_from="r20261201-old",
        provider_batch_id="batch/old:1",
        entries=[("e-text-1", 1, "e-text-1", "00112233aabbccdd", 33)],
    )
    for r in (plain, resubmit, budget, adopted, staged, reused):
        write_durably(layout.part("text", r["chunk_id"]), receipts.receipt_line(r))
    receipts.consolidate(text)  # the receipt file, written by consolidation
    shutil.copy(text, os.path.join(OUT, "receipts.text.jsonl"))
    # one part and one intent, as SubmitChunks writes them
    part = dict(plain, chunk_id="answer-chunk-000009")
    write_durably(os.path.join(OUT, "receipt_part.json"), receipts.receipt_line(part))
    intent = dict(budget, chunk_id="b-chunk-000010")
    intent["intent_at_utc"] = intent["submitted_at_utc"]
    write_durably(os.path.join(OUT, "intent.json"), receipts.receipt_line(intent))
    dry = dict(plain, provider_batch_id="dry-run-text-answer-chunk-000003", status="dry_run")
    write_durably(os.path.join(OUT, "receipt_dry_run.json"), receipts.receipt_line(dry))

    # run records: started, and finished with an estimate and a limit
    fingerprint.write_run_record(base, run, "a" * 64, started_at=WHEN.isoformat())
    shutil.copy(layout.run_record, os.path.join(OUT, "run_record.started.json"))
    fingerprint.write_run_record(
        base,
        run,
        "a" * 64,
        started_at=WHEN.isoformat(),
        finished=True,
        rows_read=10,
        requests=9,
        chunks_submitted=6,
        estimate={"input_tokens:answer": 100, "max_output_tokens:answer": 50},
        limit=10,
    )
    shutil.copy(layout.run_record, os.path.join(OUT, "run_record.finished.json"))

    # merge record
    ledger.write_merge_record(
        base,
        [run, "r20261207-child"],
        "/out/merged.jsonl",
        {"rows_written": 9, "outputs_succeeded": 8, "used_input_tokens:answer": 70},
        [
            {"error_type": "rate_limited", "source_index": 3, "retryable": True},
            {"error_type": "bad_answer", "source_index": 4, "retryable": False},
            {"error_type": "unknown_custom_id", "source_index": None},
        ],
    )
    shutil.copy(layout.merge_record, os.path.join(OUT, "merge_record.json"))

    # cancel record, through cancel_batches with a fake checker
    def status(batch: str, provider_status: str) -> SimpleNamespace:
        rec = SimpleNamespace(
            provider="openai", provider_batch_id=batch, run_id=run, request_count=2
        )
        return SimpleNamespace(
            receipt=rec,
            status="in_progress",
            progress=SimpleNamespace(provider_status=provider_status),
        )

    class Checker:
        def cancel_one(self, receipt):  # noqa: ANN001
            if receipt.provider_batch_id == "batch_err":
                return SimpleNamespace(progress=None, error="HTTP 500: nö")
            return SimpleNamespace(
                progress=SimpleNamespace(provider_status="cancelling"), error=None
            )

    plan = cancel.CancelPlan(
        runs=[run],
        to_cancel=[status("batch_abc", "in_progress"), status("batch_err", "validating")],
        already=[],
        ended=0,
        records={},
    )
    cancel.cancel_batches(base, plan, Checker())
    shutil.copy(layout.cancel_record, os.path.join(OUT, "cancel_record.json"))

    # lease, as acquire writes it
    held = lease.acquire(base, run)
    shutil.copy(layout.lease, os.path.join(OUT, "lease.json"))
    held.release()

    # submitted marker
    receipts.mark_submitted(6, base, run, 2)
    shutil.copy(layout.submitted_marker, os.path.join(OUT, "submitted_marker.json"))
    shutil.rmtree(tmp)
    print("written to", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
