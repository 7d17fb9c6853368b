"""Receipts: one JSON line per submitted batch, mapping custom_ids to source_index.

File names (DESIGN.md): ``<base>.<modality>.<run_id>.jsonl`` where ``base`` is
``metadata_output_path`` without ``.jsonl``; a dry run writes
``<base>.dry-run.<modality>.<run_id>.jsonl``. Fields are MMIRAGE's (``provider,
chunk_id, provider_batch_id, status, custom_id_to_source_index, request_hash,
model_params_snapshot, submitted_request_count, total_bytes, has_oversized_request,
flush_reason, submitted_at_utc``) plus ``run_id``, ``output_name``, ``modality``, so
either tool reads the other's receipts.

Durability: the moment a provider accepts a batch, its receipt is written as its own
file ``<receipt file>.parts/<chunk_id>.json`` (temporary name, then rename, through
Beam's FileSystems so remote storage works too). When the pipeline finishes, the parts of
each receipt file are consolidated into it and the parts folder is removed; readers
accept either form, so a run that died midway still has every receipt.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import uuid
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Optional

from mmirage_beam.crashpoints import crash_point
from mmirage_beam.io.fs import (
    delete_files,
    delete_folder,
    list_files,
    replace_file,
    write_durably,
)
from mmirage_beam.jsonl import iter_jsonl_file
from mmirage_beam.request_hashes import (  # noqa: F401 (public here too)
    REQUEST_HASH_CHARS,
    parsed_request_hash,
    request_hash,
    request_line_hash,
)
from mmirage_beam.reuse import REUSED_STATUS
from mmirage_beam.run.layout import RunLayout, part_chunk_id, parts_dir
from mmirage_beam.run.records import Receipt, ReceiptJson, SubmittedMarker


def receipt_path(base: str, modality: str, run_id: str, dry_run: bool = False) -> str:
    """``<base>.<modality>.<run_id>.jsonl`` (``<base>.dry-run.<modality>...`` for dry runs)."""
    return RunLayout(base, run_id).receipt(modality, dry_run)


def make_receipt(**fields: Any) -> ReceiptJson:
    """The receipt line (a dict) of :meth:`Receipt.for_chunk
    <mmirage_beam.run.records.Receipt.for_chunk>`, which takes the same keywords
    (``provider``, ``chunk``, ``provider_batch_id``, ``status``, ``run_id``,
    ``output_type``, ``model``, ``submitted_at``, ``attempt``, ``parent_run_id``,
    ``metas``, ``maps``) and documents them.

    Raises:
        TypeError: a keyword ``Receipt.for_chunk`` does not take, or a missing one.
    """
    return Receipt.for_chunk(**fields).to_json()


def reused_receipt(
    *,
    provider: str,
    run_id: str,
    attempt: int,
    output_name: str,
    output_type: str,
    modality: str,
    model: Optional[str],
    reused_from: str,
    provider_batch_id: str,
    entries: Iterable[tuple[str, int, str, str, int]],
) -> ReceiptJson:
    """The receipt of the requests of one output that reuse answers of one earlier batch.

    Shaped like :func:`make_receipt`'s (so ``check``, ``merge``,
    resumes and the fingerprint read it as one), with ``status`` ``reused``,
    ``reused_from`` (the run that paid) and ``reused_custom_ids`` (this run's
    custom_id -> the earlier batch's custom_id holding the answer).

    Args:
        entries: ``(custom_id, source_index, earlier custom_id, request line hash,
            request bytes)`` of each reused request.
    """
    ordered = sorted(entries)
    index = {cid: int(idx) for cid, idx, _old, _h, _n in ordered}
    snapshot: dict[str, Any] = {
        "output_name": output_name,
        "output_type": output_type,
        "modality": modality,
    }
    if model:
        snapshot["model"] = model
    safe_batch = "".join(c if c.isalnum() or c in "_-" else "_" for c in provider_batch_id)
    return {
        "provider": provider,
        "chunk_id": f"reused-a{attempt}-{output_name}-{modality}-{safe_batch}",
        "provider_batch_id": provider_batch_id,
        "status": REUSED_STATUS,
        "custom_id_to_source_index": index,
        # no chunk was built: a digest of the requests' own hashes (each is checked)
        "request_hash": hashlib.sha256(
            "".join(h for _c, _i, _o, h, _n in ordered).encode("ascii")
        ).hexdigest(),
        "request_hashes": {cid: h for cid, _i, _o, h, _n in ordered},
        "reused_custom_ids": {cid: old for cid, _i, old, _h, _n in ordered},
        "reused_from": reused_from,
        "model_params_snapshot": snapshot,
        "submitted_request_count": len(index),
        "total_bytes": sum(n for *_rest, n in ordered),
        "has_oversized_request": False,
        "flush_reason": REUSED_STATUS,
        "submitted_at_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "run_id": run_id,
        "output_name": output_name,
        "modality": modality,
        "attempt": attempt,
    }


def submitted_marker_path(base: str, run_id: str) -> str:
    """``<base>.submitted.<run_id>.json``: written by the submit pipeline once every chunk
    of the attempt has its receipt (every batch exists at the provider), before the
    placeholder rows are published. With a run record still ``finished: false``, it means
    only the finish steps (placeholder publication, consolidation, run record) are left:
    ``mmirage run --run-id`` completes them without contacting the provider. The launcher
    removes it when an attempt starts and once the run is recorded finished."""
    return RunLayout(base, run_id).submitted_marker


def mark_submitted(receipts: int, base: str, run_id: str, attempt: int) -> int:
    """Write :func:`submitted_marker_path` (``{"run_id", "attempt", "receipts"}``, the
    attempt's receipt count); returns ``receipts`` (a Beam step's output)."""
    marker = SubmittedMarker(run_id, attempt, int(receipts))
    write_durably(submitted_marker_path(base, run_id), marker.encode())
    return receipts


def submission_complete(base: str, run_id: str) -> bool:
    """Whether the last attempt of ``run_id`` receipted every chunk it built (its
    :func:`submitted_marker_path` exists)."""
    from mmirage_beam.io.filesystems import FileSystems

    return FileSystems.exists(submitted_marker_path(base, run_id))


def receipt_line(receipt: dict[str, Any]) -> bytes:
    """One receipt as a JSONL line (UTF-8, ``\\n``-terminated)."""
    return (json.dumps(receipt, ensure_ascii=False) + "\n").encode("utf-8")


def read_receipt_part(path: str) -> Optional[dict[str, Any]]:
    """The receipt stored at a part path, or None when there is none."""
    from mmirage_beam.io.filesystems import FileSystems

    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return json.loads(f.read().decode("utf-8"))


def consolidate(receipt_file: str) -> int:
    """Rewrite ``receipt_file`` from its current lines and its parts, then drop the parts.

    Receipts already in ``receipt_file`` are kept; parts win for the same chunk_id; the
    file is in chunk_id order. Unresolved intents (``*.intent``) are kept, and with them
    the parts folder. Returns the number of receipts in the file. A missing parts folder
    is a no-op. The temporary files of a durable write that died before its rename
    (``<receipt_file>.tmp-*``, ``<parts>/*.tmp-*``: never read, the write's target kept
    its old content) are deleted first (issue 38: one was left after a crash); the run's
    lease is held, so no write of it is under way.

    Streamed: one receipt is in memory at a time (a first pass notes each receipt's
    chunk_id and where it is, the second copies them in order into a temporary file that
    is then renamed over ``receipt_file``), so a run of millions of requests is
    consolidated in the memory of its biggest receipt.
    """
    from mmirage_beam.io.filesystems import FileSystems

    pdir = parts_dir(receipt_file)
    _delete_leftover_temps(receipt_file, pdir)
    matches = list_files(pdir, "*.json")
    exists = FileSystems.exists(receipt_file)
    if not matches:
        return sum(1 for _ in _receipt_lines(receipt_file)) if exists else 0
    # chunk_id -> (part path, None) or (None, (offset, length) in receipt_file)
    where: dict[str, tuple[Optional[str], Optional[tuple[int, int]]]] = {}
    if exists:
        for line, r in _receipt_lines(receipt_file):
            where[r["chunk_id"]] = (None, (line.offset, line.length))
    for path in matches:
        # a part is named after its chunk (part_path): no parse to find out which
        where[part_chunk_id(path)] = (path, None)
    if where:  # no receipt yet (only intents): no empty receipt file
        tmp = f"{receipt_file}.tmp-{uuid.uuid4().hex}"
        with FileSystems.create(tmp) as out:
            for chunk_id in sorted(where):
                part, span = where[chunk_id]
                if part is not None:
                    out.write(_part_line(part))
                    continue
                assert span is not None
                r = json.loads(_read_span(receipt_file, *span).decode("utf-8"))
                out.write(receipt_line(r))
        crash_point("tmp_written")
        replace_file(tmp, receipt_file)

    crash_point("consolidated")
    FileSystems.delete(matches)
    # Intents of interrupted submissions stay until a resume resolves them.
    if not list_files(pdir, "**"):
        delete_folder(pdir)
    return len(where)


def _delete_leftover_temps(receipt_file: str, pdir: str) -> None:
    """Delete what :func:`~mmirage_beam.io.fs.write_durably` and :func:`consolidate`
    left of a write that died between its temporary file and its rename."""
    from mmirage_beam.io.filesystems import FileSystems

    found = FileSystems.match([f"{receipt_file}.tmp-*"])[0].metadata_list
    leftovers = [m.path for m in found] + list_files(pdir, "*.tmp-*")
    if leftovers:
        delete_files(leftovers)


def _part_line(path: str) -> bytes:
    """The receipt line of a part file, as it was written (``receipt_line`` of the
    receipt: copied, not parsed and encoded again); a part that is not one JSON object
    line is parsed and encoded again (a malformed one raises ``json.JSONDecodeError``,
    as before)."""
    from mmirage_beam.io.filesystems import FileSystems

    with FileSystems.open(path, compression_type="uncompressed") as f:
        data = f.read()
    if data.startswith(b"{") and data.endswith(b"}\n") and data.count(b"\n") == 1:
        return data
    return receipt_line(json.loads(data.decode("utf-8")))


def _receipt_lines(path: str) -> Iterator[tuple[Any, dict[str, Any]]]:
    """``(RawLine, receipt)`` of every non-blank line of a receipt file, one at a time
    (split on ``\\n`` only: a provider message in a receipt may hold U+2028)."""
    yield from iter_jsonl_file(path)


def _read_span(path: str, offset: int, length: int) -> bytes:
    from mmirage_beam.io.filesystems import FileSystems

    with FileSystems.open(path, compression_type="uncompressed") as f:
        f.seek(offset)
        return f.read(length)


def consolidate_run(base: str, run_id: str, dry_run: bool = False) -> dict[str, int]:
    """:func:`consolidate` every modality's receipt file of a run.

    Returns:
        receipt file -> number of receipts, for the files that hold at least one.
    """
    counts = {}
    for modality in MODALITIES:
        path = receipt_path(base, modality, run_id, dry_run)
        n = consolidate(path)
        if n:
            counts[path] = n
    return counts


def pending_intents(base: str, run_id: str) -> list[str]:
    """Intent files of ``run_id`` still present: chunks whose provider call started but
    whose receipt was never written (the provider may or may not have accepted them)."""
    found = []
    for modality in MODALITIES:
        found.extend(list_files(parts_dir(receipt_path(base, modality, run_id)), "*.intent"))
    return sorted(found)


def read_receipts(path: str) -> list[dict[str, Any]]:
    """Every receipt in a receipt file (blank lines skipped); parts folder included."""
    from mmirage_beam.io.filesystems import FileSystems

    out: dict[str, dict[str, Any]] = {}
    if FileSystems.exists(path):
        # split on "\n" only: a provider message in a receipt may hold U+2028
        for _line, r in iter_jsonl_file(path):
            out[r.get("chunk_id") or f"#{len(out)}"] = r

    for part in list_files(parts_dir(path), "*.json"):
        r = read_receipt_part(part)
        if r is not None:
            out[r["chunk_id"]] = r
    return [out[k] for k in sorted(out)]


#: Receipt fields that hold one entry per request (dataset-sized across a run's
#: receipts): :func:`iter_located_receipts` callers keep them out of what they hold.
PER_REQUEST_FIELDS = ("custom_id_to_source_index", "request_hashes", "reused_custom_ids")


def source_index_range(mapping: Any) -> Optional[tuple[int, int]]:
    """``(lowest, highest)`` source_index of a receipt's ``custom_id_to_source_index``
    (values may be ints or digit strings), streamed (no list of the indices); None when
    it maps nothing or is not a dict."""
    lo = hi = None
    if isinstance(mapping, dict):
        for i in mapping.values():
            i = int(i)
            lo = i if lo is None or i < lo else lo
            hi = i if hi is None or i > hi else hi
    return (lo, hi) if lo is not None and hi is not None else None


class ReceiptLocation(NamedTuple):
    """Where one receipt is stored, to read it back (:func:`read_receipt_at`).

    Attributes:
        path: a receipt file (one receipt per line) or a ``.parts`` file (one receipt).
        offset: byte offset of its line in ``path``; -1 for a part file (the whole file).
        length: bytes of that line, its ``\\n`` included; -1 for a part file.
    """

    path: str
    offset: int = -1
    length: int = -1


def read_receipt_at(location: ReceiptLocation) -> ReceiptJson:
    """The receipt stored at ``location``, read whole (its per-request maps included).

    Raises:
        ValueError: nothing there, or not a receipt (the file changed since it was read).
    """
    if location.offset < 0:
        r = read_receipt_part(location.path)
    else:
        r = json.loads(_read_span(location.path, location.offset, location.length))
    if not isinstance(r, dict):
        raise ValueError(f"no receipt at {location.path} (offset {location.offset})")
    return r


def iter_located_receipts(path: str) -> Iterator[tuple[ReceiptLocation, Any]]:
    """The receipts :func:`read_receipts` returns, in the same order, one at a time with
    where each is stored. Streamed: one receipt in memory at a time, plus a location per
    receipt (each is parsed twice, once to find it and once to yield it)."""
    from mmirage_beam.io.filesystems import FileSystems

    where: dict[str, ReceiptLocation] = {}
    if FileSystems.exists(path):
        for line, r in _receipt_lines(path):
            key = (r.get("chunk_id") if isinstance(r, dict) else None) or f"#{len(where)}"
            where[key] = ReceiptLocation(path, line.offset, line.length)
    for part in list_files(parts_dir(path), "*.json"):
        r = read_receipt_part(part)
        if r is not None:
            where[r["chunk_id"]] = ReceiptLocation(part)
    for key in sorted(where):
        loc = where[key]
        if loc.offset < 0:
            yield loc, read_receipt_part(loc.path)
        else:
            yield loc, json.loads(_read_span(loc.path, loc.offset, loc.length))


MODALITIES = ("text", "multimodal")


class ReceiptFile(NamedTuple):
    """One receipt file found for a config: its path, run id, modality and mtime (s)."""

    path: str
    run_id: str
    modality: str
    mtime: float


def receipt_patterns(base: str) -> list[str]:
    """The glob patterns searched for receipts of ``base`` (for messages)."""
    every = RunLayout(base, "*")
    return [every.receipt(m) for m in MODALITIES] + [every.part(m, "*") for m in MODALITIES]


def find_receipt_files(
    base: str, run_id: Optional[str] = None
) -> tuple[list[ReceiptFile], list[str]]:
    """Receipt files of ``base``, newest run first, and the dry-run files skipped.

    Finds ``<base>.<modality>.<run_id>.jsonl`` (and the ``.parts`` folder of a run that
    stopped before consolidating). ``<base>.dry-run.*`` files are returned separately,
    never as receipts. With ``run_id``, only that run.
    """
    from mmirage_beam.io.filesystems import FileSystems

    found: dict[str, ReceiptFile] = {}
    skipped: list[str] = []
    # A folder is not matched by a glob on every filesystem (local: never), so the parts
    # of an unconsolidated run are found through the files inside them.
    patterns = [f"{base}.*.jsonl", f"{base}.*.jsonl.parts/*.json"]
    for result in FileSystems.match(patterns):
        for m in result.metadata_list:
            path = m.path
            if path.endswith(".json") and ".jsonl.parts/" in path:
                path = path.rsplit("/", 1)[0][: -len(".parts")]
            if not path.startswith(base + "."):
                continue
            rest = path[len(base) + 1 :]
            if rest.startswith("dry-run."):
                dry = rest.split(".")  # dry-run.<modality>.<run_id>.jsonl
                other_run = run_id is not None and (len(dry) != 4 or dry[2] != run_id)
                if path not in skipped and not other_run:  # --run-id: its own only
                    skipped.append(path)
                continue
            parts = rest.split(".")
            if len(parts) != 3 or parts[0] not in MODALITIES or parts[2] != "jsonl":
                continue
            if run_id is not None and parts[1] != run_id:
                continue
            mtime = float(getattr(m, "last_updated_in_seconds", 0.0) or 0.0)
            prev = found.get(path)
            if prev is None or mtime > prev.mtime:
                found[path] = ReceiptFile(path, parts[1], parts[0], mtime)
    # Newest run first: a run's time is its newest file's.
    run_time: dict[str, float] = {}
    for f in found.values():
        run_time[f.run_id] = max(run_time.get(f.run_id, 0.0), f.mtime)
    ordered = sorted(
        found.values(),
        key=lambda f: (-run_time[f.run_id], f.run_id, MODALITIES.index(f.modality)),
    )
    return ordered, sorted(skipped)


def adoption_rejected(receipt: Mapping[str, Any] | Receipt) -> bool:
    """Whether ``receipt`` is an adoption that was withdrawn (``adoption.rejected``): its
    batch is not this chunk's (another receipt names it, or its results hold other
    custom_ids). Readers of receipts (check, merge) must skip such a receipt; its requests
    were sent again under a later attempt's chunk.

    An adopted receipt carries ``adoption = {"method": "created_at+request_count",
    "confirmed": bool[, "rejected": reason]}``; ``confirmed: false`` means the batch was
    matched by creation time and request count only: merge should check that the
    batch's result custom_ids are the receipt's ``custom_id_to_source_index`` keys.
    """
    if isinstance(receipt, Receipt):
        return receipt.adoption_rejected
    adoption = receipt.get("adoption")
    return isinstance(adoption, dict) and bool(adoption.get("rejected"))
