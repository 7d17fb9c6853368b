"""Receipt discovery, a part of a run's life that ``mmirage check``, ``merge``,
``resubmit``, ``cancel`` and ``runs`` share: find and read the receipt files of a config's
runs (ours or the original MMIRAGE tool's), skipping dry runs."""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

from mmirage_beam.errors import ConfigError, MmirageError
from mmirage_beam.providers.base import parse_timestamp
from mmirage_beam.run.layout import parts_dir, receipts_base
from mmirage_beam.run.receipts import (
    MODALITIES,
    PER_REQUEST_FIELDS,
    ReceiptLocation,
    adoption_rejected,
    find_receipt_files,
    iter_located_receipts,
    read_receipt_at,
    receipt_patterns,
    source_index_range,
)
from mmirage_beam.run.records import Receipt, ReceiptJson

if TYPE_CHECKING:
    from mmirage_beam.config.loader import PipelineConfig

__all__ = [
    "NoReceiptsError",
    "ReceiptEntry",
    "ReceiptSet",
    "collect_receipts",
]


_LOG = logging.getLogger(__name__)

_DRY_RUN_STATUS = "dry_run"


class NoReceiptsError(MmirageError):
    """No receipt was found where receipts were looked for (exit 2).

    Attributes:
        patterns: the glob patterns or paths that were tried.
    """

    exit_code = 2

    def __init__(self, message: str, patterns: Sequence[str] = ()) -> None:
        self.patterns = list(patterns)
        super().__init__(message)


@dataclass(frozen=True)
class ReceiptEntry:
    """One receipt line: one provider batch of one run.

    Attributes:
        provider: the registry name of the provider (``openai``, ``anthropic``, ...).
        provider_batch_id: the provider's id of the batch.
        run_id: the receipt's ``run_id``, else the one in its file name.
        modality: ``text`` or ``multimodal`` (``?`` when nothing says).
        chunk_id: the chunk the batch was built from.
        output_name: the output the requests belong to, when known.
        request_count: ``submitted_request_count`` (requests in the batch).
        submitted_at: ``submitted_at_utc`` as Unix seconds (None when absent).
        path: the receipt file it was read from.
        receipt: the receipt line as read, without its per-request fields
            (:data:`~mmirage_beam.run.receipts.PER_REQUEST_FIELDS`) when ``location`` is set:
            a run's receipts hold an entry per request, so they are read back one at a
            time from where they are stored (:meth:`full_receipt`) by whoever needs them.
        location: where the receipt is stored (None: ``receipt`` is the whole receipt).
        mapped_requests: entries of its ``custom_id_to_source_index``.
        source_index_range: ``(lowest, highest)`` source_index it maps, None when none.
        has_request_hashes: whether it holds per-request ``request_hashes``.
    """

    provider: str
    provider_batch_id: str
    run_id: str
    modality: str
    chunk_id: str
    output_name: Optional[str]
    request_count: int
    submitted_at: Optional[float]
    path: str
    receipt: Mapping[str, Any] = dataclasses.field(compare=False, repr=False)
    location: Optional[ReceiptLocation] = dataclasses.field(default=None, compare=False)
    mapped_requests: Optional[int] = dataclasses.field(default=None, compare=False)
    source_index_range: Optional[Tuple[int, int]] = dataclasses.field(default=None, compare=False)
    has_request_hashes: Optional[bool] = dataclasses.field(default=None, compare=False)

    def full_receipt(self) -> ReceiptJson:
        """The whole receipt, per-request maps included (read back from ``location``).

        Raises:
            ValueError: the receipt file changed since it was read.
        """
        return self.receipt if self.location is None else read_receipt_at(self.location)

    @property
    def record(self) -> Receipt:
        """:attr:`receipt` as a :class:`~mmirage_beam.run.records.Receipt`: without its
        per-request maps (None) when ``location`` is set (:meth:`full_record` has them)."""
        return Receipt.from_json(self.receipt or {})

    def full_record(self) -> Receipt:
        """:meth:`full_receipt` as a :class:`~mmirage_beam.run.records.Receipt`.

        Raises:
            ValueError: the receipt file changed since it was read.
        """
        return Receipt.from_json(self.full_receipt())

    @property
    def mapped_count(self) -> int:
        """Entries of the receipt's ``custom_id_to_source_index``."""
        if self.mapped_requests is not None:
            return self.mapped_requests
        return len(self.receipt.get("custom_id_to_source_index") or {})

    @property
    def key(self) -> Tuple[str, str]:
        """``(provider, provider_batch_id)``: what identifies a batch."""
        return (self.provider, self.provider_batch_id)


