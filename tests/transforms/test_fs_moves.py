"""Moves between filesystems and schemes (``mmirage_beam.io.fs.move_file``).

``FileSystems.rename`` fails across devices (``EXDEV``: "Invalid cross-device link") and
across schemes; every file the project publishes somewhere else than where it was
written goes through ``move_file`` instead. The tmpfs cases use ``/dev/shm`` (a tmpfs on
Linux) and are skipped, with the reason, where it is not a filesystem of its own.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from mmirage_beam.io.fs import move_file, move_files, same_filesystem, write_durably
from mmirage_beam.io.writers import WriteJsonLinesShards
from tests import memfs  # noqa: F401  (registers mem://)

SHM = Path("/dev/shm")
PAYLOAD = b"".join(b'{"source_index": %d, "text": "\xc3\xa9t\xc3\xa9"}\n' % i for i in range(3000))


def _other_filesystem(tmp_path: Path) -> Path:
    """A fresh folder on a tmpfs that is not ``tmp_path``'s filesystem (else skip)."""
    if not SHM.is_dir() or not os.access(SHM, os.W_OK):
        pytest.skip("/dev/shm is missing or not writable")
    if os.stat(SHM).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm is on the same filesystem as the test folder")
    folder = SHM / f"mmirage-test-{uuid.uuid4().hex[:12]}"
    folder.mkdir()
    return folder


@pytest.fixture
def ramdisk(tmp_path):
    folder = _other_filesystem(tmp_path)
    yield folder
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def test_a_plain_rename_across_devices_fails_which_is_why_move_file_exists(tmp_path, ramdisk):
    src = tmp_path / "a.jsonl"
    src.write_bytes(b"x\n")
    with pytest.raises(Exception, match="cross-device"):
        FileSystems.rename([str(src)], [str(ramdisk / "a.jsonl")])
    assert not same_filesystem(str(src), str(ramdisk / "a.jsonl"))


@pytest.mark.parametrize("direction", ["local_to_tmpfs", "tmpfs_to_local"])
def test_move_file_between_the_main_disk_and_a_tmpfs(tmp_path, ramdisk, direction):
    here, there = (tmp_path, ramdisk) if direction == "local_to_tmpfs" else (ramdisk, tmp_path)
    src = here / "rows.jsonl"
    src.write_bytes(PAYLOAD)
    dst = there / "shard_0" / "rows.jsonl"  # the destination folder does not exist yet
    move_file(str(src), str(dst))
    assert dst.read_bytes() == PAYLOAD
    assert not src.exists()
    assert os.listdir(dst.parent) == ["rows.jsonl"]  # no temporary file left


def test_move_file_replaces_an_existing_destination_whole(tmp_path, ramdisk):
    src, dst = ramdisk / "new.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(PAYLOAD)
    dst.write_bytes(b"old\n")
    move_file(str(src), str(dst), block_bytes=1000)  # many blocks
    assert dst.read_bytes() == PAYLOAD
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl"]


def test_move_file_leaves_the_source_when_the_destination_cannot_be_written(tmp_path, ramdisk):
    src = ramdisk / "rows.jsonl"
    src.write_bytes(PAYLOAD)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the folder should be")
    with pytest.raises((OSError, BeamIOError)):
        move_file(str(src), str(blocker / "rows.jsonl"))
    assert src.read_bytes() == PAYLOAD  # nothing lost


def test_move_file_on_one_filesystem_is_a_rename(tmp_path):
    src, dst = tmp_path / "a.jsonl", tmp_path / "sub" / "b.jsonl"
    src.write_bytes(PAYLOAD)
    ino = os.stat(src).st_ino
    assert same_filesystem(str(src), str(dst))
    move_file(str(src), str(dst))
    assert os.stat(dst).st_ino == ino and not src.exists()


def test_move_files_between_local_and_mem_both_ways(tmp_path):
    root = f"mem://fs-moves-{uuid.uuid4().hex[:8]}"
    local = tmp_path / "a.jsonl"
    local.write_bytes(PAYLOAD)
    assert not same_filesystem(str(local), f"{root}/a.jsonl")
    move_files([str(local)], [f"{root}/out/a.jsonl"])
    assert memfs.objects(root) == {f"{root}/out/a.jsonl": PAYLOAD}
    assert not local.exists()

    back = tmp_path / "back" / "a.jsonl"
    move_file(f"{root}/out/a.jsonl", str(back))
    assert back.read_bytes() == PAYLOAD
    assert memfs.objects(root) == {}


def test_move_file_within_mem_uses_its_own_rename():
    root = f"mem://fs-moves-{uuid.uuid4().hex[:8]}"
    write_durably(f"{root}/a", b"1\n")
    move_file(f"{root}/a", f"{root}/b/c")
    assert memfs.objects(root) == {f"{root}/b/c": b"1\n"}


def test_move_files_refuses_mismatched_lists():
    with pytest.raises(ValueError, match="1 source"):
        move_files(["a"], [])


def _publish(staging: str, out_dir: str, lines: list[bytes], gate: int = 0) -> None:
    with BeamTestPipeline() as p:
        g = beam.pvalue.AsSingleton(p | "Gate" >> beam.Create([gate]))
        published = (
            p
            | beam.Create(lines)
            | WriteJsonLinesShards(
                out_dir, "placeholders.r1", staging_dir=staging, gate=g, replace_earlier=True
            )
        )
        assert_that(
            published | beam.Map(lambda path: path.rsplit("/", 1)[1].split("-")[0]),
            equal_to(["placeholders.r1"] if lines and not gate else []),
        )


def test_placeholder_rows_staged_on_a_tmpfs_are_published_to_the_main_disk(tmp_path, ramdisk):
    lines = [b'{"i": %d}\n' % i for i in range(50)]
    out = tmp_path / "shards" / "shard_0"
    out.mkdir(parents=True)
    stale = out / "placeholders.r1-00000-of-00003.jsonl"  # an earlier attempt's name
    stale.write_bytes(lines[0])
    other = out / "placeholders.r2-00000-of-00001.jsonl"  # another run: kept
    other.write_bytes(b"{}\n")
    _publish(str(ramdisk / "staged"), str(out), lines)
    files = sorted(out.iterdir())
    assert [f.name for f in files] == ["placeholders.r1-00000-of-00001.jsonl", other.name]
    assert sorted(files[0].read_bytes().splitlines(keepends=True)) == sorted(lines)
    assert not (ramdisk / "staged").exists()


def test_placeholder_rows_staged_locally_are_published_to_mem(tmp_path):
    root = f"mem://publish-{uuid.uuid4().hex[:8]}"
    lines = [b'{"i": %d}\n' % i for i in range(5)]
    _publish(str(tmp_path / "staged"), f"{root}/shard_0", lines)
    objs = memfs.objects(root)
    assert list(objs) == [f"{root}/shard_0/placeholders.r1-00000-of-00001.jsonl"]
    assert sorted(next(iter(objs.values())).splitlines(keepends=True)) == sorted(lines)
    assert not (tmp_path / "staged").exists()


def test_a_closed_gate_publishes_nothing(tmp_path):
    _publish(str(tmp_path / "staged"), str(tmp_path / "out"), [b"{}\n"], gate=2)
    assert not (tmp_path / "out").exists() and not (tmp_path / "staged").exists()
