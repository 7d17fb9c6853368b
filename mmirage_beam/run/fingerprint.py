"""Idempotent runs: a fingerprint of what a run would send, and the run record file.

The fingerprint (SHA-256, hex) covers what shapes the requests:

- the provider config (``provider``, ``model``, sampling parameters, endpoint,
  ``base_url``, chunk sizes, metadata...; not ``metadata_output_path`` nor
  ``timeout_seconds``, which change where receipts go or how long a call may take);
- ``processing_params.inputs`` and ``outputs`` (names, keys, prompts, output types and
  schemas);
- ``loading_params``: shard selection and, for every dataset, its path and type and, per
  file, its size, mtime and the SHA-256 of its first and last 64 KiB (two small reads per
  file: no second pass over the data).

The record ``<base>.run.<run_id>.json`` (beside the receipts, written through Beam's
FileSystems) holds::

    {"run_id": str, "fingerprint": str, "started_at": ISO 8601 UTC str,
     "finished": bool, "rows_read": int | null, "requests": int | null,
     "chunks_submitted": int | null, "estimate": {"<counter>:<output>": int} (optional)}

``limit`` (optional) is ``mmirage run --limit N``: the run covers the first N rows, and
its resumes and merges read only those. ``estimate`` holds the submit pipeline's token counters
(:data:`mmirage_beam.costs.tokens.TOKEN_METRICS`), read by ``mmirage runs``.

It is written with ``finished: false`` (and null counts) before the pipeline starts and
rewritten with ``finished: true`` and the pipeline's counters when the submission
pipeline completed; a record still ``finished: false`` is a run that stopped midway (or
is running).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
from typing import Any, Optional

from mmirage_beam.config.loader import PipelineConfig
from mmirage_beam.reuse import NOT_SENT
from mmirage_beam.run import store as _store
from mmirage_beam.run.layout import RunLayout
from mmirage_beam.run.records import RunRecord
from mmirage_beam.run.store import RunStore

#: bytes hashed at each end of every data file.
SAMPLE_BYTES = 64 * 1024


def run_record_path(base: str, run_id: str) -> str:
    """``<base>.run.<run_id>.json``."""
    return RunLayout(base, run_id).run_record


def _data_files(path: str) -> list[Any]:
    """FileMetadata of the files a dataset path names (a file, a glob or a folder)."""
    from mmirage_beam.io.filesystems import FileSystems

    if any(c in path for c in "*?["):
        return sorted(FileSystems.match([path])[0].metadata_list, key=lambda m: m.path)
    exact = [
        m
        for m in FileSystems.match([path])[0].metadata_list
        if m.path.rstrip("/") == path.rstrip("/")
    ]
    if exact:
        return exact
    pattern = FileSystems.join(path, "**")
    return sorted(FileSystems.match([pattern])[0].metadata_list, key=lambda m: m.path)


def _sample_hash(path: str, size: int) -> str:
    from mmirage_beam.io.filesystems import FileSystems

    h = hashlib.sha256()
    with FileSystems.open(path, compression_type="uncompressed") as f:
        h.update(f.read(SAMPLE_BYTES))
        if size > 2 * SAMPLE_BYTES:
            f.seek(size - SAMPLE_BYTES)
            h.update(f.read(SAMPLE_BYTES))
        elif size > SAMPLE_BYTES:
            h.update(f.read())
    return h.hexdigest()


def data_fingerprint(config: PipelineConfig) -> list[dict[str, Any]]:
    """Per dataset: path, type and ``[{path, size, mtime, sample_sha256}]`` of its files."""
    out = []
    for ds in config.datasets:
        files = []
        for m in _data_files(ds.path):
            files.append(
                {
                    "path": m.path,
                    "size": int(m.size_in_bytes),
                    "mtime": float(getattr(m, "last_updated_in_seconds", 0.0) or 0.0),
                    "sample_sha256": _sample_hash(m.path, int(m.size_in_bytes)),
                }
            )
        out.append(
            {
                "path": ds.path,
                "type": ds.type,
                "image_base_path": ds.image_base_path,
                "files": files,
            }
        )
    return out


def run_fingerprint(config: PipelineConfig, *, read_data: bool = True) -> str:
    """SHA-256 (hex) of what a run of ``config`` would send (see the module docstring).

    Args:
        config: the run's config.
        read_data: fingerprint the configured datasets too (shards and the files'
            sizes, mtimes and samples). False for a Beam YAML run, whose rows come from
            the pipeline: only the provider config, inputs and outputs count, and the
            fingerprint starts with ``beam-yaml-``.

    Raises:
        apache_beam.io.filesystem.BeamIOError / OSError: a data file cannot be read.
    """
    provider = {k: v for k, v in dataclasses.asdict(config.processor).items() if k not in NOT_SENT}
    shaped: dict[str, Any] = {
        "provider": provider,
        "inputs": [dataclasses.asdict(i) for i in config.inputs],
        "outputs": [dataclasses.asdict(o) for o in config.outputs],
    }
    if not read_data:
        text = json.dumps(shaped, sort_keys=True, default=str, separators=(",", ":"))
        return "beam-yaml-" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    shaped["num_shards"] = config.num_shards
    shaped["shard_id"] = config.shard_id
    shaped["datasets"] = data_fingerprint(config)
    if config.row_limit is not None:  # --limit N: a trial is its own run
        shaped["row_limit"] = config.row_limit
    text = json.dumps(shaped, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_run_record(
    run_id: str,
    fingerprint: str,
    *,
    started_at: Optional[str] = None,
    finished: bool = False,
    rows_read: Optional[int] = None,
    requests: Optional[int] = None,
    chunks_submitted: Optional[int] = None,
    estimate: Optional[dict[str, int]] = None,
    limit: Optional[int] = None,
) -> RunRecord:
    """The run record of ``run_id``, not written (``started_at``: now when None);
    :meth:`mmirage_beam.run.store.RunStore.write_run_record` writes it."""
    return RunRecord(
        run_id=run_id,
        fingerprint=fingerprint,
        started_at=started_at or _dt.datetime.now(_dt.timezone.utc).isoformat(),
        finished=finished,
        rows_read=rows_read,
        requests=requests,
        chunks_submitted=chunks_submitted,
        estimate=None if estimate is None else dict(estimate),
        limit=limit,
    )


def run_is_alive(base: str, run_id: str) -> bool:
    """Whether a run has not failed, judged locally from its files (no provider call):
    it holds a lease (running now), or has an intent (a batch possibly accepted), or
    has receipts of which at least one batch is not ``failed``."""
    store = RunStore(base, run_id)
    if store.read_lease() is not None:
        return True
    if store.pending_intents():
        return True
    statuses = [r.status for r in store.read_receipts()]
    return bool(statuses) and any(s != "failed" for s in statuses)


def matching_run_record(base: str, fingerprint: str) -> Optional[RunRecord]:
    """The newest run record of ``base`` with this fingerprint whose run has not failed
    (:func:`run_is_alive`), or None."""
    for record in _store.run_records(base):
        if record.fingerprint == fingerprint and run_is_alive(base, str(record.run_id)):
            return record
    return None
