"""Cut the configured datasets into splits, the units of parallel reading.

Construction time only, metadata only: JSONL files into byte ranges of about
``desired_split_bytes`` (a compressed file whole), Parquet files into row groups (from
their footers), HuggingFace ``save_to_disk`` directories into the Arrow files their
``state.json`` lists. :class:`~mmirage_beam.io.readers.ReadDatasets` counts and reads
the splits; ``split_id`` order is source_index order.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import posixpath
from collections.abc import Sequence
from typing import Any, Protocol

from apache_beam.io.filesystem import BeamIOError, CompressionTypes
from apache_beam.io.filesystems import FileSystems

from mmirage_beam.errors import ConfigError

_LOGGER = logging.getLogger(__name__)


class DatasetSource(Protocol):
    """What the readers take of one dataset, ``loading_params.datasets[i]``: its
    ``path`` (a file, a glob, a folder or a URI) and ``type`` (``JSONL``, ``parquet`` or
    ``loadable``, any case). :class:`mmirage_beam.config.DatasetConfig` is one; the
    readers name no config class, so ``io/`` stays below ``config/``."""

    @property
    def path(self) -> str: ...

    @property
    def type(self) -> str: ...


_JSONL, _PARQUET, _ARROW = "JSONL", "parquet", "loadable"
_TYPES = {"jsonl": _JSONL, "parquet": _PARQUET, "loadable": _ARROW}
# Files picked up when a dataset path is a directory (compressed variants allowed for JSONL).
# ``.json`` is left out: directories often hold JSON metadata (``state.json``...); use a glob
# such as ``dir/*.json`` for JSONL files named ``.json``.
_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonlines")
_PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
_COMPRESSION_SUFFIXES = ("", ".gz", ".bz2", ".deflate", ".zst", ".zstd", ".lzma", ".xz")


@dataclasses.dataclass(frozen=True)
class _Split:
    """One unit of parallel work; ``split_id`` order is source_index order.

    Attributes:
        split_id: global ordinal over all splits of all datasets.
        dataset_index: position of the dataset in the config.
        dataset_path: the dataset's configured ``path``.
        kind: ``"JSONL"``, ``"parquet"`` or ``"loadable"``.
        path: the file to read.
        file_id: global ordinal of ``path`` (JSONL line numbers restart per file).
        start: JSONL: first byte of the range; Parquet: row-group index.
        end: JSONL: first byte after the range, ``None`` to read to the end of the file.
        num_rows: Parquet: rows in the row group (from the footer).
        compressed: JSONL: the file is compressed (read whole, decompressed).
    """

    split_id: int
    dataset_index: int
    dataset_path: str
    kind: str
    path: str
    file_id: int
    start: int = 0
    end: int | None = None
    num_rows: int | None = None
    compressed: bool = False


def _file_splits(
    kind: str, file_path: str, size: int, dataset_index: int, desired_split_bytes: int
) -> list[dict[str, Any]]:
    """Where each split of one data file lies: the :class:`_Split` fields past
    ``file_id`` (``start``, ``end``, ``num_rows``, ``compressed``), in file order.

    Args:
        kind: ``"JSONL"``, ``"parquet"`` or ``"loadable"`` (normalised).
        file_path: the file.
        size: JSONL: its size in bytes (else unused).
        dataset_index: the dataset's position in the config (for error keys).
        desired_split_bytes: JSONL: the byte range of one split.

    Returns:
        JSONL: byte ranges of ``desired_split_bytes`` (none for an empty file), or the
        whole file when it is compressed; Parquet: one split per row group, with its row
        count; loadable: the whole file.

    Raises:
        ConfigError: a Parquet footer cannot be read (:func:`_parquet_row_group_rows`).
    """
    if kind == _JSONL:
        compressed = (
            CompressionTypes.detect_compression_type(file_path) != CompressionTypes.UNCOMPRESSED
        )
        if compressed:
            return [{"start": 0, "end": None, "compressed": True}]
        return [
            {"start": start, "end": min(start + desired_split_bytes, size), "compressed": False}
            for start in range(0, size, desired_split_bytes)
        ]
    if kind == _PARQUET:
        return [
            {"start": group, "num_rows": num_rows}
            for group, num_rows in enumerate(_parquet_row_group_rows(file_path, dataset_index))
        ]
    return [{}]


def _list_splits(datasets: Sequence[DatasetSource], desired_split_bytes: int) -> tuple[_Split, ...]:
    splits: list[_Split] = []
    file_id = 0
    for index, ds in enumerate(datasets):
        key = f"loading_params.datasets[{index}]"
        path, kind = getattr(ds, "path", None), getattr(ds, "type", None)
        if not isinstance(path, str) or not path:
            raise ConfigError(f"{key}.path", "is required")
        if not isinstance(kind, str) or kind.lower() not in _TYPES:
            raise ConfigError(
                f"{key}.type", f"must be one of JSONL, loadable, parquet, got {kind!r}"
            )
        kind = _TYPES[kind.lower()]
        first = len(splits)
        if kind == _JSONL:
            files = _expand_paths(path, index, _JSONL_SUFFIXES)
        elif kind == _PARQUET:
            files = _expand_paths(path, index, _PARQUET_SUFFIXES)
        else:
            files = [(f, 0) for f in _hf_arrow_files(path, index)]
        for file_path, size in files:
            for where in _file_splits(kind, file_path, size, index, desired_split_bytes):
                splits.append(_Split(len(splits), index, path, kind, file_path, file_id, **where))
            file_id += 1
        _LOGGER.info(
            "ReadDatasets: dataset %d (%s %s): %d file(s), %d split(s)",
            index,
            kind,
            path,
            len(files),
            len(splits) - first,
        )
    return tuple(splits)


def _has_glob(path: str) -> bool:
    return any(c in path for c in "*?[")


def _match(pattern: str, key: str) -> list[tuple[str, int]]:
    try:
        result = FileSystems.match([pattern])[0]
    except (BeamIOError, ValueError, OSError) as exc:
        raise ConfigError(key, f"cannot list {pattern!r}: {exc}") from None
    return [(m.path, m.size_in_bytes) for m in result.metadata_list]


def _expand_paths(path: str, index: int, suffixes: tuple[str, ...]) -> list[tuple[str, int]]:
    """``(file path, size in bytes)`` of the files a dataset path names, in sorted order."""
    key = f"loading_params.datasets[{index}].path"
    if _has_glob(path):
        files = _match(path, key)
        if not files:
            raise ConfigError(key, f"no file matches the pattern {path!r}")
        return sorted(files)
    is_local_dir = "://" not in path and os.path.isdir(path)
    if not is_local_dir:
        files = [(p, size) for p, size in _match(path, key) if p.rstrip("/") == path.rstrip("/")]
        if files:
            return files
    try:
        pattern = FileSystems.join(path, "*")
    except ValueError as exc:
        raise ConfigError(key, f"cannot access {path!r}: {exc}") from None
    wanted = tuple(s + c for s in suffixes for c in _COMPRESSION_SUFFIXES)
    listed = [
        (p, size)
        for p, size in _match(pattern, key)
        if not posixpath.basename(p).startswith((".", "_")) and p.lower().endswith(wanted)
    ]
    if listed:
        return sorted(listed)
    if is_local_dir:
        raise ConfigError(key, f"directory {path!r} holds no file ending in {', '.join(suffixes)}")
    raise ConfigError(
        key,
        f"file not found: {path!r} (relative paths in a config are relative to the folder "
        "you run mmirage in, as in MMIRAGE, not to the config file's folder)",
    )


def _parquet_row_group_rows(path: str, index: int) -> list[int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            metadata = pq.read_metadata(f)
    except (OSError, pa.ArrowException) as exc:
        raise ConfigError(
            f"loading_params.datasets[{index}].path",
            f"cannot read the Parquet footer of {path!r}: {exc}",
        ) from None
    return [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]


def _read_json_file(path: str) -> Any:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return json.loads(f.read().decode("utf-8"))


def _hf_arrow_files(path: str, index: int) -> list[str]:
    """Arrow files of a HF ``save_to_disk`` directory, in ``state.json`` order."""
    key = f"loading_params.datasets[{index}].path"
    try:
        state_path = FileSystems.join(path, "state.json")
        dict_path = FileSystems.join(path, "dataset_dict.json")
        if not FileSystems.exists(state_path):
            if FileSystems.exists(dict_path):
                names = _read_json_file(dict_path).get("splits", [])
                example = FileSystems.join(path, names[0]) if names else f"{path}/<split>"
                raise ConfigError(
                    key,
                    f"{path!r} is a DatasetDict (splits: {', '.join(map(str, names))}); set "
                    f"path to one split's directory, e.g. {example!r}",
                )
            if not FileSystems.exists(path):
                raise ConfigError(key, f"dataset directory not found: {path!r}")
            raise ConfigError(
                key, f"{path!r} is not a HuggingFace save_to_disk directory (no state.json)"
            )
        state = _read_json_file(state_path)
        names = [entry["filename"] for entry in state["_data_files"]]
        files = [FileSystems.join(path, name) for name in names]
    except ConfigError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(key, f"cannot read {path!r}/state.json: {exc!r}") from None
    for f in files:
        if not FileSystems.exists(f):
            raise ConfigError(key, f"Arrow file listed in state.json not found: {f!r}")
    return files
