"""The dry run's fast paths give exactly what the general code gives: field lookups
against JMESPath, receipt maps against the metadata stream, consolidated parts against
parse-and-encode."""

from __future__ import annotations

import json

import jmespath
import pytest

from mmirage_beam.run.layout import part_path
from mmirage_beam.run.receipts import consolidate, receipt_line
from mmirage_beam.run.staging import (
    RequestMeta,
    StagedChunkWriter,
    iter_meta,
    meta_path,
    receipt_maps,
)
from mmirage_beam.transforms.extract import compile_key

ROWS = [
    {"id": 1, "question": "q", "meta": {"source": "s", "n": None, "l": [1, 2]}},
    {"id": None, "meta": "not a dict"},
    {"meta": None},
    {"a b": {"c": "spaced"}, "meta": {"source": {"deep": 0}}},
    {},
    {"meta": {"source": ""}},
]
KEYS = [
    "id",
    "question",
    "meta.source",
    "meta.source.deep",
    "meta.n",
    "meta.l",
    '"a b".c',
    "missing.x",
    # not fields only: JMESPath itself
    "meta.l[0]",
    "meta.source || id",
    "`7`",
]


@pytest.mark.parametrize("key", KEYS)
def test_compile_key_is_jmespath(key: str) -> None:
    lookup = compile_key(key)
    for row in ROWS + [["a", "list"], "a string", 3, None]:
        assert lookup(row) == jmespath.search(key, row), (key, row)
    if "[" in key or "|" in key or "`" in key:
        assert lookup == jmespath.compile(key).search


def test_compile_key_refuses_what_jmespath_refuses() -> None:
    with pytest.raises(jmespath.exceptions.ParseError):
        compile_key("foo-bar")


def test_receipt_maps_equal_the_metadata_stream(tmp_path) -> None:
    writer = StagedChunkWriter(str(tmp_path / "staged.jsonl"))
    # enough requests for several blocks of metadata lines, ids needing no escape
    n = 40_000
    for i in range(n):
        line = json.dumps({"custom_id": f"out-text-{i}", "body": {"x": "é" * (i % 3)}})
        writer.write(f"out-text-{i}", i * 3, (line + "\n").encode(), len(line) + 1)
    writer.close()
    index, hashes = receipt_maps(writer.path)
    # the metadata file read the plain way, a line at a time
    with open(meta_path(writer.path), "rb") as f:
        rows = [json.loads(line) for line in f]
    assert list(index.items()) == [(r[0], r[1]) for r in rows]
    assert list(hashes.items()) == [(r[0], r[3]) for r in rows]
    assert len(index) == n
    # ranges inside a block, across blocks (about 17,000 lines each), open-ended, empty
    for start, end in ((0, 10), (5, 17_500), (16_000, 39_000), (39_990, None), (7, 7), (0, None)):
        want = [RequestMeta(r[0], r[1], r[2], r[3]) for r in rows[start:end]]
        assert list(iter_meta(writer.path, start, end)) == want, (start, end)


def test_consolidate_copies_parts_byte_for_byte(tmp_path) -> None:
    rfile = str(tmp_path / "meta.text.r1.jsonl")
    receipts = [
        {"chunk_id": f"out-chunk-{i:06d}", "status": "dry_run", "note": "ünï\u2028code"}
        for i in (3, 1, 2)
    ]
    (tmp_path / "meta.text.r1.jsonl.parts").mkdir()
    for r in receipts:
        with open(part_path(rfile, r["chunk_id"]), "wb") as f:
            f.write(receipt_line(r))
    # an earlier attempt's line, written by another encoder: encoded again, as before
    with open(rfile, "w", encoding="utf-8") as f:
        f.write(json.dumps({"chunk_id": "out-chunk-000000", "note": "é"}) + "\n")
    assert consolidate(rfile) == 4
    with open(rfile, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    want = [receipt_line({"chunk_id": "out-chunk-000000", "note": "é"})] + [
        receipt_line(r) for r in sorted(receipts, key=lambda r: r["chunk_id"])
    ]
    assert lines == want


def test_a_dry_run_receipts_one_chunk_at_a_time() -> None:
    """A dry run has no provider call to overlap; four receipts built at once cost the
    200,000-row dry run 67 MiB of peak RSS (docs/benchmarks.md)."""
    from mmirage_beam.config.loader import load_config
    from mmirage_beam.providers.base import BatchAdapterRegistry
    from mmirage_beam.settings import SubmitSettings
    from mmirage_beam.transforms.submit import _SubmitChunkFn
    from tests.conftest import REPO

    cfg = load_config(REPO / "configs" / "gsm8k_openai.yaml")
    adapter_cls = BatchAdapterRegistry.get(cfg.processor.provider)
    for export, want in (("out.jsonl", 1), (None, 4)):
        settings = SubmitSettings("r1", export_prompts=export)
        fn = _SubmitChunkFn(adapter_cls, cfg.processor, settings, "/tmp/meta", {}, 4)
        assert fn._concurrency == want


def test_fewer_young_collections_while_the_job_runs() -> None:
    import gc

    from mmirage_beam.launch.jobs import RUN_GC_THRESHOLD, fewer_young_collections

    before = gc.get_threshold()
    with fewer_young_collections():
        inside = gc.get_threshold()
        assert inside[0] == max(before[0], RUN_GC_THRESHOLD)
        assert inside[1:] == before[1:]
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), fewer_young_collections(50_000):
        raise RuntimeError("the job failed")
    assert gc.get_threshold() == before


def test_the_job_line_says_what_the_run_does() -> None:
    """A Dataflow ``--dry_run`` (the job translated only) is no export; both send nothing."""
    from mmirage_beam.config.loader import load_config
    from mmirage_beam.run.submit_flags import SubmitFlags
    from mmirage_beam.run.submit_plans import SubmitStart, job_line
    from tests.conftest import REPO

    cfg = load_config(REPO / "configs" / "gsm8k_openai.yaml")

    def line(translate_only: bool, export: str | None) -> str:
        start = SubmitStart(cfg, "r1", "/tmp/meta", object, translate_only=translate_only)
        return job_line(start, SubmitFlags("c.yaml", export_prompts=export)).text

    assert "dry run (export only)" in line(False, "out.jsonl")
    assert "translated only" in line(True, None) and "export" not in line(True, None)
    assert "submission to openai" in line(False, None)


@pytest.mark.parametrize(
    "name", ["review", "a b/c", "ü", "x" * 40, "y" * 60, "z" * 70, "long name " * 9]
)
def test_custom_id_maker_makes_custom_ids(name: str) -> None:
    from mmirage_beam.ids import custom_id, custom_id_maker

    for modality in ("text", "multimodal"):
        make = custom_id_maker(name, modality)
        for index in (0, 7, 12_345, 10**12, 10**40):
            try:
                want = custom_id(name, modality, index)
            except ValueError:
                with pytest.raises(ValueError):
                    make(index)
                continue
            assert make(index) == want
