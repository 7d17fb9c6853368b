"""The full submit pipeline on DirectRunner against the embedded fake provider, through
the real openai and anthropic SDKs over HTTP on 127.0.0.1: text and images, both
providers, and workers in separate processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.submit import main as run_main
from tests.conftest import GSM8K_JSONL, IMAGES, base_config, write_config


def _gsm8k_rows(tmp_path, n):
    """The first ``n`` GSM8K test rows, as a JSONL file in ``tmp_path`` (its path)."""
    data = tmp_path / "gsm8k.jsonl"
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines(True)[:n]
    data.write_text("".join(lines), encoding="utf-8")
    return str(data)


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x]


def _receipts(tmp_path, modality, run_id):
    return _read_jsonl(tmp_path / "meta" / f"batch_metadata.{modality}.{run_id}.jsonl")


def _export(tmp_path, cfg_path, run_id):
    """The dry-run export of the same config: what a submission must upload."""
    assert (
        run_main(
            [
                "--config",
                cfg_path,
                "--export-prompts",
                str(tmp_path / "exp.jsonl"),
                "--run-id",
                run_id + "x",
            ]
        )
        == 0
    )
    return {
        ln["request"]["custom_id"]: ln["request"]
        for ln in _read_jsonl(tmp_path / f"exp.{run_id}x.jsonl")
    }


def _check_submission(tmp_path, fake, provider, modality, run_id, expected, n_rows, outputs):
    receipts = _receipts(tmp_path, modality, run_id)
    held = fake.submitted_requests(provider)
    # The fake holds exactly the requests a dry run exports, each submitted once.
    assert {h["custom_id"]: h["request"] for h in held} == expected
    assert len(held) == len(expected) == n_rows * len(outputs)
    assert set(fake.create_counts().values()) == {1}
    # Receipts: one per provider batch, every custom_id mapped to its own source_index.
    batch_ids = {b["id"] for b in fake.batches(provider)}
    assert {r["provider_batch_id"] for r in receipts} == batch_ids
    mapping = {}
    for r in receipts:
        assert r["provider"] == provider and r["run_id"] == run_id and r["modality"] == modality
        assert r["status"] in ("in_progress", "completed")
        ids_in_batch = {h["custom_id"] for h in held if h["batch_id"] == r["provider_batch_id"]}
        assert ids_in_batch == set(r["custom_id_to_source_index"])
        mapping.update(r["custom_id_to_source_index"])
    assert mapping == {f"{o}-{modality}-{i}": i for o in outputs for i in range(n_rows)}
    return receipts


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_gsm8k_text_submission(tmp_path, capsys, provider_env, provider):
    fake = provider_env
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    # 600 of GSM8K's 1,319 rows in chunks of 120: several chunks per output, as the
    # whole file in chunks of 300 makes, for less than half the rows.
    cfg = base_config(tmp_path, provider, base_url=base_url, max_requests_per_chunk=120)
    cfg["loading_params"]["datasets"][0]["path"] = _gsm8k_rows(tmp_path, 600)
    cfg["processing_params"]["outputs"].append(
        {
            "name": "facts",
            "type": "batch_api",
            "output_type": "JSON",
            "prompt": "List the numbers in: {{ question }}",
            "output_schema": ["numbers", "unit"],
        }
    )
    path = write_config(tmp_path, cfg)
    expected = _export(tmp_path, path, "e2e")
    code = run_main(["--config", path, "--run-id", "e2e"])
    out = capsys.readouterr().out
    assert code == 0, out
    receipts = _check_submission(
        tmp_path, fake, provider, "text", "e2e", expected, 600, ("answer", "facts")
    )
    assert len(receipts) == 2 * 5  # 600 rows / 120 per chunk, for each output
    assert f"batches submitted:   {len(receipts)}" in out
    assert "requests:            1,200" in out
    # Durable parts were consolidated into the receipt file and removed.
    assert not list((tmp_path / "meta").glob("*.parts"))
    if provider == "openai":
        for b in fake.batches("openai"):
            assert b["metadata"]["mmirage_run_id"] == "e2e"
            assert b["metadata"]["mmirage_chunk_id"] in {r["chunk_id"] for r in receipts}
            assert b["endpoint"] == "/v1/chat/completions"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_images_submission(tmp_path, capsys, provider_env, provider):
    fake = provider_env
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    # OpenAI refuses animated GIFs, so its run leaves out row 8 (the GIF).
    keep = [i for i in range(10) if provider == "anthropic" or i != 8]
    lines = (IMAGES / "vision_questions.jsonl").read_text(encoding="utf-8").splitlines()
    data = tmp_path / "vision.jsonl"
    data.write_text("\n".join(lines[i] for i in keep) + "\n", encoding="utf-8")
    cfg = base_config(tmp_path, provider, base_url=base_url, max_chunk_bytes=2 * 1024 * 1024)
    cfg["loading_params"]["datasets"] = [
        {
            "path": str(data),
            "type": "JSONL",
            "output_dir": str(tmp_path / "shards"),
            "image_base_path": str(IMAGES),
        }
    ]
    cfg["processing_params"]["inputs"] = [
        {"name": "question", "key": "question"},
        {"name": "image", "key": "image", "type": "image"},
    ]
    cfg["processing_params"]["outputs"][0]["prompt"] = "{{ question }}"
    path = write_config(tmp_path, cfg)
    expected = _export(tmp_path, path, "img")
    code = run_main(["--config", path, "--run-id", "img"])
    assert code == 0, capsys.readouterr()
    receipts = _check_submission(
        tmp_path, fake, provider, "multimodal", "img", expected, len(keep), ("answer",)
    )
    assert len(receipts) > 1  # 2 MiB chunks cannot hold all the photographs
    assert not (tmp_path / "meta" / "batch_metadata.text.img.jsonl").exists()


def test_workers_in_separate_processes(tmp_path, capfd, provider_env):
    """Two worker processes: the DoFns (adapter class, config) travel pickled and the key
    is read from each worker's environment; the estimate is told once, by the launcher
    (a worker hands it over; the workers' stderr is this process's, captured by capfd)."""
    fake = provider_env
    cfg = base_config(
        tmp_path, "anthropic", base_url=fake.anthropic_base_url, max_requests_per_chunk=60
    )
    cfg["loading_params"]["datasets"][0]["path"] = _gsm8k_rows(tmp_path, 400)
    path = write_config(tmp_path, cfg)
    code = run_main(
        [
            "--config",
            path,
            "--run-id",
            "mp",
            "--direct_num_workers=2",
            "--direct_running_mode=multi_processing",
        ]
    )
    out, err = capfd.readouterr()
    assert code == 0, out + err
    told = [x for x in err.splitlines() if "before submitting:" in x]
    assert len(told) == 1, err[-3000:]
    assert " INFO mmirage_beam.progress: before submitting: tokens and estimated cost:" in told[0]
    assert "answer: 400 request(s), input tokens" in err
    receipts = _receipts(tmp_path, "text", "mp")
    # chunking_parallelism defaults to the 2 workers: two chunkers of ~200 requests
    # each make 4 chunks of at most 60 each (the greedy minimum for 400 is 7).
    assert len(receipts) == 8
    assert {r["chunk_id"].split("-")[1] for r in receipts} == {"s000", "s001"}
    assert all(r["submitted_request_count"] <= 60 for r in receipts)
    held = fake.submitted_requests("anthropic")
    assert sorted(h["custom_id"] for h in held) == sorted(f"answer-text-{i}" for i in range(400))
    assert set(fake.create_counts().values()) == {1}
