"""``mmirage_beam.io.filesystems.FileSystems`` against Beam's own ``FileSystems`` on the
same local tree: the same matches (globs, folders, limits), bytes, renames, deletes and
errors, so the launcher's Beam-free path reads and writes exactly what Beam would."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems as Beam

from mmirage_beam.io.filesystems import FileSystems as Light


def _tree(root: Path) -> None:
    for rel, data in {
        "a.jsonl": b"1\n",
        "b.jsonl": b"22\n",
        "b.jsonl.parts/x.json": b"{}",
        "b.jsonl.parts/y.json": b"{} ",
        "sub/deep/c.jsonl": b"333\n",
        "sub/d.txt": b"",
        "x[1].jsonl": b"4",
        "run.gz": b"\x1f\x8b",
    }.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _matched(fs, patterns, limits=None):
    return [
        (
            r.pattern,
            sorted((m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in r.metadata_list),
        )
        for r in fs.match(patterns, limits)
    ]


@pytest.mark.parametrize(
    "rel",
    [
        "*.jsonl",
        "b.*.jsonl",
        "*.jsonl.parts/*.json",
        "**",
        "**.jsonl",
        "sub/*",
        "sub/",
        "?.jsonl",
        "[ab].jsonl",
        "[!a].jsonl",
        "x[1].jsonl",
        "a.jsonl",
        "sub",
        "missing.jsonl",
        "missing/*.jsonl",
    ],
)
def test_match_is_beams(tmp_path: Path, rel: str) -> None:
    _tree(tmp_path)
    pattern = str(tmp_path / rel) + ("/" if rel.endswith("/") else "")
    assert _matched(Light, [pattern]) == _matched(Beam, [pattern])
    assert _matched(Light, [pattern], [1]) == _matched(Beam, [pattern], [1])


def test_reads_writes_and_paths_are_beams(tmp_path: Path) -> None:
    _tree(tmp_path)
    new = str(tmp_path / "new" / "folder" / "f.jsonl")
    with Light.create(new, compression_type="uncompressed") as f:
        f.write(b"light")
    with Beam.open(new) as f:
        assert f.read() == b"light"
    with Light.open(str(tmp_path / "b.jsonl")) as f, Beam.open(str(tmp_path / "b.jsonl")) as g:
        assert f.read() == g.read()
    gz = str(tmp_path / "w.jsonl.gz")  # compressed: Beam's own writer and reader
    with Light.create(gz) as f:
        f.write(b"zipped")
    with Light.open(gz) as f:
        assert f.read() == b"zipped"
    assert Light.join(str(tmp_path), "a", "b") == Beam.join(str(tmp_path), "a", "b")
    assert Light.exists(str(tmp_path / "sub")) and not Light.exists(str(tmp_path / "nope"))
    assert Light.last_updated(new) == Beam.last_updated(new)
    with pytest.raises(BeamIOError):
        Light.last_updated(str(tmp_path / "nope"))
    with pytest.raises(IOError):
        Light.mkdirs(str(tmp_path / "sub"))


def test_rename_and_delete_are_beams(tmp_path: Path) -> None:
    _tree(tmp_path)
    a, moved = str(tmp_path / "a.jsonl"), str(tmp_path / "moved.jsonl")
    Light.rename([a], [moved])
    assert not os.path.exists(a) and Path(moved).read_bytes() == b"1\n"
    with pytest.raises(BeamIOError, match="Rename operation failed"):
        Light.rename([a], [moved])
    Light.delete([moved, str(tmp_path / "sub")])  # a file and a folder, recursively
    assert not os.path.exists(moved) and not os.path.exists(tmp_path / "sub")
    with pytest.raises(BeamIOError, match="Delete operation failed"):
        Light.delete([str(tmp_path / "gone.jsonl")])
    Light.delete([str(tmp_path / "b.jsonl.parts" / "*.json")])  # a glob: Beam's delete
    assert not list((tmp_path / "b.jsonl.parts").iterdir())