@dataclass(frozen=True)
class ReceiptSet:
    """Receipts found for one ``check`` / ``merge`` invocation.

    Attributes:
        receipts: every receipt line read, newest run first (config discovery) or in the
            order the paths were given, each file's receipts in chunk order.
        files: the receipt files read (a ``.parts`` folder is named by its file).
        skipped_dry_run: dry-run receipt files that were seen and skipped.
    """

    receipts: Tuple[ReceiptEntry, ...]
    files: Tuple[str, ...]
    skipped_dry_run: Tuple[str, ...] = ()

    @property
    def batches(self) -> List[ReceiptEntry]:
        """One entry per distinct ``(provider, provider_batch_id)``, first one kept."""
        seen: Dict[Tuple[str, str], ReceiptEntry] = {}
        for r in self.receipts:
            seen.setdefault(r.key, r)
        return list(seen.values())

    @property
    def providers(self) -> List[str]:
        """The providers named by the receipts, sorted."""
        return sorted({r.provider for r in self.receipts})

    @property
    def run_ids(self) -> List[str]:
        """The runs, in receipt order (newest first for config discovery)."""
        return list(dict.fromkeys(r.run_id for r in self.receipts))


def collect_receipts(
    config: Optional[PipelineConfig] = None,
    metadata_paths: Sequence[str] = (),
    run_id: Optional[str] = None,
) -> ReceiptSet:
    """Find and read the receipts of a config's runs, or of explicitly given files.

    Without ``metadata_paths``, receipts are ``<base>.<modality>.<run_id>.jsonl`` (and the
    ``.parts`` folder of a run that stopped before consolidating) where ``base`` is the
    config's ``metadata_output_path`` without ``.jsonl``; every run, newest run first.
    Each of ``metadata_paths`` is a receipt file or its ``.parts`` folder. Dry-run
    receipts (``<base>.dry-run.*``, ``status: dry_run``) are skipped and listed in
    :attr:`ReceiptSet.skipped_dry_run`. Receipts of the original MMIRAGE tool, which
    have no ``run_id``, take it from their file name.

    Args:
        config: the loaded config (needed unless ``metadata_paths`` are given).
        metadata_paths: receipt files or ``.parts`` folders to read instead.
        run_id: keep only this run's receipts.

    Returns:
        The receipts found, never empty.

    Raises:
        NoReceiptsError: nothing found; the message lists the patterns or paths tried.
        ConfigError: neither a config nor paths, or a given path that does not exist
            (naming ``--metadata-path``).
    """
    skipped: List[str] = []
    entries: List[ReceiptEntry] = []
    files: List[str] = []
    if metadata_paths:
        tried = [str(p) for p in metadata_paths]
        for given in metadata_paths:
            path = _receipt_file_of(str(given))
            if not _exists(path) and not _exists(parts_dir(path)):
                raise ConfigError(
                    "--metadata-path",
                    f"{given} does not exist (neither a receipt file nor its .parts folder)",
                )
            if _is_dry_run_name(os.path.basename(path)):
                _add_unique(skipped, path)
                continue
            modality, name_run_id = _name_parts(path)
            got = _entries(path, name_run_id, modality, skipped)
            if got:
                files.append(path)
                entries.extend(got)
        where = "the given --metadata-path"
    else:
        if config is None:
            raise ConfigError("--config", "a config or --metadata-path is needed")
        base = receipts_base(config.processor.metadata_output_path, config.state_dir)
        tried = receipt_patterns(base)
        if run_id is not None:
            tried = [p.replace(".*.", f".{run_id}.") for p in tried]
        found, dry = find_receipt_files(base, run_id)
        skipped.extend(dry)
        for f in found:
            got = _entries(f.path, f.run_id, f.modality, skipped)
            if got:
                files.append(f.path)
                entries.extend(got)
        where = "processors[0].metadata_output_path"
    if run_id is not None:
        entries = [e for e in entries if e.run_id == run_id]
        files = [f for f in files if any(e.path == f for e in entries)]
    if not entries:
        what = f"no receipt of run {run_id!r}" if run_id is not None else "no receipt"
        lines = [f"{what} found (from {where}); tried:"] + [f"  {p}" for p in tried]
        if skipped:
            lines.append("skipped dry-run receipts (nothing was submitted): " + ", ".join(skipped))
        lines.append("Submit with 'mmirage run --config C' first, or pass --metadata-path.")
        raise NoReceiptsError("\n".join(lines), tried)
    _LOG.debug("read %d receipt(s) from %d file(s)", len(entries), len(files))
    return ReceiptSet(tuple(entries), tuple(files), tuple(skipped))


