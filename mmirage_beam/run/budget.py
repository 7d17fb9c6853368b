"""``max_enqueued_tokens``: wait before creating a batch that would exceed it.

OpenAI limits, per organisation and model, the prompt tokens of batches not yet
finished ("enqueued"); a batch over the limit is still *accepted*, then fails as a whole
with ``token_limit_exceeded`` (PROVIDERS.md: exceeding the token limit "is not an HTTP
error: the batch is created and later becomes failed"; the fake does the same). With
``max_enqueued_tokens`` set on the processor, mmirage-beam **waits**: before each batch
is created, :meth:`TokenBudget.wait_for_token_budget` adds up the estimated input tokens
of this run's batches that have not finished (their receipts carry
``input_tokens_estimate``; their status is asked of the provider) and sleeps until the
new chunk fits. Nothing is split or re-chunked, so chunk ids and receipts are the same
as without the limit.

Limits of the accounting: only this run's batches are counted (set the limit to what
your other jobs leave free); SubmitChunks workers that create batches at the same moment
do not see each other's chunk until its receipt exists (use one submitting worker, or
leave headroom); a single chunk above the limit is submitted alone once nothing else of
the run is enqueued (with a warning: lower ``max_requests_per_chunk``). Within one
SubmitChunks DoFn (up to ``submit_concurrency`` threads) the check and the reservation
of a chunk's tokens are atomic, so its own threads never overshoot together.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

from mmirage_beam.costs.tokens import TokenCounter
from mmirage_beam.providers.base import ENDED_STATUSES
from mmirage_beam.run.staging import iter_lines
from mmirage_beam.run.store import RunStore

__all__ = [
    "RECEIPT_TOKENS_KEY",
    "DEFAULT_POLL_INTERVAL_SECS",
    "TokenBudget",
    "token_budget_for",
]


_LOG = logging.getLogger(__name__)
#: receipt field holding a batch's estimated input tokens (written when a limit is set)
RECEIPT_TOKENS_KEY = "input_tokens_estimate"
DEFAULT_POLL_INTERVAL_SECS = 30.0
_MODALITIES = ("text", "multimodal")


class TokenBudget:
    """The enqueued-token budget of one run, for one SubmitChunks DoFn instance.

    Args:
        limit_tokens: ``max_enqueued_tokens``.
        provider_config: the processor config (for the token counter and lookups).
        receipts_base: ``metadata_output_path`` without ``.jsonl``.
        run_id: the run whose receipt parts are counted.
        poll_interval_secs: seconds between status lookups while waiting.
        sleep, clock: injectable for tests.
    """

    def __init__(
        self,
        limit_tokens: int,
        provider_config: Any,
        receipts_base: str,
        run_id: str,
        poll_interval_secs: float = DEFAULT_POLL_INTERVAL_SECS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.limit_tokens = int(limit_tokens)
        self._config = provider_config
        self._base = receipts_base
        self._run_id = run_id
        self._poll = float(poll_interval_secs)
        self._sleep = sleep
        # Offline counts only: an exact count per request is not worth a call here.
        self._counter = TokenCounter(
            provider_config.provider, getattr(provider_config, "model", None)
        )
        self._finished: set[str] = set()  # provider batch ids seen terminal
        self._warned = False
        # chunk_id -> tokens of chunks let through whose receipt is not written yet
        self._reserved: dict[str, int] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def chunk_tokens(self, chunk: Any) -> int:
        """Estimated input tokens of a chunk: a :class:`~mmirage_beam.records.ChunkRef`
        (its staged lines are read, streamed) or anything with ``requests`` holding
        ``line`` bytes."""
        if hasattr(chunk, "requests"):
            lines: Any = (r.line for r in chunk.requests)
        else:
            lines = iter_lines(chunk.path)
        return sum(self._counter.count(line).input_tokens for line in lines)

    def enqueued_tokens(self, adapter: Any) -> int:
        """Input tokens of this run's receipted batches that have not finished, asking
        the provider (``adapter.check_batch_status``) about each one not yet seen
        finished; a lookup that fails counts the batch as enqueued."""
        total = 0
        for modality in _MODALITIES:
            for receipt in RunStore(self._base, self._run_id).read_receipts(modality):
                if receipt.chunk_id is not None:
                    self._reserved.pop(receipt.chunk_id, None)  # now counted here
                batch_id = receipt.provider_batch_id
                tokens = receipt.input_tokens_estimate  # RECEIPT_TOKENS_KEY
                if not batch_id or tokens is None or batch_id in self._finished:
                    continue
                try:
                    status = adapter.check_batch_status(batch_id, self._config).status
                except Exception as exc:  # noqa: BLE001 - counted as enqueued, asked again
                    _LOG.warning("status of %s unknown (%s); counted as enqueued", batch_id, exc)
                    status = "unknown"
                if status in ENDED_STATUSES:
                    self._finished.add(batch_id)
                else:
                    total += int(tokens)
        return total

    def wait_for_token_budget(
        self,
        chunk: Any,
        adapter: Any,
        check_stop: Optional[Callable[[], None]] = None,
    ) -> int:
        """Block until ``chunk`` fits under the limit; return its estimated tokens (to
        be stored in its receipt as ``input_tokens_estimate``).

        ``check_stop`` is called before every wait (SubmitChunks passes its stop-marker
        check, which raises ``RunStopped``), so a stop request ends the wait.
        """
        tokens = self.chunk_tokens(chunk)
        if tokens > self.limit_tokens:
            _LOG.warning(
                "chunk %s holds about %d input tokens, more than max_enqueued_tokens (%d): "
                "it is submitted alone once nothing else of run %s is enqueued "
                "(lower max_requests_per_chunk to keep chunks under the limit)",
                chunk.chunk_id,
                tokens,
                self.limit_tokens,
                self._run_id,
            )
        while True:
            with self._lock:
                enqueued = self.enqueued_tokens(adapter) + sum(self._reserved.values())
                if enqueued + tokens <= self.limit_tokens or enqueued == 0:
                    self._reserved[chunk.chunk_id] = tokens
                    return tokens
            if not self._warned:
                self._warned = True
                _LOG.warning(
                    "run %s: max_enqueued_tokens (%d) reached: %d tokens enqueued, chunk %s "
                    "needs %d more; waiting for earlier batches to finish",
                    self._run_id,
                    self.limit_tokens,
                    enqueued,
                    chunk.chunk_id,
                    tokens,
                )
            if check_stop is not None:
                check_stop()
            self._sleep(self._poll)


def token_budget_for(
    provider_config: Any,
    receipts_base: str,
    run_id: str,
    poll_interval_secs: Optional[float] = None,
) -> Optional[TokenBudget]:
    """The :class:`TokenBudget` of a processor with ``max_enqueued_tokens``, else None.
    ``poll_interval_secs`` defaults to 30 s (``MMIRAGE_TOKEN_BUDGET_POLL_SECS`` in the
    worker's environment overrides it, for tests against a fast fake)."""
    limit = getattr(provider_config, "max_enqueued_tokens", None)
    if limit is None:
        return None
    if poll_interval_secs is None:
        import os

        poll_interval_secs = float(
            os.environ.get("MMIRAGE_TOKEN_BUDGET_POLL_SECS", DEFAULT_POLL_INTERVAL_SECS)
        )
    return TokenBudget(limit, provider_config, receipts_base, run_id, poll_interval_secs)
