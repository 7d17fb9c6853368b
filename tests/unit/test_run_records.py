"""The typed run records (``mmirage_beam/run/records.py``) and ``RunStore``: byte for byte
what the earlier release wrote (golden files in ``data/run_files/``, see its README),
and round trips of typical and edge values."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
from types import SimpleNamespace

import pytest

from mmirage_beam.records import BatchRequest, Chunk
from mmirage_beam.run import fingerprint, ledger, receipts
from mmirage_beam.run.records import (
    CancelRecord,
    LeaseRecord,
    LedgerEntry,
    MergeRecord,
    Receipt,
    RunRecord,
    RunState,
    SubmittedMarker,
)
from mmirage_beam.run.store import RunStore, run_records

DATA = os.path.join(os.path.dirname(__file__), "data", "run_files")

SINGLE = {
    "receipt_part.json": Receipt,
    "receipt_dry_run.json": Receipt,
    "intent.json": Receipt,
    "run_record.started.json": RunRecord,
    "run_record.finished.json": RunRecord,
    "merge_record.json": MergeRecord,
    "cancel_record.json": CancelRecord,
    "lease.json": LeaseRecord,
    "submitted_marker.json": SubmittedMarker,
}


def _golden(name: str) -> bytes:
    with open(os.path.join(DATA, name), "rb") as f:
        return f.read()


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_golden_file_read_and_written_back_byte_for_byte(name):
    data = _golden(name)
    record = SINGLE[name].from_json(json.loads(data))
    assert record.encode() == data
    assert record.to_json() == json.loads(data)


def test_golden_receipt_file_lines_byte_for_byte():
    data = _golden("receipts.text.jsonl")
    lines = data.split(b"\n")[:-1]
    assert len(lines) == 6
    out = b"".join(Receipt.from_json(json.loads(line)).encode() for line in lines)
    assert out == data
    # receipt_line (the writer the submit stages use) agrees with the records
    assert b"".join(receipts.receipt_line(json.loads(line)) for line in lines) == data


def test_golden_receipts_typed_fields():
    rows = [json.loads(x) for x in _golden("receipts.text.jsonl").split(b"\n")[:-1]]
    by_chunk = {r["chunk_id"]: Receipt.from_json(r) for r in rows}
    plain = by_chunk["answer-chunk-000003"]
    assert plain.provider_batch_id == "batch_abc" and plain.attempt == 1
    assert plain.custom_id_to_source_index == {f"answer-text-{i}": i for i in range(3)}
    assert plain.extra == {} and plain.parent_run_id is None
    assert by_chunk["b-chunk-000002"].input_tokens_estimate == 1234
    assert by_chunk["c-chunk-000002"].adoption == {
        "method": "created_at+request_count",
        "confirmed": False,
    }
    assert not by_chunk["c-chunk-000002"].adoption_rejected
    resubmit = next(r for r in by_chunk.values() if r.parent_run_id)
    assert resubmit.parent_run_id == "r20261205-parent" and resubmit.attempt == 2
    reused = next(r for r in by_chunk.values() if r.reused_from)
    assert reused.status == "reused" and reused.reused_custom_ids == {"e-text-1": "e-text-1"}
    cancel = CancelRecord.from_json(json.loads(_golden("cancel_record.json")))
    assert all(isinstance(b, LedgerEntry) for b in cancel.batches)
    assert cancel.asked() == {("openai", "batch_abc")}
    merge = MergeRecord.from_json(json.loads(_golden("merge_record.json")))
    assert merge.failures == 2 and merge.retryable == 1
    finished = RunRecord.from_json(json.loads(_golden("run_record.finished.json")))
    assert finished.state() == RunState("r20261206-golden", "finished", 9)
    started = RunRecord.from_json(json.loads(_golden("run_record.started.json")))
    assert started.state().to_json() == {"run_id": "r20261206-golden", "state": "submitting"}


def _chunk() -> Chunk:
    reqs = tuple(
        BatchRequest(f"o-text-{i}", i, "o", "text", b'{"custom_id":"o-text-%d"}' % i, 30)
        for i in range(2)
    )
    return Chunk("o-chunk-000001", "o", "text", reqs, 60, False, "end")


@pytest.mark.parametrize("parent", [None, "", "r-parent"])
@pytest.mark.parametrize("model", [None, "", "mödel"])
def test_receipt_for_chunk_is_make_receipt(parent, model):
    when = _dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=_dt.timezone.utc)
    kwargs = dict(
        provider="openai",
        chunk=_chunk(),
        provider_batch_id="b1",
        status="submitted",
        run_id="r",
        output_type="text",
        model=model,
        submitted_at=when,
        attempt=3,
        parent_run_id=parent,
    )
    as_dict = receipts.make_receipt(**kwargs)
    record = Receipt.for_chunk(**kwargs)
    assert record.to_json() == as_dict
    assert list(record.to_json()) == list(as_dict)
    assert record.encode() == receipts.receipt_line(as_dict)
    assert Receipt.from_json(as_dict).encode() == record.encode()


def test_receipt_of_the_original_tool_kept_as_read():
    # no run_id, output_name, modality, attempt; a digit-string index; unknown keys
    line = {
        "provider": "openai",
        "chunk_id": "x-chunk-000001",
        "custom_id_to_source_index": {"x-text-1": "1"},
        "provider_batch_id": "b",
        "status": "submitted",
        "weird": [1, "ü"],
        "flush_reason": None,
    }
    record = Receipt.from_json(line)
    assert record.run_id is None and record.attempt is None and record.flush_reason is None
    assert record.custom_id_to_source_index == {"x-text-1": "1"}
    assert record.extra == {"weird": [1, "ü"]}
    assert record.to_json() == line and list(record.to_json()) == list(line)
    assert record.encode() == receipts.receipt_line(line)


def test_changed_and_dropped_keys_keep_the_order_read():
    line = json.loads(_golden("intent.json"))
    intent = Receipt.from_json(line)
    receipt = dataclasses.replace(intent, provider_batch_id="batch_new").without("intent_at_utc")
    expected = dict(line, provider_batch_id="batch_new")
    del expected["intent_at_utc"]
    assert receipt.encode() == receipts.receipt_line(expected)
    adopted = dataclasses.replace(receipt, adoption={"method": "m", "confirmed": True})
    assert list(adopted.to_json())[-1] == "adoption"  # appended, as a dict key would be


def test_unicode_and_floats_round_trip():
    record = RunRecord(
        run_id="r", fingerprint="f", started_at="t", finished=True, estimate={"ü:o": 1}
    )
    assert RunRecord.from_json(json.loads(record.encode())).encode() == record.encode()
    assert b"\\u00fc" in record.encode()  # the run record is ASCII, as json.dumps' default
    receipt = Receipt(provider="p", chunk_id="c", model_params_snapshot={"model": "ü"})
    assert "ü".encode() in receipt.encode()  # receipts keep UTF-8 (ensure_ascii=False)
    merge = MergeRecord(run_id="r", runs=["r"], merged_at_unix=1796561676.8711746)
    assert MergeRecord.from_json(json.loads(merge.encode())) == merge
    assert json.loads(merge.encode())["merged_at_unix"] == 1796561676.8711746


def test_empty_and_wrong_objects():
    assert LeaseRecord.from_json({}).to_json() == {}
    assert LeaseRecord.from_json({}).encode() == b"{}\n"
    with pytest.raises(TypeError):
        Receipt.from_json(["not", "an", "object"])  # type: ignore[arg-type]
    odd = CancelRecord.from_json({"run_id": "r", "batches": [{"provider": "p"}, 7]})
    assert odd.batches == (LedgerEntry(provider="p"), 7)
    assert odd.to_json() == {"run_id": "r", "batches": [{"provider": "p"}, 7]}
    assert odd.asked() == {("p", None)}


def test_fresh_records_write_every_always_key():
    assert RunRecord(run_id="r", fingerprint="f", started_at="t", finished=False).to_json() == {
        "run_id": "r",
        "fingerprint": "f",
        "started_at": "t",
        "finished": False,
        "rows_read": None,
        "requests": None,
        "chunks_submitted": None,
    }
    assert RunState("r", "stopped").to_json() == {"run_id": "r", "state": "stopped"}
    assert SubmittedMarker("r", 1, 2).encode() == b'{"run_id": "r", "attempt": 1, "receipts": 2}\n'


def test_run_store_writes_what_the_module_functions_wrote(tmp_path):
    base = str(tmp_path / "batch_metadata")
    store = RunStore(base, "r1")
    assert store.read_run_record() is None and store.read_run_state() is None
    written = store.write_run_record(
        fingerprint.new_run_record("r1", "fp", started_at="t0", limit=5)
    )
    as_dict = written.to_json()
    with open(store.layout.run_record, "rb") as f:
        first = f.read()
    assert first == (json.dumps(as_dict) + "\n").encode()
    record = store.read_run_record()
    assert record is not None and record.limit == 5 and record.to_json() == as_dict
    store.write_run_record(record)
    with open(store.layout.run_record, "rb") as f:
        assert f.read() == first
    assert store.read_run_state() == RunState("r1", "submitting")
    assert [r.run_id for r in run_records(base)] == ["r1"]

    merged = ledger.write_merge_record(base, ["r1"], "out.jsonl", {"rows_written": 2}, [])
    assert store.read_merge_record() == merged

    assert store.read_cancel_record() is None
    entry = LedgerEntry("openai", "b1", "r1", "in_progress", "cancelling", None)
    store.write_cancel_record(CancelRecord("r1", "t1", "t1", (entry,)))
    assert ledger.read_cancel_record(base, "r1") == CancelRecord("r1", "t1", "t1", (entry,))

    receipt = Receipt.for_chunk(
        provider="openai",
        chunk=_chunk(),
        provider_batch_id="b1",
        status="submitted",
        run_id="r1",
        output_type="text",
        model="m",
    )
    path = store.write_receipt_part(receipt)
    assert receipts.read_receipt_part(path) == receipt.to_json()
    assert store.read_receipt_part("text", "o-chunk-000001") == receipt
    assert store.read_receipts() == [receipt] and list(store.iter_receipts()) == [receipt]
    assert store.consolidate() == {store.receipt_path("text"): 1}
    assert store.read_receipts("text") == [receipt]
    with open(store.receipt_path("text"), "rb") as f:
        assert f.read() == receipt.encode()

    assert store.read_lease() is None and not store.lease_held()
    with store.acquire_lease() as held:
        assert store.lease_held()
        found = store.read_lease()
        assert found is not None and found == held.record and found.run_id == "r1"
    assert store.read_lease() is None

    assert not store.submission_complete()
    assert store.mark_submitted(3, 2) == SubmittedMarker("r1", 2, 3)
    assert store.submission_complete()
    assert store.read_submitted_marker() == SubmittedMarker("r1", 2, 3)
    assert not store.stop_requested()
    assert store.pending_intents() == []
    assert store.staging_dir == base + ".staged.r1"


def test_is_stale_takes_the_record():
    from mmirage_beam.run.lease import describe_holder, is_stale

    lease = {"host": "elsewhere", "pid": 1, "refreshed_at": 100.0, "started_at": 50.0}
    record = LeaseRecord.from_json(lease)
    for now in (150.0, 500.0):
        assert is_stale(record, now, 90.0) == is_stale(lease, now, 90.0)
    assert describe_holder(record, 104.0) == describe_holder(lease, 104.0)


def test_cancel_batches_writes_ledger_entries(tmp_path):
    from mmirage_beam.run.cancel import CancelPlan, cancel_batches

    base = str(tmp_path / "m")

    def status(batch):
        rec = SimpleNamespace(provider="p", provider_batch_id=batch, run_id="r", request_count=1)
        return SimpleNamespace(
            receipt=rec, status="in_progress", progress=SimpleNamespace(provider_status="run")
        )

    class Checker:
        def cancel_one(self, receipt):
            return SimpleNamespace(
                progress=SimpleNamespace(provider_status="cancelling"), error=None
            )

    done = cancel_batches(base, CancelPlan(["r"], [status("b1")], [], 0), Checker())
    assert done == [LedgerEntry("p", "b1", "r", "run", "cancelling", None)]
    first = RunStore(base, "r").read_cancel_record()
    plan = CancelPlan(["r"], [status("b2")], [], 0, {"r": first})
    cancel_batches(base, plan, Checker())
    again = RunStore(base, "r").read_cancel_record()
    assert again.cancelled_at == first.cancelled_at
    assert [b.provider_batch_id for b in again.batches] == ["b1", "b2"]


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_any_key_order_unknown_and_missing_keys_survive(name):
    import random

    cls = SINGLE[name]
    original = json.loads(_golden(name))
    rng = random.Random(name)
    for _ in range(5):
        keys = list(original)
        rng.shuffle(keys)
        obj = {k: original[k] for k in keys[1:]}  # one key missing
        obj["zz_unknown"] = {"n": [1, None, "\u2028ü"]}
        obj["attempt_as_text"] = "1"
        record = cls.from_json(obj)
        assert record.to_json() == obj and list(record.to_json()) == list(obj)
        assert record.encode() == (json.dumps(obj, **cls._DUMPS) + "\n").encode()


def test_receipt_values_kept_as_read():
    line = dict(json.loads(_golden("receipt_part.json")), attempt="2", total_bytes=1.5)
    line["model_params_snapshot"] = {"model": "line\u2028sep"}
    record = Receipt.from_json(line)
    assert record.attempt == "2" and record.total_bytes == 1.5
    assert record.encode() == receipts.receipt_line(line)
    assert "\u2028".encode() in record.encode()  # written raw, as receipt_line does


def test_a_held_cycle_lease_is_named_as_the_cycle_of_its_run(tmp_path):
    """Issue 38: a ``run --wait`` whose cycle another process held said "run
    cycle-<id> is in use"; it names the cycle of the run."""
    import pytest

    from mmirage_beam.run.lease import RunLocked, acquire, cycle_lease

    base = str(tmp_path / "batch_metadata")
    held = acquire(base, cycle_lease("r1"))
    try:
        with pytest.raises(RunLocked) as info:
            acquire(base, cycle_lease("r1"))
    finally:
        held.release()
    assert str(info.value).startswith("the run --wait cycle of run r1 is in use by another")
    assert "run cycle-r1" not in str(info.value)
