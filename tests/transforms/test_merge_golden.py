"""The merged file and the errors file stay byte-identical to the ones the first merge
implementation wrote (a CoGroupByKey of every row and result), whatever the merge's
plan: golden files in ``tests/data/golden_merge`` were captured from that code.

Real submissions to the embedded fake through the real SDKs, then ``mmirage merge`` on
the DirectRunner. The fake's batch and file ids are random, so every id of that shape is
replaced by ``<ID n>`` (n: order of first appearance) and the test's temporary folder by
``<TMP>``; every other byte is compared as written.

Set ``MMIRAGE_WRITE_GOLDEN=1`` to (re)write the golden files (only from a merge whose
output is known to be right).
"""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path

import pytest

from pipelines.merge import main as merge_main
from pipelines.resubmit import main as resubmit_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config
from tests.transforms.test_verdicts import MIXED

GOLDEN = Path(__file__).parents[1] / "data" / "golden_merge"
_IDS = re.compile(rb"\b(?:batch_|msgbatch_|file-)[0-9a-f]{24}\b")


def _rows(n, markers=None):
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").split("\n")[:n]]
    for i, marker in (markers or {}).items():
        rows[i]["question"] += f" {marker}"
    return rows


def _write_rows(tmp_path, rows):
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )


def _setup(tmp_path, provider, fake, rows, json_output=False, **proc):
    _write_rows(tmp_path, rows)
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    cfg = base_config(tmp_path, provider, base_url=base_url, **proc)
    cfg["loading_params"]["datasets"][0]["path"] = str(tmp_path / "rows.jsonl")
    if json_output:
        cfg["processing_params"]["outputs"].append(
            {
                "name": "facts",
                "type": "batch_api",
                "output_type": "JSON",
                "prompt": "Facts of: {{ question }}",
                "output_schema": {"numbers": "list", "count": {"type": "int", "min": 0}},
            }
        )
        cfg["processing_params"]["output_schema"]["count"] = "{{ facts.count }}"
    # One chunk at a time, as when the golden files were captured: a scripted create
    # failure then always stops the same chunks (with more in flight, others also try).
    cfg["execution_params"]["submit_concurrency"] = 1
    return write_config(tmp_path, cfg)


def _id_names(tmp_path: Path, fake) -> dict[bytes, bytes]:
    """Each provider batch id (and OpenAI file id) -> a name from its chunk's id."""
    names: dict[bytes, bytes] = {}
    for path in sorted((tmp_path / "meta").glob("batch_metadata.*text.*.jsonl")):
        for line in path.read_bytes().split(b"\n"):
            if line.strip():
                r = json.loads(line)
                names[r["provider_batch_id"].encode()] = f"<batch {r['chunk_id']}>".encode()
    for b in fake.batches():
        chunk = names.get(b["id"].encode(), b"<batch ?>")
        for key in ("input_file_id", "output_file_id", "error_file_id"):
            if b.get(key):
                names[b[key].encode()] = chunk[:-1] + f" {key}>".encode()
    return names


def _normalised(path: Path, tmp_path: Path, fake) -> bytes:
    data = path.read_bytes() if path.exists() else b"<no file>"
    data = data.replace(str(tmp_path).encode("utf-8"), b"<TMP>")
    names = _id_names(tmp_path, fake)
    data = _IDS.sub(lambda m: names.get(m.group(0), b"<unknown id>"), data)
    # Lines without a source_index come first, ordered by their bytes, which hold the
    # random batch ids: once named, put them in the order of their names.
    lines = data.split(b"\n")
    head = list(itertools.takewhile(lambda x: b'"source_index": null' in x, lines))
    return b"\n".join(sorted(head) + lines[len(head) :])


def _merge_and_compare(tmp_path, fake, cfg, name, *extra):
    out = tmp_path / "merged.jsonl"
    merge_main(["--config", cfg, "--output-path", str(out), *extra])
    for suffix, path in (("merged", out), ("errors", tmp_path / "merged.errors.jsonl")):
        got = _normalised(path, tmp_path, fake)
        golden = GOLDEN / f"{name}.{suffix}.jsonl"
        if os.environ.get("MMIRAGE_WRITE_GOLDEN"):
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_bytes(got)
        assert got == golden.read_bytes(), f"{golden.name} differs"
    leftovers = sorted(p.name for p in tmp_path.iterdir() if "merged" in p.name)
    assert leftovers == ["merged.errors.jsonl", "merged.jsonl"], leftovers  # no temp files


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_every_outcome_json_several_batches_and_unknown_id(tmp_path, provider_env, provider):
    fake = provider_env
    markers = {i * 2 + 1: m for i, m in enumerate(MIXED[provider])}
    markers[len(markers) * 2 + 3] = "FAKE_FENCE"
    rows = _rows(len(markers) * 2 + 6, markers)
    cfg = _setup(tmp_path, provider, fake, rows, json_output=True, max_requests_per_chunk=7)
    fake.script(unknown_custom_id=True)  # no shuffle: messages name line offsets
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    _merge_and_compare(tmp_path, fake, cfg, f"every_outcome_{provider}", "--partitions", "3")


def test_the_partition_count_changes_no_byte_of_either_file(tmp_path, provider_env):
    # The every-outcome run again (errors, several batches, an unknown id), merged with
    # the default count (one partition for these rows) and with 5: the same golden files
    # as with 3 partitions.
    fake = provider_env
    markers = {i * 2 + 1: m for i, m in enumerate(MIXED["openai"])}
    markers[len(markers) * 2 + 3] = "FAKE_FENCE"
    rows = _rows(len(markers) * 2 + 6, markers)
    cfg = _setup(tmp_path, "openai", fake, rows, json_output=True, max_requests_per_chunk=7)
    fake.script(unknown_custom_id=True)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    _merge_and_compare(tmp_path, fake, cfg, "every_outcome_openai")
    _merge_and_compare(tmp_path, fake, cfg, "every_outcome_openai", "--partitions", "5")


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_expired_batch_partial_results(tmp_path, provider_env, provider):
    fake = provider_env
    cfg = _setup(tmp_path, provider, fake, _rows(10), max_requests_per_chunk=6)
    fake.script(expire_after_requests=4)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    _merge_and_compare(tmp_path, fake, cfg, f"expired_{provider}")


