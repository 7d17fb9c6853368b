"""Provider status of submitted batches, from their receipts: the logic of ``mmirage check``.

Three steps, each reusable on its own (``mmirage merge`` uses the first two to refuse
merging while batches are still running):

1. :func:`collect_receipts` finds and reads receipt files (ours or the original MMIRAGE
   tool's, which carry no ``run_id``: it is taken from the file name
   ``<base>.<modality>.<run_id>.jsonl``), skipping dry-run receipts.
2. :class:`BatchStatusChecker` (or the one-shot :func:`check_statuses`) looks every
   distinct ``(provider, provider_batch_id)`` up through its provider's adapter
   (``check_batch_status`` then ``describe_batch``); a batch the provider cannot resolve
   becomes a :data:`LOOKUP_FAILED` status and never hides the others.
   :func:`watch_statuses` polls until every batch is terminal.
3. :func:`build_report` summarises per provider and per run; :func:`format_report_lines`
   renders it as plain aligned text, :func:`print_rich_report` as ``rich`` tables.

Generic code only: everything provider-specific comes from the adapters. Credentials are
read from the environment (``resolve_credentials``) and never printed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    TextIO,
    Tuple,
)

from mmirage_beam.errors import ConfigError, MmirageError
from mmirage_beam.providers.base import (
    BatchAdapterRegistry,
    BatchProgress,
    BatchSubmissionAdapter,
    parse_timestamp,
    resolve_credentials,
)
from mmirage_beam.receipts import (
    MODALITIES,
    find_receipt_files,
    parts_dir,
    read_receipts,
    receipt_patterns,
    receipts_base,
)

if TYPE_CHECKING:
    from mmirage_beam.config.batch_provider import BatchProviderConfig
    from mmirage_beam.config.loader import PipelineConfig

_LOG = logging.getLogger(__name__)

#: status of a batch its provider could not resolve (e.g. an unknown batch id).
LOOKUP_FAILED = "lookup_failed"
#: statuses after which a batch will not change any more (lookup failures included, so
#: that a watch loop cannot spin forever on a batch that does not exist).
TERMINAL_STATUSES = ("completed", "failed", LOOKUP_FAILED)
#: the order statuses are listed in, in summaries.
STATUS_ORDER = ("completed", "in_progress", "unknown", "failed", LOOKUP_FAILED)

_DRY_RUN_STATUS = "dry_run"
_MAX_ERROR_CHARS = 200
_DEFAULT_LOOKUP_WORKERS = 8


class NoReceiptsError(MmirageError):
    """No receipt was found where receipts were looked for (exit 2).

    Attributes:
        patterns: the glob patterns or paths that were tried.
    """

    exit_code = 2

    def __init__(self, message: str, patterns: Sequence[str] = ()) -> None:
        self.patterns = list(patterns)
        super().__init__(message)


# ---------------------------------------------------------------------------------------
# Receipts
# ---------------------------------------------------------------------------------------


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
        receipt: the receipt line itself, as read.
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
    from apache_beam.io.filesystems import FileSystems

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


def _entries(
    path: str, name_run_id: Optional[str], name_modality: Optional[str], skipped: List[str]
) -> List[ReceiptEntry]:
    out = []
    for r in read_receipts(path):
        if r.get("status") == _DRY_RUN_STATUS:
            _add_unique(skipped, path)
            continue
        provider, batch_id = r.get("provider"), r.get("provider_batch_id")
        if not provider or not batch_id:
            _LOG.warning(
                "receipt %s in %s has no provider or provider_batch_id; skipped",
                r.get("chunk_id"),
                path,
            )
            continue
        snapshot = r.get("model_params_snapshot") or {}
        count = r.get("submitted_request_count")
        if not isinstance(count, int) or isinstance(count, bool):
            count = len(r.get("custom_id_to_source_index") or {})
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
            )
        )
    return out


# ---------------------------------------------------------------------------------------
# Status lookup
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchStatus:
    """A batch's status as looked up at ``checked_at``.

    Attributes:
        receipt: the batch's receipt.
        status: ``completed | failed | in_progress | unknown`` (the adapter's normalised
            status) or :data:`LOOKUP_FAILED`.
        progress: the provider's view (None for a lookup failure).
        error: why the lookup failed (None otherwise); never contains a key.
        checked_at: when it was looked up, Unix seconds.
    """

    receipt: ReceiptEntry
    status: str
    progress: Optional[BatchProgress] = None
    error: Optional[str] = None
    checked_at: float = 0.0

    @property
    def terminal(self) -> bool:
        """True once the batch will not change: completed, failed or lookup failed."""
        return self.status in TERMINAL_STATUSES

    @property
    def is_failure(self) -> bool:
        """True for a batch failed at provider level, or whose lookup failed."""
        return self.status in ("failed", LOOKUP_FAILED)

    @property
    def done(self) -> Optional[int]:
        """Requests that succeeded (None when unknown)."""
        return self.progress.completed if self.progress else None

    @property
    def failed(self) -> Optional[int]:
        """Requests that failed (None when unknown)."""
        return self.progress.failed if self.progress else None

    @property
    def total(self) -> int:
        """Requests in the batch: the provider's count, else the receipt's."""
        if self.progress is not None and self.progress.total:
            return self.progress.total
        return self.receipt.request_count

    @property
    def age_secs(self) -> Optional[float]:
        """Seconds since submission (receipt), else since the provider created it."""
        start = self.receipt.submitted_at
        if start is None and self.progress is not None:
            start = self.progress.created_at
        return None if start is None else max(0.0, self.checked_at - start)

    @property
    def detail(self) -> str:
        """The lookup error, else the provider's detail (error codes, outcome counts)."""
        if self.error is not None:
            return f"lookup failed: {self.error}"
        return self.progress.detail if self.progress else ""


