"""Status lookups: every distinct receipted batch looked up through its provider's adapter
(``check_batch_status`` then ``describe_batch``); a batch that cannot be resolved becomes
a :data:`LOOKUP_FAILED` status and never hides the others. Used by ``mmirage check`` and
by the run wing itself: run selection (merge, resubmit), cancel and ``mmirage runs``."""

from __future__ import annotations

import logging
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
    Tuple,
)

from mmirage_beam.costs.report import batch_usage_line
from mmirage_beam.errors import ConfigError
from mmirage_beam.providers.base import (
    ENDED_STATUSES,
    BatchAdapterRegistry,
    BatchProgress,
    BatchSubmissionAdapter,
    OpenedAdapters,
    resolve_credentials,
)
from mmirage_beam.providers.config import BatchProviderConfigRegistry
from mmirage_beam.run.discovery import ReceiptEntry, ReceiptSet

if TYPE_CHECKING:
    from mmirage_beam.config.loader import PipelineConfig
    from mmirage_beam.providers.config import BatchProviderConfig

__all__ = [
    "LOOKUP_FAILED",
    "NOT_FOUND_HERE",
    "is_not_found",
    "TERMINAL_STATUSES",
    "STATUS_ORDER",
    "BatchStatus",
    "BatchStatusChecker",
    "check_statuses",
    "not_terminal",
    "exit_code",
]


_LOG = logging.getLogger(__name__)

#: status of a batch its provider could not resolve (e.g. an unknown batch id).
LOOKUP_FAILED = "lookup_failed"
#: statuses at which a watch stops following a batch: it ended at its provider
#: (:data:`~mmirage_beam.providers.base.ENDED_STATUSES`) or cannot be looked up, so that
#: a watch loop cannot spin forever on a batch that does not exist.
TERMINAL_STATUSES = (*ENDED_STATUSES, LOOKUP_FAILED)
#: the order statuses are listed in, in summaries.
STATUS_ORDER = ("completed", "in_progress", "unknown", "failed", LOOKUP_FAILED)

_MAX_ERROR_CHARS = 200
_DEFAULT_LOOKUP_WORKERS = 8


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
        not_found: the lookup failed with HTTP 404 after its one retry: the batch is not
            on this endpoint or account (another ``base_url``, key or project).
    """

    receipt: ReceiptEntry
    status: str
    progress: Optional[BatchProgress] = None
    error: Optional[str] = None
    checked_at: float = 0.0
    not_found: bool = False

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
        """Requests that failed (None when unknown), those that never ran included.

        The provider's failed count, plus :attr:`not_run`: an expired or cancelled
        batch's requests that never ran are counted neither completed nor failed by the
        provider (OpenAI ``request_counts``), yet each is a failed request for merge and
        ``resubmit``, so ``check`` counts them too.
        """
        if self.progress is None or self.progress.failed is None:
            return None
        return self.progress.failed + (self.not_run or 0)

    @property
    def not_run(self) -> Optional[int]:
        """Requests of an ended batch that neither completed nor failed:
        ``total - completed - failed`` when positive, else 0; None while the batch runs
        or when the provider gave no counts. Never assumes completed + failed == total.
        """
        p = self.progress
        if p is None or self.status not in ("completed", "failed"):
            return None
        if p.total is None or p.completed is None or p.failed is None:
            return None
        return max(0, p.total - p.completed - p.failed)

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
        detail = self.progress.detail if self.progress else ""
        if self.not_run:
            detail = "; ".join(filter(None, [detail, f"{self.not_run} never ran"]))
        return detail


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
        self._adapters = OpenedAdapters(self._redact)
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
            self._adapters.open(provider, adapter_cls, self._configs[provider], credentials=creds)

    def close(self) -> None:
        """``teardown()`` every adapter (errors are logged, not raised)."""
        self._adapters.close()  # a failure is logged (redacted): it must not hide the report

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
            progress = _with_usage(adapter.describe_batch(result), result.raw_response)
        except Exception as exc:
            not_found = is_not_found(exc, adapter)
            message = self._redact(exc, not_found)
            _LOG.debug(
                "lookup of %s %s failed: %s", entry.provider, entry.provider_batch_id, message
            )
            return BatchStatus(
                entry, LOOKUP_FAILED, None, message, self._clock(), not_found=not_found
            )
        return BatchStatus(entry, result.status, progress, None, self._clock())

    def cancel_one(self, entry: ReceiptEntry) -> BatchStatus:
        """Cancel one batch through its adapter's ``cancel_batch``; its status as the
        cancel call answered, or :data:`LOOKUP_FAILED` with the (redacted) reason.

        Raises:
            KeyError: ``entry.provider`` is not one of the checker's providers.
        """
        adapter = self._adapters[entry.provider]
        config = self._configs[entry.provider]
        if not adapter.cancels_batches:
            reason = f"{entry.provider!r} cannot cancel batches (its adapter has no cancel call)"
            return BatchStatus(entry, LOOKUP_FAILED, None, reason, self._clock())
        try:
            result = adapter.cancel_batch(entry.provider_batch_id, config)
            progress = adapter.describe_batch(result)
        except Exception as exc:
            return BatchStatus(entry, LOOKUP_FAILED, None, self._redact(exc), self._clock())
        return BatchStatus(entry, result.status, progress, None, self._clock())

    def _redact(self, exc: BaseException, not_found: bool = False) -> str:
        text = _short_error(exc, not_found)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


def _with_usage(progress: BatchProgress, raw: Any) -> BatchProgress:
    """``progress`` with the tokens the provider reports used so far in its detail
    (OpenAI batch ``usage``; Anthropic batch objects carry none)."""
    import dataclasses

    used = batch_usage_line((raw or {}).get("usage") if isinstance(raw, dict) else None)
    if used is None:
        return progress
    return dataclasses.replace(progress, detail="; ".join(filter(None, [progress.detail, used])))


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


def _provider_config(provider: str, config: Optional[PipelineConfig]) -> BatchProviderConfig:
    if config is not None and config.processor.provider == provider:
        return config.processor

    cls = BatchProviderConfigRegistry.get(provider)
    try:
        return cls()
    except (TypeError, ConfigError) as exc:
        raise ConfigError(
            "provider",
            f"receipts name provider {provider!r}, which is not the config's; its config "
            f"class {cls.__name__} cannot be built with defaults ({exc})",
        ) from None


#: what a 404 on looking a receipted batch up means (it was created, so not "expired")
NOT_FOUND_HERE = "not found on this endpoint or account"


def is_not_found(exc: BaseException, adapter: Any = None) -> bool:
    """True when ``exc`` (or an error it wraps) is an HTTP 404, by ``status_code`` or the
    adapter's ``http_status`` (Gemini's errors carry ``code``)."""
    seen: Optional[BaseException] = exc
    for _ in range(5):
        if seen is None:
            break
        status = adapter.http_status(seen) if adapter is not None else None
        if status == 404 or getattr(seen, "status_code", None) == 404:
            return True
        seen = seen.__cause__
    return False


def _short_error(exc: BaseException, not_found: bool = False) -> str:
    """``<ExceptionType> (HTTP <code>): <provider message>``, on one line, cut short; a
    404 (``not_found``) says what it means (:data:`NOT_FOUND_HERE`), not "expired"."""
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
    if not_found or is_not_found(exc):
        head = f"{name} (HTTP 404: {NOT_FOUND_HERE})"
    return f"{head}: {message}" if message else head
