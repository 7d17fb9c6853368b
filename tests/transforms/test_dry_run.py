"""The dry run (--export-prompts) on JSONL, Parquet and HF save_to_disk data, text and
images, for both providers; every export is validated with the official SDK types."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipelines.submit import main as run_main
from tests.conftest import (
    GSM8K_JSONL,
    GSM8K_LOADABLE,
    GSM8K_PARQUET,
    IMAGES,
    TEST_DATA,
    base_config,
    write_config,
)
from tests.sdk_validation import validate_export


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x]


def _gsm8k_lines():
    return [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines() if x]


def _receipts(tmp_path, modality, run_id, dry=True):
    middle = f"dry-run.{modality}" if dry else modality
    return _read_jsonl(tmp_path / "meta" / f"batch_metadata.{middle}.{run_id}.jsonl")


def test_jsonl_openai_two_outputs(tmp_path, capsys):
    cfg = base_config(tmp_path, max_requests_per_chunk=400)
    cfg["processing_params"]["outputs"].append(
        {
            "name": "grade",
            "type": "batch_api",
            "output_type": "JSON",
            "prompt": "Grade: {{ question }}",
            "output_schema": {"score": {"type": "int", "min": 1, "max": 5}, "why": "str"},
        }
    )
    code = run_main(
        [
            "--config",
            write_config(tmp_path, cfg),
            "--export-prompts",
            str(tmp_path / "p.jsonl"),
            "--run-id",
            "abc123",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    export = tmp_path / "p.abc123.jsonl"
    n, problems = validate_export(export)
    assert problems == []
    rows = _gsm8k_lines()
    assert n == 2 * len(rows) == 2638
    lines = _read_jsonl(export)
    ids = [ln["request"]["custom_id"] for ln in lines]
    assert len(set(ids)) == len(ids)
    assert set(ids) == {f"{o}-text-{i}" for o in ("answer", "grade") for i in range(len(rows))}
    # Each request carries its own row's question.
    by_id = {ln["request"]["custom_id"]: ln["request"] for ln in lines}
    for i in (0, 17, 1318):
        content = by_id[f"answer-text-{i}"]["body"]["messages"][0]["content"]
        assert content == "Answer concisely:\n" + rows[i]["question"]
    fmt = by_id["grade-text-5"]["body"]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"]["properties"]["score"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 5,
    }
    # Receipts: dry-run names, every custom_id mapped to its source_index, chunk limits.
    receipts = _receipts(tmp_path, "text", "abc123")
    mapping = {}
    for r in receipts:
        assert r["status"] == "dry_run" and r["run_id"] == "abc123"
        assert r["provider_batch_id"] == f"dry-run-text-{r['chunk_id']}"
        assert r["submitted_request_count"] <= 400
        assert r["submitted_request_count"] == len(r["custom_id_to_source_index"])
        mapping.update(r["custom_id_to_source_index"])
    assert mapping == {cid: int(cid.rsplit("-", 1)[1]) for cid in ids}
    batch_ids = {ln["batch_id"] for ln in lines}
    assert batch_ids == {f"text-{r['chunk_id']}" for r in receipts}
    # Placeholder rows: one per source row, outputs replaced by placeholders.
    shard = list((tmp_path / "shards" / "shard_0").glob("*.jsonl"))
    placeholder_rows = [r for f in shard for r in _read_jsonl(f)]
    assert len(placeholder_rows) == len(rows)
    row5 = next(r for r in placeholder_rows if r["source_index"] == 5)
    assert row5 == {
        "question": rows[5]["question"],
        "answer": "__BATCH_SUBMITTED__:answer-text-5",
        "source_index": 5,
    }
    assert "run id:              abc123" in out and "requests:            2,638" in out


def test_parquet_and_loadable_anthropic(tmp_path, capsys):
    cfg = base_config(tmp_path, "anthropic", max_tokens=256, temperature=0.3)
    cfg["loading_params"]["datasets"] = [
        {"path": str(GSM8K_PARQUET), "type": "parquet", "output_dir": str(tmp_path / "pq")},
        {"path": str(GSM8K_LOADABLE), "type": "loadable", "output_dir": str(tmp_path / "hf")},
    ]
    cfg["processing_params"]["inputs"] = [
        {"name": "question", "key": "conversations[0].content"},
        {"name": "final", "key": "meta.final_answer"},
    ]
    cfg["processing_params"]["outputs"][0]["prompt"] = "{{ question }} (expected {{ final }})"
    cfg["processing_params"]["output_schema"] = {"q": "{{ question }}", "a": "{{ answer }}"}
    export_dir = tmp_path / "exports"
    code = run_main(
        [
            "--config",
            write_config(tmp_path, cfg),
            "--export-prompts",
            str(export_dir),
            "--run-id",
            "pq1",
        ]
    )
    assert code == 0, capsys.readouterr()
    export = export_dir / "exported_prompts.pq1.jsonl"
    n, problems = validate_export(export)
    assert problems == [] and n == 1319 + 300
    lines = {ln["request"]["custom_id"]: ln["request"] for ln in _read_jsonl(export)}
    import pyarrow.parquet as pq

    table = pq.read_table(GSM8K_PARQUET).to_pylist()
    # Parquet rows are source_index 0..1318, the HF dataset continues at 1319.
    first = lines["answer-text-0"]["params"]
    assert first["messages"][0]["content"] == (
        f"{table[0]['conversations'][0]['content']} (expected {table[0]['meta']['final_answer']})"
    )
    assert first["temperature"] == 0.3 and first["max_tokens"] == 256 and "top_p" not in first
    hf_first = lines["answer-text-1319"]["params"]["messages"][0]["content"]
    assert hf_first == first["messages"][0]["content"]  # the HF copy starts with the same row
    assert "answer-text-1618" in lines and "answer-text-1619" not in lines
    assert len(list((tmp_path / "pq" / "shard_0").glob("*.jsonl"))) >= 1
    assert len(list((tmp_path / "hf" / "shard_0").glob("*.jsonl"))) >= 1


def _vision_config(tmp_path, provider, rows=None, **proc):
    src = IMAGES / "vision_questions.jsonl"
    data = tmp_path / "vision.jsonl"
    lines = src.read_text(encoding="utf-8").splitlines()
    if rows is not None:
        lines = [lines[i] if isinstance(i, int) else i for i in rows]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = base_config(tmp_path, provider, **proc)
    cfg["loading_params"]["datasets"] = [
        {"path": str(data), "type": "JSONL", "output_dir": "", "image_base_path": str(IMAGES)}
    ]
    cfg["processing_params"]["inputs"] = [
        {"name": "question", "key": "question"},
        {"name": "image", "key": "image", "type": "image"},
    ]
    cfg["processing_params"]["outputs"][0]["prompt"] = "{{ question }}"
    return cfg


def test_images_anthropic_media_type_from_bytes(tmp_path, capsys):
    extra = [
        json.dumps({"id": "x1", "image": "flower_png_bytes.jpg", "question": "q1"}),
        json.dumps({"id": "x2", "image": "rocket_no_extension", "question": "q2"}),
        json.dumps({"id": "x3", "image": "CHELSEA.JPG", "question": "q3"}),
    ]
    cfg = _vision_config(
        tmp_path, "anthropic", rows=list(range(10)) + extra, max_chunk_bytes=3 * 1024 * 1024
    )
    code = run_main(
        [
            "--config",
            write_config(tmp_path, cfg),
            "--export-prompts",
            str(tmp_path / "v.jsonl"),
            "--run-id",
            "img1",
        ]
    )
    assert code == 0, capsys.readouterr()
    export = tmp_path / "v.img1.jsonl"
    n, problems = validate_export(export)
    assert problems == [] and n == 13
    reqs = {ln["request"]["custom_id"]: ln for ln in _read_jsonl(export)}
    assert set(reqs) == {f"answer-multimodal-{i}" for i in range(13)}
    content = reqs["answer-multimodal-0"]["request"]["params"]["messages"][0]["content"]
    assert content[0] == {
        "type": "text",
        "text": "What animal is in this picture, and what is it doing?",
    }
    assert content[1]["source"]["media_type"] == "image/png"
    url_block = reqs["answer-multimodal-9"]["request"]["params"]["messages"][0]["content"][1]
    assert url_block["source"] == {
        "type": "url",
        "url": "https://upload.wikimedia.org/wikipedia/commons/3/3f/Fronalpstock_big.jpg",
    }
    media = {
        cid: r["request"]["params"]["messages"][0]["content"][1]["source"].get("media_type")
        for cid, r in reqs.items()
    }
    assert media["answer-multimodal-10"] == "image/png"  # PNG bytes behind a .jpg name
    assert media["answer-multimodal-11"] == "image/jpeg"  # no extension
    assert media["answer-multimodal-12"] == "image/jpeg"  # upper-case .JPG
    assert media["answer-multimodal-7"] == "image/webp"
    assert media["answer-multimodal-8"] == "image/gif"
    # 3 MiB chunks: the big photographs are spread over several batches, none over the cap.
    receipts = _receipts(tmp_path, "multimodal", "img1")
    assert len(receipts) > 1
    assert all(r["total_bytes"] <= 3 * 1024 * 1024 or r["has_oversized_request"] for r in receipts)


def test_images_openai_data_uris(tmp_path, capsys):
    cfg = _vision_config(tmp_path, "openai", rows=[0, 3, 7, 9])
    code = run_main(
        [
            "--config",
            write_config(tmp_path, cfg),
            "--export-prompts",
            str(tmp_path / "o.jsonl"),
            "--run-id",
            "img2",
        ]
    )
    assert code == 0, capsys.readouterr()
    n, problems = validate_export(tmp_path / "o.img2.jsonl")
    assert problems == [] and n == 4
    lines = _read_jsonl(tmp_path / "o.img2.jsonl")
    parts = lines[0]["request"]["body"]["messages"][0]["content"]
    assert parts[0]["type"] == "text" and parts[1]["type"] == "image_url"
    urls = sorted(
        ln["request"]["body"]["messages"][0]["content"][1]["image_url"]["url"][:22] for ln in lines
    )
    assert urls == [
        "data:image/jpeg;base64",
        "data:image/png;base64,",
        "data:image/webp;base64",
        "https://upload.wikimed",
    ]


@pytest.mark.parametrize(
    "provider, image, reason",
    [
        ("anthropic", "rocket.bmp", "image/bmp; Anthropic accepts only"),
        ("anthropic", "rocket.tiff", "image/tiff; Anthropic accepts only"),
        ("anthropic", "LARGE", "over Anthropic's 5 MB"),
        ("openai", "no_time_for_that_tiny.gif", "animated GIF"),
        ("openai", "does_not_exist.png", "cannot be read"),
    ],
)
def test_refused_images_fail_before_submission(tmp_path, capsys, provider, image, reason):
    if image == "LARGE":
        shutil.copy(TEST_DATA / "images" / "astronaut_large_noisy.png", tmp_path / "large.png")
        image = str(tmp_path / "large.png")
    bad = json.dumps({"id": "bad", "image": image, "question": "what?"})
    cfg = _vision_config(tmp_path, provider, rows=[0, bad, 3])
    if Path(image).is_absolute():  # the copy in tmp_path is outside image_base_path
        cfg["loading_params"]["datasets"][0]["allow_images_outside_base"] = True
    code = run_main(
        [
            "--config",
            write_config(tmp_path, cfg),
            "--export-prompts",
            str(tmp_path / "x.jsonl"),
            "--run-id",
            "bad1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    invalid = _read_jsonl(tmp_path / "meta" / "batch_metadata.invalid_rows.bad1.jsonl")
    assert len(invalid) == 1
    assert invalid[0]["source_index"] == 1 and reason in invalid[0]["reason"]
    assert Path(image).name in invalid[0]["reason"]
    assert "source_index 1" in out and "Nothing was submitted" in out
    assert not (tmp_path / "x.bad1.jsonl").exists()  # nothing exported either


def test_slurm_mode_refused(tmp_path, capsys):
    cfg = base_config(tmp_path)
    cfg["execution_params"]["mode"] = "slurm"
    code = run_main(
        ["--config", write_config(tmp_path, cfg), "--export-prompts", str(tmp_path / "p.jsonl")]
    )
    assert code == 2
    assert "execution_params.mode" in capsys.readouterr().err


def test_missing_key_fails_before_reading(tmp_path, capsys):
    cfg = base_config(tmp_path, "anthropic")
    code = run_main(["--config", write_config(tmp_path, cfg)])
    err = capsys.readouterr().err
    assert code == 2 and "ANTHROPIC_API_KEY" in err and "--export-prompts" in err
    assert not (tmp_path / "meta").exists() and not (tmp_path / "shards").exists()


def test_reject_policy_fails_the_run_before_submission(tmp_path, capsys):
    cfg = base_config(tmp_path, max_chunk_bytes=600, oversized_request_policy="reject")
    code = run_main(
        [
            "--config",
            write_config(tmp_path, cfg),
            "--export-prompts",
            str(tmp_path / "p.jsonl"),
            "--run-id",
            "rej",
        ]
    )
    assert code == 1
    invalid = _read_jsonl(tmp_path / "meta" / "batch_metadata.invalid_rows.rej.jsonl")
    assert invalid and all("max_chunk_bytes=600" in e["reason"] for e in invalid)
    assert not (tmp_path / "p.rej.jsonl").exists()


def test_small_chunks_isolate_oversized(tmp_path, capsys):
    cfg = base_config(tmp_path, max_chunk_bytes=2000)
    code = run_main(
        [
            "--config",
            write_config(tmp_path, cfg),
            "--export-prompts",
            str(tmp_path / "p.jsonl"),
            "--run-id",
            "iso",
        ]
    )
    assert code == 0
    receipts = _receipts(tmp_path, "text", "iso")
    assert sum(r["submitted_request_count"] for r in receipts) == 1319
    for r in receipts:
        if r["has_oversized_request"]:
            assert r["submitted_request_count"] == 1 and r["flush_reason"] == "oversized_request"
        else:
            assert r["total_bytes"] <= 2000
    # The exported bytes per batch equal the receipts' total_bytes (exact accounting).
    sizes: dict[str, int] = {}
    for raw in (tmp_path / "p.iso.jsonl").read_bytes().splitlines():
        line = json.loads(raw)
        req = json.dumps(line["request"], ensure_ascii=False, separators=(",", ":"))
        sizes[line["batch_id"]] = sizes.get(line["batch_id"], 0) + len(req.encode()) + 1
    assert sizes == {f"text-{r['chunk_id']}": r["total_bytes"] for r in receipts}


def test_the_export_is_written_from_the_staged_files_as_lines_were_wrapped(tmp_path):
    """Issue 19: WriteExport wraps the staged bytes block by block; the result is what
    wrapping each staged line on its own gave, whatever the block size."""
    from mmirage_beam.transforms.submit import write_export

    staged = {
        "text-a-chunk-000001": b'{"x":"\\u00e9 \\n"}\n{"y":[1,2]}\n\n{"z":"\xe2\x80\x99"}\n',
        "text-a-chunk-000002": b'{"last":"no newline"}',
    }
    parts = []
    for batch_id, data in staged.items():
        path = tmp_path / f"{batch_id}.jsonl"
        path.write_bytes(data)
        parts.append((batch_id, str(path)))
    expected = b"".join(
        b'{"batch_id":"' + bid.encode() + b'","request":' + line.rstrip(b"\n") + b"}\n"
        for bid, data in staged.items()
        for line in data.splitlines(True)
    )
    for block_bytes in (1, 3, 7, 1 << 20):
        out = tmp_path / f"export-{block_bytes}.jsonl"
        write_export(parts, str(out), block_bytes=block_bytes)
        assert out.read_bytes() == expected
        assert not list(tmp_path.glob("*.tmp-export"))


def test_placeholder_rows_in_blocks_are_the_same_lines_in_the_same_order():
    """Issue 19: with block_bytes, a bundle's placeholder lines of each dataset travel
    joined; joined back they are the lines one per element gave, in order."""
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from mmirage_beam.config.loader import OutputConfig
    from mmirage_beam.transforms.build import ExtractedRow
    from mmirage_beam.transforms.rows import RenderPlaceholderRows

    outputs = [OutputConfig(name="answer", prompt="{{ q }}")]
    rows = [ExtractedRow(i, i % 2, {"q": f"question {i}"}, {"q": f"q{i}"}, ()) for i in range(40)]

    def joined(pairs):
        by_dataset: dict = {}
        for dataset, data in pairs:
            by_dataset.setdefault(dataset, []).append(data)
        return [(d, b"".join(parts)) for d, parts in sorted(by_dataset.items())]

    with TestPipeline() as p:
        rows_in = p | beam.Create(rows, reshuffle=False)
        one = rows_in | "One" >> RenderPlaceholderRows(outputs, None, False)
        blocks = rows_in | "Blocks" >> RenderPlaceholderRows(outputs, None, False, block_bytes=200)
        lines = one | "AllLines" >> beam.combiners.ToList() | "JoinLines" >> beam.Map(joined)
        blocked = blocks | "AllBlocks" >> beam.combiners.ToList() | "JoinBlocks" >> beam.Map(joined)
        n_blocks = blocks | "CountBlocks" >> beam.combiners.Count.Globally()
        assert_that(
            (lines, blocked)
            | beam.Flatten()
            | beam.combiners.ToList()
            | beam.Map(lambda two: two[0] == two[1] and len(two[0]) == 2),
            equal_to([True]),
            label="SameBytes",
        )
        assert_that(n_blocks | beam.Map(lambda n: 2 <= n < 40), equal_to([True]), label="Fewer")