class BatchStatusChecker:
    """Looks batches up through their providers' adapters, one adapter per provider.

    Credentials of every provider are resolved when the checker is built, so a missing
    key fails before any lookup. Use it as a context manager (adapters are ``setup`` on
    entry and ``teardown`` on exit) and call :meth:`check` as often as needed::

        with BatchStatusChecker(receipts.providers, config) as checker:
            statuses = checker.check(receipts.batches)

    The provider config of a provider is the config's processor when its provider
    matches, else the registered config class with its defaults.

    Args:
        providers: the provider names to look batches up with.
        config: the loaded config (its processor gives ``base_url`` and the like).
        environ: where credentials are read from (default ``os.environ``).
        clock: returns Unix seconds (injectable for tests).
        max_workers: lookups run in parallel on this many threads.

    Raises:
        CredentialsError: a provider's key is missing (names the variable).
        ConfigError: no adapter or config class is registered for a provider.
    """

    def __init__(
        self,
        providers: Iterable[str],
        config: Optional[PipelineConfig] = None,
        *,
        environ: Optional[Mapping[str, str]] = None,
        clock: Callable[[], float] = time.time,
        max_workers: int = _DEFAULT_LOOKUP_WORKERS,
    ) -> None:
        self._clock = clock
        self._max_workers = max(1, int(max_workers))
        self._plans: Dict[str, Tuple[type[BatchSubmissionAdapter], Dict[str, str]]] = {}
        self._configs: Dict[str, BatchProviderConfig] = {}
        self._adapters: Dict[str, BatchSubmissionAdapter] = {}
        self._secrets: List[str] = []
        for provider in sorted(set(providers)):
            adapter_cls = BatchAdapterRegistry.get(provider)
            self._plans[provider] = (adapter_cls, {})
            self._configs[provider] = _provider_config(provider, config)
        # Every key before any lookup: a missing one fails the whole check (exit 2).
        for provider, (adapter_cls, _) in list(self._plans.items()):
            creds = resolve_credentials(adapter_cls, provider, environ)
            self._plans[provider] = (adapter_cls, creds)
            self._secrets.extend(v for v in creds.values() if len(v) >= 4)

    def __enter__(self) -> BatchStatusChecker:
        self.open()
        return self

    def adapter_plans(self) -> Dict[str, Tuple[type[BatchSubmissionAdapter], BatchProviderConfig]]:
        """provider -> (adapter class, provider config), as used for the lookups (no keys)."""
        return {p: (cls, self._configs[p]) for p, (cls, _creds) in self._plans.items()}

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def open(self) -> None:
        """Build one adapter per provider and call its ``setup(config)``."""
        for provider, (adapter_cls, creds) in self._plans.items():
            if provider not in self._adapters:
                adapter = adapter_cls(creds)
                adapter.setup(self._configs[provider])
                self._adapters[provider] = adapter

    def close(self) -> None:
        """``teardown()`` every adapter (errors are logged, not raised)."""
        adapters, self._adapters = self._adapters, {}
        for provider, adapter in adapters.items():
            try:
                adapter.teardown()
            except Exception as exc:  # closing must not hide the report
                _LOG.warning("closing the %s adapter failed: %s", provider, self._redact(exc))

    def check(self, batches: Sequence[ReceiptEntry]) -> List[BatchStatus]:
        """Look every batch up; one :class:`BatchStatus` per entry, in the same order.

        A lookup that raises anything (unknown batch id, network error after the SDK's
        retries, ...) gives a :data:`LOOKUP_FAILED` status; the others are unaffected.

        Raises:
            RuntimeError: the checker was not opened.
        """
        if self._plans and not self._adapters:
            raise RuntimeError("BatchStatusChecker.check() before open() (use 'with')")
        if len(batches) <= 1 or self._max_workers == 1:
            return [self.check_one(b) for b in batches]
        with ThreadPoolExecutor(max_workers=min(self._max_workers, len(batches))) as pool:
            return list(pool.map(self.check_one, batches))

    def check_one(self, entry: ReceiptEntry) -> BatchStatus:
        """Look one batch up (see :meth:`check`).

        Raises:
            KeyError: ``entry.provider`` is not one of the checker's providers.
        """
        adapter = self._adapters[entry.provider]
        config = self._configs[entry.provider]
        try:
            result = adapter.check_batch_status(entry.provider_batch_id, config)
            progress = adapter.describe_batch(result)
        except Exception as exc:
            message = self._redact(exc)
            _LOG.debug(
                "lookup of %s %s failed: %s", entry.provider, entry.provider_batch_id, message
            )
            return BatchStatus(entry, LOOKUP_FAILED, None, message, self._clock())
        return BatchStatus(entry, result.status, progress, None, self._clock())

    def _redact(self, exc: BaseException) -> str:
        text = _short_error(exc)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


