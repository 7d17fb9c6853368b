"""What the user sees stays byte-identical across the staged-chunk rewrite (issue 10).

``tests/data/golden/dry_run_digests.json`` holds digests of the dry run of each bundled
config as written by the code before chunks were staged (commit 80c4b40): every request
line exactly as exported (raw bytes), every placeholder row, and the receipts'
custom_id -> source_index map and per-request hashes. Chunk boundaries may move; none of
these may.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from pathlib import Path

import pytest

from pipelines.submit import main as submit_main

REPO = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((REPO / "tests" / "data" / "golden" / "dry_run_digests.json").read_text())
_PREFIX = b',"request":'


def _sorted_digest(lines: list[bytes]) -> str:
    return hashlib.sha256(b"".join(sorted(lines))).hexdigest()


def dry_run_digests(config: str, work: Path, extra: tuple[str, ...] = ()) -> dict:
    """Dry-run ``config`` (relative to the repo) from ``work`` and digest its outputs.

    The run is ``pipelines.submit.main`` in this process (the bytes written do not depend
    on the process; a subprocess per config cost a Python and Beam start each), with
    ``work`` as the working directory, where the configs' relative paths resolve."""
    os.symlink(REPO / "mmirage_beam", work / "mmirage_beam")
    args = ["--config", str(REPO / config), "--export-prompts", "out/prompts.jsonl"]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        assert submit_main([*args, "--run-id", "golden", *extra]) == 0
    export = [
        line[line.index(_PREFIX) + len(_PREFIX) : -2] + b"\n"
        for line in (work / "out" / "prompts.golden.jsonl").read_bytes().splitlines(True)
    ]
    placeholders = [
        line
        for p in sorted(glob.glob(f"{work}/out/**/placeholders.golden-*.jsonl", recursive=True))
        for line in Path(p).read_bytes().splitlines(True)
    ]
    receipts = [
        json.loads(line)
        for p in glob.glob(f"{work}/out/**/*.dry-run.*.golden.jsonl", recursive=True)
        for line in Path(p).read_text().splitlines()
    ]
    index = {k: v for r in receipts for k, v in r["custom_id_to_source_index"].items()}
    hashes = {k: v for r in receipts for k, v in r["request_hashes"].items()}
    return {
        "config": config,
        "requests": len(export),
        "export_request_lines_sha256": _sorted_digest(export),
        "placeholder_lines_sha256": _sorted_digest(placeholders),
        "placeholder_rows": len(placeholders),
        "custom_id_to_source_index_sha256": hashlib.sha256(
            json.dumps(index, sort_keys=True).encode()
        ).hexdigest(),
        "request_hashes_sha256": hashlib.sha256(
            json.dumps(hashes, sort_keys=True).encode()
        ).hexdigest(),
    }


@pytest.mark.parametrize("golden", GOLDEN["configs"], ids=lambda g: Path(g["config"]).stem)
def test_dry_run_outputs_are_byte_identical_to_before_staging(golden: dict, tmp_path: Path):
    assert dry_run_digests(golden["config"], tmp_path) == golden


def test_small_chunks_and_several_chunkers_change_no_byte(tmp_path: Path):
    """Many small chunks over two chunkers per key: boundaries move, bytes do not."""
    golden = GOLDEN["configs"][0]
    config = tmp_path / "small_chunks.yaml"
    text = (REPO / golden["config"]).read_text()
    text = text.replace("max_requests_per_chunk: 500", "max_requests_per_chunk: 37")
    text = text.replace("mode: local", "mode: local\n  chunking_parallelism: 2")
    assert "max_requests_per_chunk: 37" in text and "chunking_parallelism: 2" in text
    config.write_text(text.replace("mmirage_beam/", f"{REPO}/mmirage_beam/"))
    work = tmp_path / "run"
    work.mkdir()
    got = dry_run_digests(str(config), work)
    assert {**got, "config": golden["config"]} == golden