def test_source_changed_then_resubmission_link(tmp_path, provider_env):
    fake = provider_env
    rows = _rows(8, {2: "FAKE_ERROR:server_error"})
    cfg = _setup(tmp_path, "openai", fake, rows, max_requests_per_chunk=4)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    rows[5]["question"] = "A different question entirely?"
    rows[2]["question"] = rows[2]["question"].replace(" FAKE_ERROR:server_error", "")
    _write_rows(tmp_path, rows)
    _merge_and_compare(tmp_path, fake, cfg, "source_changed")
    errors_file = str(tmp_path / "merged.errors.jsonl")
    assert resubmit_main(["--config", cfg, "--from", errors_file, "--new-run-id", "r2"]) == 0
    _merge_and_compare(tmp_path, fake, cfg, "resubmitted", "--run-id", "r1", "--partitions", "2")


def test_source_changed_with_old_receipts(tmp_path, provider_env):
    fake = provider_env
    rows = _rows(8)
    cfg = _setup(tmp_path, "openai", fake, rows, max_requests_per_chunk=4)
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0
    receipt = tmp_path / "meta" / "batch_metadata.text.r1.jsonl"
    old = [json.loads(x) for x in receipt.read_bytes().split(b"\n") if x.strip()]
    for r in old:
        r.pop("request_hashes")
    receipt.write_text("".join(json.dumps(r) + "\n" for r in old), encoding="utf-8")
    rows[5]["question"] = "A different question entirely?"
    _write_rows(tmp_path, rows)
    _merge_and_compare(tmp_path, fake, cfg, "old_receipts_changed")


def test_skipped_invalid_rows_and_vanished_row(tmp_path, provider_env):
    fake = provider_env
    rows = _rows(9)
    rows[2]["question"] = None  # invalid: the input is null
    cfg = _setup(tmp_path, "openai", fake, rows)
    data = tmp_path / "rows.jsonl"
    lines = data.read_text(encoding="utf-8").splitlines()
    lines[6] = "{this line is not JSON"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert submit_main(["--config", cfg, "--run-id", "r1", "--skip-invalid-rows"]) == 0
    data.write_text("\n".join(lines[:8]) + "\n", encoding="utf-8")  # row 8 vanished
    _merge_and_compare(tmp_path, fake, cfg, "skipped_invalid")


def test_unfinished_run_never_submitted(tmp_path, provider_env):
    fake = provider_env
    cfg = _setup(tmp_path, "openai", fake, _rows(6), max_requests_per_chunk=2)
    fake.script(fail_batch_creates={"nth": 2, "permanent": True, "status": 400})
    assert submit_main(["--config", cfg, "--run-id", "r1"]) != 0
    _merge_and_compare(tmp_path, fake, cfg, "never_submitted")


def test_range_partitions_are_monotone_and_bounded():
    from mmirage_beam.transforms.merge import RangePartitioner, partition_bounds

    part = RangePartitioner(100, 199, partition_bounds(100, 199, 4))
    ids = [part(i) for i in range(0, 400)]
    assert ids == sorted(ids)  # a lower partition never holds a higher index
    assert {part(i) for i in range(100, 200)} == {0, 1, 2, 3}
    assert part(99) == -1 and part(200) == 4  # outside the receipts' span: new ranges
    sizes = [ids.count(p) for p in set(ids)]
    assert max(sizes) <= part.width == 25  # the same width everywhere


def test_the_default_partitions_hold_at_most_their_width_whatever_the_span():
    from mmirage_beam.transforms.merge import RangePartitioner, partition_bounds, partitions_for

    for lo, hi, width in [
        (0, 199_999, 25_000),
        (0, 999_999, 25_000),
        (7, 7, 25_000),
        (0, 25_000, 25_000),
        (10, 100, 7),
    ]:
        n = partitions_for(lo, hi, width)
        part = RangePartitioner(lo, hi, partition_bounds(lo, hi, n))
        assert part.width <= width, (lo, hi, width)
        assert n == -(-(hi - lo + 1) // width)  # and no more partitions than that takes
    # 200,000 and 1,000,000 rows: partitions of the same 25,000 rows, not 66,667 and 90,909
    assert partitions_for(0, 199_999, 25_000) == 8
    assert partitions_for(0, 999_999, 25_000) == 40


def test_a_failed_merge_leaves_no_temporary_files(tmp_path, provider_env, monkeypatch, capsys):
    from mmirage_beam.transforms import merge as merge_mod

    fake = provider_env
    cfg = _setup(tmp_path, "openai", fake, _rows(6))
    assert submit_main(["--config", cfg, "--run-id", "r1"]) == 0

    def broken(self, element):
        raise RuntimeError("disk full while joining")

    monkeypatch.setattr(merge_mod._JoinPartitionFn, "process", broken)
    out = tmp_path / "merged.jsonl"
    capsys.readouterr()
    # the job's failure is one message naming the cause and the command to merge again
    assert merge_main(["--config", cfg, "--output-path", str(out)]) == 1
    err = capsys.readouterr().err
    assert "the merge job failed: disk full while joining" in err and "mmirage merge" in err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if "merged" in p.name] == []  # temp folder gone