def check_statuses(
    receipts: ReceiptSet,
    config: Optional[PipelineConfig] = None,
    *,
    environ: Optional[Mapping[str, str]] = None,
) -> List[BatchStatus]:
    """Look up every distinct batch of ``receipts`` once; see :class:`BatchStatusChecker`.

    Returns:
        One status per batch of ``receipts.batches``, in that order.

    Raises:
        CredentialsError: a provider's key is missing (before any lookup).
        ConfigError: no adapter or config class is registered for a provider.
    """
    with BatchStatusChecker(receipts.providers, config, environ=environ) as checker:
        return checker.check(receipts.batches)


def not_terminal(statuses: Iterable[BatchStatus]) -> List[BatchStatus]:
    """The statuses of batches that may still change (``in_progress`` or ``unknown``)."""
    return [s for s in statuses if not s.terminal]


def exit_code(statuses: Iterable[BatchStatus]) -> int:
    """1 when a batch failed at provider level or its lookup failed, else 0."""
    return 1 if any(s.is_failure for s in statuses) else 0


def watch_statuses(
    checker: BatchStatusChecker,
    batches: Sequence[ReceiptEntry],
    *,
    interval_secs: float = 60.0,
    timeout_secs: Optional[float] = None,
    on_poll: Optional[Callable[[Sequence[BatchStatus], int, float], None]] = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Tuple[List[BatchStatus], bool]:
    """Poll every ``interval_secs`` until every batch is terminal (or ``timeout_secs``).

    Batches already ``completed`` or ``failed`` are not looked up again; lookup failures
    are retried while other batches still run, but count as terminal.

    Args:
        checker: an opened checker.
        batches: the batches to follow.
        interval_secs: seconds between polls (> 0).
        timeout_secs: stop watching after this many seconds (None: no limit).
        on_poll: called after each poll with ``(statuses, poll number, elapsed secs)``.
        sleep, clock: injectable for tests.

    Returns:
        ``(last statuses, True if the timeout stopped the watch)``.

    Raises:
        ValueError: ``interval_secs`` is not > 0 or ``timeout_secs`` is negative.
    """
    if not interval_secs > 0:
        raise ValueError(f"interval_secs must be > 0, got {interval_secs}")
    if timeout_secs is not None and timeout_secs < 0:
        raise ValueError(f"timeout_secs must be >= 0, got {timeout_secs}")
    start = clock()
    statuses = checker.check(batches)
    poll = 1
    while True:
        elapsed = clock() - start
        if on_poll is not None:
            on_poll(statuses, poll, elapsed)
        if all(s.terminal for s in statuses):
            return statuses, False
        if timeout_secs is not None and elapsed >= timeout_secs:
            return statuses, True
        wait = interval_secs
        if timeout_secs is not None:
            wait = max(0.0, min(wait, timeout_secs - elapsed))
        sleep(wait)
        again = [i for i, s in enumerate(statuses) if s.status not in ("completed", "failed")]
        fresh = checker.check([statuses[i].receipt for i in again])
        for i, s in zip(again, fresh):
            statuses[i] = s
        poll += 1


def _provider_config(provider: str, config: Optional[PipelineConfig]) -> BatchProviderConfig:
    if config is not None and config.processor.provider == provider:
        return config.processor
    from mmirage_beam.config.batch_provider import BatchProviderConfigRegistry

    cls = BatchProviderConfigRegistry.get(provider)
    try:
        return cls()
    except (TypeError, ConfigError) as exc:
        raise ConfigError(
            "provider",
            f"receipts name provider {provider!r}, which is not the config's; its config "
            f"class {cls.__name__} cannot be built with defaults ({exc})",
        ) from None


def _short_error(exc: BaseException) -> str:
    """``<ExceptionType> (HTTP <code>): <provider message>``, on one line, cut short."""
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    message = ""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        message = str(inner.get("message") or "")
    if not message:
        lines = str(exc).strip().splitlines()
        message = lines[0] if lines else ""
    message = " ".join(message.split())
    if len(message) > _MAX_ERROR_CHARS:
        message = message[: _MAX_ERROR_CHARS - 3] + "..."
    head = f"{name} (HTTP {status})" if isinstance(status, int) else name
    return f"{head}: {message}" if message else head


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupSummary:
    """Totals of a group of batches (one provider, or one run).

    Attributes:
        label: ``openai`` or ``run 3aa41d``.
        batches: number of batches.
        by_status: batches per status, in :data:`STATUS_ORDER` (only non-zero ones).
        done, failed, total: requests succeeded, failed and in all (unknown counts as 0).
    """

    label: str
    batches: int
    by_status: Tuple[Tuple[str, int], ...]
    done: int
    failed: int
    total: int

    def status_text(self) -> str:
        """``completed 3, in_progress 1``."""
        return ", ".join(f"{k} {v}" for k, v in self.by_status) or "none"


@dataclass(frozen=True)
class StatusReport:
    """What ``mmirage check`` prints.

    Attributes:
        statuses: one per distinct batch, in receipt order (newest run first).
        by_provider: one summary per provider, sorted by name.
        by_run: one summary per run, in receipt order.
        files: receipt files read.
        skipped_dry_run: dry-run receipt files skipped.
        checked_at: when the report was built, Unix seconds.
    """

    statuses: Tuple[BatchStatus, ...]
    by_provider: Tuple[GroupSummary, ...]
    by_run: Tuple[GroupSummary, ...]
    files: Tuple[str, ...]
    skipped_dry_run: Tuple[str, ...]
    checked_at: float

    @property
    def exit_code(self) -> int:
        """0 when nothing failed (running batches are fine), 1 otherwise."""
        return exit_code(self.statuses)

    @property
    def all_terminal(self) -> bool:
        """True when no batch may change any more."""
        return all(s.terminal for s in self.statuses)


def summarize(label: str, statuses: Sequence[BatchStatus]) -> GroupSummary:
    """Totals of ``statuses`` under ``label``."""
    counts: Dict[str, int] = {}
    for s in statuses:
        counts[s.status] = counts.get(s.status, 0) + 1
    order = list(STATUS_ORDER) + sorted(set(counts) - set(STATUS_ORDER))
    return GroupSummary(
        label=label,
        batches=len(statuses),
        by_status=tuple((k, counts[k]) for k in order if counts.get(k)),
        done=sum(s.done or 0 for s in statuses),
        failed=sum(s.failed or 0 for s in statuses),
        total=sum(s.total for s in statuses),
    )


def build_report(
    receipts: ReceiptSet, statuses: Sequence[BatchStatus], now: Optional[float] = None
) -> StatusReport:
    """Summaries per provider and per run of ``statuses`` (from ``receipts``)."""
    providers = sorted({s.receipt.provider for s in statuses})
    runs = list(dict.fromkeys(s.receipt.run_id for s in statuses))
    return StatusReport(
        statuses=tuple(statuses),
        by_provider=tuple(
            summarize(p, [s for s in statuses if s.receipt.provider == p]) for p in providers
        ),
        by_run=tuple(
            summarize(f"run {r}", [s for s in statuses if s.receipt.run_id == r]) for r in runs
        ),
        files=receipts.files,
        skipped_dry_run=receipts.skipped_dry_run,
        checked_at=time.time() if now is None else now,
    )


def human_age(secs: Optional[float]) -> str:
    """``42s``, ``12m05s``, ``3h07m``, ``2d04h`` (``-`` when unknown)."""
    if secs is None:
        return "-"
    s = int(secs)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


_COLUMNS = (
    "RUN",
    "MODALITY",
    "PROVIDER",
    "BATCH",
    "CHUNK",
    "STATUS",
    "PROVIDER STATUS",
    "DONE",
    "FAILED",
    "TOTAL",
    "AGE",
    "DETAIL",
)


def _num(value: Optional[int]) -> str:
    return "-" if value is None else str(value)


def _row(s: BatchStatus) -> List[str]:
    r = s.receipt
    return [
        r.run_id,
        r.modality,
        r.provider,
        r.provider_batch_id,
        r.chunk_id or "-",
        s.status,
        s.progress.provider_status if s.progress else "-",
        _num(s.done),
        _num(s.failed),
        str(s.total),
        human_age(s.age_secs),
        s.detail,
    ]


def _headline(report: StatusReport) -> str:
    n_runs = len(report.by_run)
    n_files = len(report.files)
    return f"{len(report.statuses)} batch(es) in {n_runs} run(s), from {n_files} receipt file(s)"


def _verdict(report: StatusReport) -> str:
    failed = sum(1 for s in report.statuses if s.status == "failed")
    lookups = sum(1 for s in report.statuses if s.status == LOOKUP_FAILED)
    running = sum(1 for s in report.statuses if not s.terminal)
    if failed or lookups:
        return (
            f"result: FAILED ({failed} batch(es) failed at the provider, {lookups} lookup "
            f"failure(s), {running} still running)"
        )
    if running:
        return f"result: ok so far ({running} batch(es) still running; nothing failed)"
    return "result: ok (every batch completed)"


def _summary_line(g: GroupSummary, width: int) -> str:
    return (
        f"  {g.label.ljust(width)}  {g.batches} batch(es): {g.status_text()}; "
        f"requests done {g.done}, failed {g.failed}, total {g.total}"
    )


def format_report_lines(report: StatusReport) -> List[str]:
    """The report as plain text lines: aligned columns, then the summaries.

    Fully informative on its own (used when stdout is not a terminal).
    """
    lines = [f"mmirage check: {_headline(report)}"]
    if report.skipped_dry_run:
        lines.append(
            "skipped dry-run receipts (nothing was submitted): " + ", ".join(report.skipped_dry_run)
        )
    rows = [list(_COLUMNS)] + [_row(s) for s in report.statuses]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS) - 1)]
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths)] + [r[-1]]
        lines.append("  ".join(cells).rstrip())
    width = max(len(g.label) for g in report.by_provider + report.by_run)
    lines.append("")
    lines.append("by provider:")
    lines.extend(_summary_line(g, width) for g in report.by_provider)
    lines.append("by run:")
    lines.extend(_summary_line(g, width) for g in report.by_run)
    lines.append(_verdict(report))
    return lines


