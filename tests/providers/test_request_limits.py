"""Per-request provider limits, checked before anything is sent: a request over one is an
invalid row (source_index, image input, reason) in the invalid-rows file, and nothing is
submitted, never an "isolated" request the provider would refuse.

The limits (with their sources) are the constants of the adapters:
``providers/openai/adapter.py`` (50 MB per request, 500 images) and
``providers/anthropic/adapter.py`` (8000 px per side, 2000 px with more than 20 images,
5 MB of base64 per image, 100 images). Images are the real photographs of the repo;
the ones too large for a provider are made here with Pillow.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from PIL import Image

from mmirage_beam.providers.anthropic import adapter as anthropic_batch
from mmirage_beam.providers.openai import adapter as openai_batch
from pipelines.submit import main as run_main
from tests.conftest import IMAGES, base_config, write_config


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]


def _png(path: Path, width: int, height: int, noise: bool = False) -> str:
    """A PNG of ``width`` x ``height`` px; ``noise``: random pixels stored uncompressed,
    so its size is about 3 bytes per pixel."""
    if noise:
        im = Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))
        im.save(path, format="PNG", compress_level=0)
    else:
        Image.new("RGB", (width, height), (200, 30, 30)).save(path, format="PNG")
    return str(path)


def _run(tmp_path, fake, provider, rows, run_id, *flags):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    cfg = base_config(tmp_path, provider, base_url=base_url)
    cfg["loading_params"]["datasets"] = [
        {
            "path": str(data),
            "type": "JSONL",
            "output_dir": str(tmp_path / "shards"),
            "image_base_path": str(IMAGES),
            # The large test images are made in tmp_path, named by absolute paths.
            "allow_images_outside_base": True,
        }
    ]
    cfg["processing_params"]["inputs"].append({"name": "photos", "key": "photos", "type": "image"})
    cfg["processing_params"]["output_schema"] = {"answer": "{{ answer }}"}
    code = run_main(["--config", write_config(tmp_path, cfg), "--run-id", run_id, *flags])
    path = tmp_path / "meta" / f"batch_metadata.invalid_rows.{run_id}.jsonl"
    invalid = sorted(_read_jsonl(path), key=lambda e: e["source_index"]) if path.exists() else []
    return code, invalid


def _row(question: str, photos: list[str]) -> dict[str, Any]:
    return {"question": question, "photos": photos}


def test_anthropic_pixel_limits_8000_and_2000_with_many_images(tmp_path, capsys, provider_env):
    fake = provider_env
    wide = _png(tmp_path / "wide.png", 8001, 40)  # over 8000 px on one side
    tall = _png(tmp_path / "tall.png", 30, 2400)  # fine alone, too tall among > 20 images
    twenty = ["chelsea.png", "china.jpg", "coffee.webp", "rocket.jpg"] * 5
    rows = [
        _row("One photograph.", ["flower.jpg"]),
        _row("Too wide.", ["hubble_deep_field.jpg", wide]),
        _row("Tall among few.", [tall, "astronaut.png"]),
        _row("Tall among many.", [*twenty, tall]),  # 21 images
        _row("Twenty and one tall.", [*twenty[:19], tall]),  # 20 images: 8000 px applies
    ]
    code, invalid = _run(tmp_path, fake, "anthropic", rows, "px")
    assert code == 1
    assert [(e["source_index"], e["input_name"]) for e in invalid] == [
        (1, "photos"),
        (3, "photos"),
    ]
    assert "8001 x 40 px" in invalid[0]["reason"] and "at most 8000 px" in invalid[0]["reason"]
    assert "30 x 2400 px" in invalid[1]["reason"] and "at most 2000 px" in invalid[1]["reason"]
    assert "more than 20 images; this one holds 21" in invalid[1]["reason"]
    assert "output 'answer'" in invalid[1]["reason"]
    assert fake.submitted_requests() == [] and fake.batches() == []
    assert "Nothing was submitted" in capsys.readouterr().out

    # The valid rows go through when the invalid ones are skipped.
    code, _ = _run(tmp_path, fake, "anthropic", rows, "px2", "--skip-invalid-rows")
    assert code == 0
    assert sorted(h["custom_id"] for h in fake.submitted_requests()) == [
        f"answer-multimodal-{i}" for i in (0, 2, 4)
    ]


def test_anthropic_image_count_and_base64_size(tmp_path, capsys, provider_env):
    fake = provider_env
    noisy = _png(tmp_path / "noisy.png", 1100, 1100, noise=True)  # ~3.6 MB, ~4.8 MB base64
    assert 3 * 1024 * 1024 < Path(noisy).stat().st_size
    assert len(Path(noisy).read_bytes()) * 4 / 3 > anthropic_batch.MAX_IMAGE_BYTES * 0.9
    huge = _png(tmp_path / "huge.png", 1300, 1300, noise=True)  # ~5.1 MB, ~6.8 MB base64
    rows = [
        _row("A hundred small photographs.", ["CHELSEA.JPG"] * 100),
        _row("A hundred and one.", ["CHELSEA.JPG"] * 101),
        _row("Under five megabytes of base64.", [noisy]),
        _row("Over five megabytes of base64.", ["rocket.jpg", huge]),
    ]
    code, invalid = _run(tmp_path, fake, "anthropic", rows, "cnt")
    assert code == 1
    assert [(e["source_index"], e["input_name"]) for e in invalid] == [
        (1, "photos"),
        (3, "photos"),
    ]
    assert "holds 101 images; Anthropic accepts at most 100" in invalid[0]["reason"]
    assert "huge.png" in invalid[1]["reason"] and "5 MB" in invalid[1]["reason"]
    assert fake.submitted_requests() == []
    capsys.readouterr()


def test_openai_image_count_and_payload_size(tmp_path, capsys, provider_env):
    fake = provider_env
    # 500 is the documented count; shown here with the real limit, no patching.
    assert openai_batch.MAX_IMAGES_PER_REQUEST == 500
    # ~39 MB of pixels stored raw: about 52 MB as a base64 data URL, over 50 MB.
    big = _png(tmp_path / "big.png", 3600, 3600, noise=True)
    rows = [
        _row("Five hundred.", ["CHELSEA.JPG"] * 500),
        _row("Five hundred and one.", ["CHELSEA.JPG"] * 501),
        _row("Over fifty megabytes.", [big]),
        _row("Fine.", ["coffee.png"]),
    ]
    code, invalid = _run(tmp_path, fake, "openai", rows, "oa")
    assert code == 1
    assert [(e["source_index"], e["input_name"]) for e in invalid] == [
        (1, "photos"),
        (2, "photos"),
    ]
    assert "holds 501 images; OpenAI accepts at most 500" in invalid[0]["reason"]
    assert "OpenAI accepts at most 50000000 bytes (50 MB) per request" in invalid[1]["reason"]
    # Not isolated into a batch of its own: nothing at all was sent.
    assert fake.submitted_requests() == [] and fake.batches() == []
    assert not list((tmp_path / "meta").glob("batch_metadata.multimodal.oa*.jsonl"))
    capsys.readouterr()