def _receipt_file_of(path: str) -> str:
    path = path.rstrip("/")
    return path[: -len(".parts")] if path.endswith(".parts") else path


def _exists(path: str) -> bool:
    from mmirage_beam.io.filesystems import FileSystems

    return FileSystems.exists(path)


def _is_dry_run_name(name: str) -> bool:
    return ".dry-run." in f".{name}"


def _name_parts(path: str) -> Tuple[Optional[str], Optional[str]]:
    """``(modality, run_id)`` from ``<base>.<modality>.<run_id>.jsonl``, else Nones."""
    name = os.path.basename(path)
    if not name.endswith(".jsonl"):
        return None, None
    parts = name[: -len(".jsonl")].rsplit(".", 2)
    if len(parts) == 3 and parts[1] in MODALITIES and parts[2]:
        return parts[1], parts[2]
    return None, None


def _add_unique(items: List[str], item: str) -> None:
    if item not in items:
        items.append(item)


def _summaries(
    path: str,
) -> Iterator[Tuple[Any, ReceiptLocation, int, Optional[Tuple[int, int]], bool]]:
    """``(receipt without its per-request fields, location, mapped requests, source_index
    range, has request_hashes)`` per receipt of ``path``, one receipt read at a time."""
    for location, r in iter_located_receipts(path):
        if not isinstance(r, dict):
            yield r, location, 0, None, False
            continue
        mapping = r.get("custom_id_to_source_index")
        mapped = len(mapping) if isinstance(mapping, dict) else 0
        slim = {k: v for k, v in r.items() if k not in PER_REQUEST_FIELDS}
        index_range = source_index_range(mapping)
        yield slim, location, mapped, index_range, bool(r.get("request_hashes"))


def _entries(
    path: str, name_run_id: Optional[str], name_modality: Optional[str], skipped: List[str]
) -> List[ReceiptEntry]:
    out = []

    try:
        # one receipt at a time: only its summary is kept (see ReceiptEntry.receipt)
        records = list(_summaries(path))
    except (OSError, ValueError, UnicodeDecodeError) as exc:  # a folder; not JSON lines
        raise ConfigError(
            "--metadata-path", f"{path} is not a receipt file (not JSON lines: {exc})"
        ) from None
    not_receipts = 0
    for r, location, mapped, index_range, hashed in records:
        if not isinstance(r, dict):
            not_receipts += 1
            continue
        if r.get("status") == _DRY_RUN_STATUS:
            _add_unique(skipped, path)
            continue
        if adoption_rejected(r):  # a withdrawn adoption: its requests were sent again
            _LOG.info(
                "receipt %s in %s is a withdrawn adoption (%s); skipped",
                r.get("chunk_id"),
                path,
                r["adoption"].get("rejected"),
            )
            continue
        provider, batch_id = r.get("provider"), r.get("provider_batch_id")
        if not provider or not batch_id:
            not_receipts += 1
            continue
        snapshot = r.get("model_params_snapshot") or {}
        count = r.get("submitted_request_count")
        if not isinstance(count, int) or isinstance(count, bool):
            count = mapped
        out.append(
            ReceiptEntry(
                provider=str(provider),
                provider_batch_id=str(batch_id),
                run_id=str(r.get("run_id") or name_run_id or "?"),
                modality=str(r.get("modality") or snapshot.get("modality") or name_modality or "?"),
                chunk_id=str(r.get("chunk_id") or ""),
                output_name=r.get("output_name") or snapshot.get("output_name"),
                request_count=count,
                submitted_at=parse_timestamp(r.get("submitted_at_utc")),
                path=path,
                receipt=r,
                location=location,
                mapped_requests=mapped,
                source_index_range=index_range,
                has_request_hashes=hashed,
            )
        )
    if not_receipts and not out and not skipped:
        raise ConfigError(
            "--metadata-path",
            f"{path} is not a receipt file: none of its {not_receipts} line(s) has a "
            "provider and a provider_batch_id",
        )
    if not_receipts:
        _LOG.warning(
            "%d line(s) of %s are not receipts (no provider or provider_batch_id); skipped",
            not_receipts,
            path,
        )
    return out