_STATUS_STYLES = {
    "completed": "green",
    "in_progress": "yellow",
    "unknown": "magenta",
    "failed": "bold red",
    LOOKUP_FAILED: "red",
}


def print_rich_report(report: StatusReport, console: Any = None) -> None:
    """Print the report as ``rich`` tables (for a terminal).

    Args:
        report: what to print.
        console: a ``rich.console.Console`` (default: a new one on stdout).
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    console.print(f"[bold]mmirage check[/bold]: {_headline(report)}", highlight=False)
    if report.skipped_dry_run:
        console.print(
            "[dim]skipped dry-run receipts (nothing was submitted): "
            + escape(", ".join(report.skipped_dry_run))
            + "[/dim]",
            highlight=False,
        )
    table = Table(show_lines=False)
    for col in _COLUMNS:
        numeric = col in ("DONE", "FAILED", "TOTAL", "AGE")
        table.add_column(col.title(), justify="right" if numeric else "left", overflow="fold")
    for s in report.statuses:
        cells = [escape(c) for c in _row(s)]
        style = _STATUS_STYLES.get(s.status, "")
        cells[5] = f"[{style}]{cells[5]}[/{style}]" if style else cells[5]
        table.add_row(*cells)
    console.print(table)
    for title, groups in (("by provider", report.by_provider), ("by run", report.by_run)):
        summary = Table(title=title, title_justify="left")
        for col in ("", "batches", "status", "done", "failed", "total"):
            summary.add_column(col, justify="left" if col in ("", "status") else "right")
        for g in groups:
            summary.add_row(
                escape(g.label),
                str(g.batches),
                g.status_text(),
                str(g.done),
                str(g.failed),
                str(g.total),
            )
        console.print(summary)
    style = "bold red" if report.exit_code else "bold green"
    console.print(f"[{style}]{_verdict(report)}[/{style}]", highlight=False)


def print_report(report: StatusReport, rich_output: Optional[bool] = None) -> None:
    """Print the report: ``rich`` tables on a terminal, plain lines otherwise.

    Args:
        report: what to print.
        rich_output: force one form; None decides by ``sys.stdout.isatty()``.
    """
    if rich_output is None:
        rich_output = sys.stdout.isatty()
    if rich_output:
        print_rich_report(report)
    else:
        print("\n".join(format_report_lines(report)), flush=True)


# ---------------------------------------------------------------------------------------
# Watch displays
# ---------------------------------------------------------------------------------------


def poll_summary(statuses: Sequence[BatchStatus]) -> GroupSummary:
    """Totals of one poll (all batches)."""
    return summarize("all", statuses)


def format_poll_line(statuses: Sequence[BatchStatus], poll: int, elapsed_secs: float) -> str:
    """One plain line per poll: requests done / total and batches per status."""
    g = poll_summary(statuses)
    return (
        f"poll {poll} ({elapsed_secs:.1f}s): requests done {g.done}/{g.total}, failed "
        f"{g.failed}; batches {g.batches}: {g.status_text()}"
    )


class PlainWatchDisplay:
    """Watch display for a non-terminal stdout: one line per poll.

    Args:
        stream: where lines go (default ``sys.stdout`` at the time of each poll).
    """

    def __init__(self, stream: Optional[TextIO] = None) -> None:
        self._stream = stream

    def __enter__(self) -> PlainWatchDisplay:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def update(self, statuses: Sequence[BatchStatus], poll: int, elapsed_secs: float) -> None:
        """Print the poll's line."""
        stream = self._stream or sys.stdout
        print(format_poll_line(statuses, poll, elapsed_secs), file=stream, flush=True)


