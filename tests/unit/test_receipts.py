"""Receipts: MMIRAGE-compatible request_hash, durable parts and their consolidation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmirage_beam.io.fs import write_durably
from mmirage_beam.run.layout import parts_dir, receipts_base
from mmirage_beam.run.receipts import consolidate, read_receipts, receipt_path, request_hash
from tests.conftest import TEST_DATA

ORIGINAL = TEST_DATA / "mmirage_original"


def test_request_hash_matches_the_original_tool():
    # The original tool's first chunk hashes as json.dumps(requests, sort_keys=True,
    # separators=(",", ":")); its later chunks do not reproduce from their exported
    # requests, so merge verifies only receipts that carry a run_id (ours).
    exported = [json.loads(x) for x in (ORIGINAL / "prompts.3aa41d.jsonl").read_text().splitlines()]
    receipts = [
        json.loads(x)
        for x in (ORIGINAL / "batch_metadata.dry-run.text.3aa41d.jsonl").read_text().splitlines()
    ]
    for r in receipts[:1]:
        batch = f"text-{r['chunk_id']}"
        lines = [
            json.dumps(e["request"], ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
            for e in exported
            if e["batch_id"] == batch
        ]
        assert len(lines) == r["submitted_request_count"]
        assert request_hash(lines) == r["request_hash"]


def test_names():
    assert receipts_base("out/meta.jsonl") == "out/meta"
    assert receipts_base("out/meta") == "out/meta"
    assert receipts_base("", "st") == "st/batch_metadata"
    assert receipt_path("b", "text", "r1") == "b.text.r1.jsonl"
    assert receipt_path("b", "multimodal", "r1", dry_run=True) == "b.dry-run.multimodal.r1.jsonl"


def test_parts_are_readable_before_and_after_consolidation(tmp_path):
    rfile = str(tmp_path / "m.text.r1.jsonl")
    for i in (2, 1):
        r = {"chunk_id": f"a-chunk-{i:06d}", "provider_batch_id": f"b{i}"}
        write_durably(f"{parts_dir(rfile)}/{r['chunk_id']}.json", (json.dumps(r) + "\n").encode())
    assert [r["chunk_id"] for r in read_receipts(rfile)] == ["a-chunk-000001", "a-chunk-000002"]
    assert not list(tmp_path.glob("**/*.tmp-*"))
    assert consolidate(rfile) == 2
    assert not (tmp_path / "m.text.r1.jsonl.parts").exists()
    assert [r["provider_batch_id"] for r in read_receipts(rfile)] == ["b1", "b2"]


@pytest.mark.parametrize("where", ["local", "mem"])
def test_consolidation_keeps_lines_and_parts_win(tmp_path, where):
    """Existing lines and parts are merged in chunk_id order (a part wins for its
    chunk), on a local disk and on an object store (lines re-read by offset)."""
    from apache_beam.io.filesystems import FileSystems

    import mmirage_beam.run.receipts as receipts_mod
    from tests import memfs  # noqa: F401  (registers mem://)

    root = str(tmp_path) if where == "local" else f"mem://consolidate-{tmp_path.name}"
    rfile = f"{root}/m.text.r1.jsonl"
    old = [
        {"chunk_id": "a-chunk-000003", "provider_batch_id": "old3", "note": "x\u2028y"},
        {"chunk_id": "a-chunk-000001", "provider_batch_id": "old1"},
    ]
    with FileSystems.create(rfile) as f:
        f.write(b"".join(receipts_mod.receipt_line(r) for r in old) + b"\n")
    for i in (2, 3):
        r = {"chunk_id": f"a-chunk-{i:06d}", "provider_batch_id": f"part{i}"}
        write_durably(f"{parts_dir(rfile)}/{r['chunk_id']}.json", (json.dumps(r) + "\n").encode())
    assert consolidate(rfile) == 3
    got = read_receipts(rfile)
    assert [r["provider_batch_id"] for r in got] == ["old1", "part2", "part3"]
    with FileSystems.open(rfile) as f:
        assert f.read().count(b"\n") == 3
    assert not FileSystems.match([f"{parts_dir(rfile)}/*"])[0].metadata_list


def test_check_and_merge_skip_a_withdrawn_adoption(tmp_path):
    """A receipt whose adoption was withdrawn names another chunk's batch: readers skip it
    (its requests were sent again under a later chunk)."""
    import json

    from mmirage_beam.run.discovery import collect_receipts

    ok = {
        "provider": "anthropic",
        "provider_batch_id": "msgbatch_a",
        "chunk_id": "c1",
        "run_id": "r1",
        "custom_id_to_source_index": {"a-text-0": 0},
        "status": "in_progress",
    }
    bad = dict(
        ok,
        provider_batch_id="msgbatch_b",
        chunk_id="c2",
        adoption={
            "method": "created_at+request_count",
            "confirmed": False,
            "rejected": "custom_ids differ",
        },
    )
    path = tmp_path / "batch_metadata.text.r1.jsonl"
    path.write_text(json.dumps(ok) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    found = collect_receipts(metadata_paths=[str(path)])
    assert [e.provider_batch_id for e in found.receipts] == ["msgbatch_a"]


def test_consolidation_deletes_the_temporary_files_of_a_write_that_died(tmp_path):
    """Issue 38: a crash between a durable write's temporary file and its rename left a
    ``.tmp-`` file beside the receipts (and kept the parts folder for ever); the next
    consolidation of the run deletes them, and keeps what the writes' targets hold."""
    from mmirage_beam.io.fs import write_durably
    from mmirage_beam.run.layout import part_path, parts_dir
    from mmirage_beam.run.receipts import consolidate, receipt_line, receipt_path

    rfile = receipt_path(str(tmp_path / "batch_metadata"), "text", "r1")
    receipt = {"chunk_id": "answer-chunk-000001", "provider_batch_id": "b1", "run_id": "r1"}
    write_durably(part_path(rfile, "answer-chunk-000001"), receipt_line(receipt))
    # what a write killed at its crash point "tmp_written" leaves, in both places
    (Path(parts_dir(rfile)) / "answer-chunk-000002.json.tmp-0123abcd").write_bytes(b"{")
    Path(f"{rfile}.tmp-4567ef01").write_bytes(b"half a receipt file")
    assert consolidate(rfile) == 1
    assert [p.name for p in tmp_path.iterdir()] == [Path(rfile).name]  # no .tmp-, no .parts
    assert json.loads(Path(rfile).read_text(encoding="utf-8"))["provider_batch_id"] == "b1"
