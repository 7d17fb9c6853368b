"""WriteSingleFile is complete whatever the number of bundles and worker processes."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from mmirage_beam.io.writers import WriteJsonLinesShards, WriteSingleFile, concatenate_files

RUNNERS = {
    "in_memory": [],
    "multi_processing": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
}


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_every_line_of_every_bundle_reaches_the_single_file(tmp_path, runner):
    out = tmp_path / "out" / "lines.jsonl"
    lines = [f'{{"i": {i}}}\n'.encode() for i in range(5000)]
    with beam.Pipeline(options=PipelineOptions(RUNNERS[runner])) as p:
        (
            p
            | beam.Create(lines, reshuffle=True)  # several bundles
            | beam.Reshuffle()
            | WriteSingleFile(str(out))
        )
    got = out.read_bytes().splitlines(keepends=True)
    assert sorted(got) == sorted(lines)
    assert [p.name for p in out.parent.iterdir()] == ["lines.jsonl"]  # no parts left


def test_an_empty_pcollection_writes_no_file(tmp_path):
    out = tmp_path / "empty.jsonl"
    with beam.Pipeline() as p:
        p | beam.Create([], reshuffle=False).with_output_types(bytes) | WriteSingleFile(str(out))
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_concatenate_files_keeps_the_given_order_and_replaces_the_output(tmp_path):
    a, b, out = tmp_path / "a", tmp_path / "b", tmp_path / "out"
    a.write_bytes(b"1\n2\n")
    b.write_bytes(b"3\n")
    out.write_bytes(b"stale\n")
    concatenate_files([str(b), str(a)], str(out), block_bytes=2)
    assert out.read_bytes() == b"3\n1\n2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "out"]


@pytest.mark.parametrize("staged", [False, True])
def test_json_lines_shards_leave_no_temp_folder(tmp_path, staged):
    """The temp folder of Beam's WriteToFiles is removed by the writer's one final step
    (RemoveTempDir, or Publish with the staging folder that holds it)."""
    out = tmp_path / "out"
    staging = tmp_path / "staging"
    lines = [f'{{"i": {i}}}\n'.encode() for i in range(300)]
    with beam.Pipeline() as p:
        (
            p
            | beam.Create(lines, reshuffle=True)
            | WriteJsonLinesShards(str(out), "rows", staging_dir=str(staging) if staged else None)
        )
    files = sorted(out.iterdir())
    assert files and all(f.name.startswith("rows-") and f.suffix == ".jsonl" for f in files)
    assert sorted(b for f in files for b in f.read_bytes().splitlines(True)) == sorted(lines)
    assert not staging.exists()