class RichWatchDisplay:
    """Watch display for a terminal: a live ``rich.progress`` bar of requests finished
    (done + failed) out of the total, with the batches per status beside it.

    Args:
        console: a ``rich.console.Console`` (default: a new one on stdout).
    """

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]requests[/bold]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console or Console(),
        )
        self._task: Any = None

    def __enter__(self) -> RichWatchDisplay:
        self._progress.start()
        self._task = self._progress.add_task("requests", total=None, detail="looking up...")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._progress.stop()

    def update(self, statuses: Sequence[BatchStatus], poll: int, elapsed_secs: float) -> None:
        """Move the bar to this poll's counts."""
        g = poll_summary(statuses)
        detail = f"failed {g.failed} | batches: {g.status_text()} | poll {poll}"
        self._progress.update(self._task, total=g.total, completed=g.done + g.failed, detail=detail)


# What a batch-level failure means and what to do, keyed by the provider's error code or
# status word (OpenAI Batch API and Anthropic Message Batches vocabularies).
_ADVICE = {
    "token_limit_exceeded": (
        "the organisation's limit on enqueued tokens for this model was reached when the "
        "batch was validated: none of its requests ran and nothing is billed. Wait until "
        "other batches of the model finish, then re-send it"
    ),
    "expired": (
        "the 24 h completion window ended before every request ran; the results that "
        "exist are kept (merge them) and only the rest needs re-sending"
    ),
    "cancelled": (
        "the batch was cancelled; results of requests that ran are kept (merge them) and "
        "only the rest needs re-sending"
    ),
    "errored": (
        "some requests failed (see the errors file that merge writes); retryable ones "
        "(server errors, rate limits) can be re-sent, invalid requests need a config fix"
    ),
}
_ADVICE["canceled"] = _ADVICE["cancelled"]
_FILE_REJECTED = (
    "the provider rejected the uploaded file ({code}); this is a request-building problem, "
    "not a transient one: check the config (model, batch_endpoint) and report it"
)


def advice_lines(report: StatusReport, config_arg: Optional[str]) -> List[str]:
    """Plain-words explanations of failed and unresolvable batches, with the command that
    fixes each (``mmirage resubmit`` / ``mmirage merge``). Empty when nothing failed."""
    config = config_arg or "C.yaml"
    lines: List[str] = []
    seen: set = set()
    children: Dict[str, set] = {}
    for st in report.statuses:
        parent = st.receipt.receipt.get("parent_run_id")
        if parent:
            children.setdefault(parent, set()).add(st.receipt.run_id)
    for s in report.statuses:
        run = s.receipt.run_id
        if s.status == LOOKUP_FAILED and "connection" in (s.error or "").lower():
            key = ("unreachable", s.receipt.provider)
            text = (
                f"{s.receipt.provider} cannot be reached ({s.error}): check the network and "
                "the config's base_url; nothing is lost, run check again later"
            )
        elif s.status == LOOKUP_FAILED:
            key = ("lookup", s.receipt.provider)
            text = (
                f"{s.receipt.provider} does not know some batches (e.g. "
                f"{s.receipt.provider_batch_id}): check that the key and base_url are those "
                "of the account that submitted them, and that the receipts are this "
                "config's"
            )
        else:
            progress = s.progress
            word = (progress.provider_status if progress else "").lower()
            code = progress.error_code if progress else None
            failed_requests = bool(progress and progress.failed)
            if code:
                key = (code, run)
                text = _ADVICE.get(code) or _FILE_REJECTED.format(code=code)
            elif word in _ADVICE and s.status == "failed":
                key = (word, run)
                text = _ADVICE[word]
            elif failed_requests and s.terminal:
                detail = (progress.detail if progress else "").lower()
                outcome = next((w for w in ("expired", "canceled") if w in detail), "errored")
                key = (outcome, run)
                text = _ADVICE[outcome]
            else:
                continue
            retry = code in (None, "token_limit_exceeded")
            text += (
                f".\n    Fix: mmirage merge --config {config} --run-id {run} --output-path "
                f"OUT.jsonl, then mmirage resubmit --config {config} --run-id {run}"
                if retry
                else "."
            )
            if retry and run in children:
                text += (
                    f"\n    (already resubmitted as run(s) {', '.join(sorted(children[run]))}; "
                    "merge takes the newest successful results across them, and resubmit "
                    "re-sends only what is still failing)"
                )
        if key in seen:
            continue
        seen.add(key)
        lines.append(f"  - run {run}: {text}")
    return (["what this means:"] + lines) if lines else []
