"""Per-request token counts: input tokens, the output-token upper bound, exact or not.

    request line (bytes/str) or request dict --TokenCounter.count--> TokenCount

A request is what the provider's adapter built (``BatchRequest.line``). Counting is
the adapter's (:class:`~mmirage_beam.providers.base.BatchSubmissionAdapter`, with the
helpers of :mod:`mmirage_beam.providers.tokens`): ``count_request_tokens`` (offline, a
pure function of the line, so it gives the same answer on every worker) and, with
``exact_tokens``, ``exact_token_counter`` (the provider's own free counting endpoint).
An adapter that cannot count makes the request's tokens "unknown"
(:attr:`TokenCount.unknown`), never 0.

This module holds :class:`TokenCounter`, which counts each request and keeps the Beam
counters named here.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Optional, Union

from mmirage_beam.errors import CredentialsError
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.providers.config import BatchProviderConfigRegistry
from mmirage_beam.providers.tokens import TokenCount

__all__ = [
    "TOKEN_METRICS",
    "TokenCount",
    "TokenCounter",
    "token_counter_for",
    "token_counters",
]

_LOG = logging.getLogger(__name__)

#: Beam counter names, one of each per output (``<name>:<output_name>``), all in
#: :data:`METRICS_NAMESPACE`. Tokens are summed over the requests built.
INPUT_TOKENS = "input_tokens"
INPUT_TOKENS_ESTIMATED = "input_tokens_estimated"  # the part of INPUT_TOKENS not exact
REQUESTS_COUNTED = "token_requests"
REQUESTS_ESTIMATED = "token_requests_estimated"
MAX_OUTPUT_TOKENS = "max_output_tokens"  # sum of the requests' output limits
REQUESTS_WITHOUT_OUTPUT_LIMIT = "requests_without_output_limit"
REQUESTS_UNKNOWN = "token_requests_unknown"  # requests the provider cannot count
TOKEN_METRICS = (
    INPUT_TOKENS,
    INPUT_TOKENS_ESTIMATED,
    REQUESTS_COUNTED,
    REQUESTS_ESTIMATED,
    MAX_OUTPUT_TOKENS,
    REQUESTS_WITHOUT_OUTPUT_LIMIT,
    REQUESTS_UNKNOWN,
)


def token_counters(stats: dict[str, int]) -> dict[str, int]:
    """The ``<metric>:<output>`` counters of :data:`TOKEN_METRICS` among ``stats``."""
    return {
        k: int(v) for k, v in stats.items() if ":" in k and k.partition(":")[0] in TOKEN_METRICS
    }


Request = Union[bytes, str, dict]


def _as_dict(request: Request) -> dict[str, Any]:
    if isinstance(request, dict):
        return request
    return json.loads(request)


class TokenCounter:
    """Counts each request of one processor, and records the counts as Beam counters.

    Build one per worker (e.g. in a DoFn's ``setup()``); it keeps only the provider name,
    the model, the processor config and, for ``exact_tokens``, the base URL, so pickling
    it is safe. The adapter (found in the registry by ``provider``), the tokenizer and
    any client are made on first use.

    ``count(request)`` -> :class:`TokenCount` for one request (line bytes/str or dict).
    ``record(output_name, request)`` counts it and increments, in namespace ``mmirage``,
    ``input_tokens:<output>``, ``input_tokens_estimated:<output>``,
    ``token_requests:<output>``, ``token_requests_estimated:<output>``,
    ``max_output_tokens:<output>`` and ``requests_without_output_limit:<output>``.

    ``token_requests_unknown:<output>`` counts the requests the provider's adapter cannot
    count (its ``count_request_tokens`` answers None).

    With ``exact_tokens``, a provider whose adapter has an ``exact_token_counter`` has
    each request counted by its own endpoint (key read on the worker); a call that fails
    after the SDK's retries falls back to the estimate.

    Raises (from ``count``):
        ValueError: the request is not JSON or not the provider's request shape.
        CredentialsError: ``exact_tokens`` without the provider's key on the worker.
    """

    def __init__(
        self,
        provider: str,
        model: Optional[str] = None,
        exact_tokens: bool = False,
        base_url: Optional[str] = None,
        provider_config: Any = None,
    ) -> None:
        self.provider = provider
        self.model = model
        self.exact_tokens = bool(exact_tokens)
        self.base_url = base_url
        self.provider_config = provider_config
        self._counters: dict[str, Any] = {}
        adapter = self._adapter()
        self._exact = (
            adapter.exact_token_counter(self._config_for_exact()) if self.exact_tokens else None
        )

    def _adapter(self) -> Any:
        adapter = self.__dict__.get("_adapter_obj")
        if adapter is None:
            adapter = self._adapter_obj = BatchAdapterRegistry.get(self.provider)()
        return adapter

    def _config_for_exact(self) -> Any:
        if self.provider_config is not None:
            return self.provider_config
        kwargs: dict[str, Any] = {}
        cls = BatchProviderConfigRegistry.get(self.provider)
        for key, value in (("model", self.model), ("base_url", self.base_url)):
            if value is not None and key in cls.field_names():
                kwargs[key] = value
        return cls(**kwargs)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_counters"] = {}
        state.pop("_adapter_obj", None)
        return state

    def count(self, request: Request) -> TokenCount:
        req = _as_dict(request)
        estimate = self._adapter().count_request_tokens(req, self.model)
        if estimate is None:
            return TokenCount(
                0, None, False, (f"no token counter for {self.provider!r}",), unknown=True
            )
        if self._exact is not None:
            try:
                return TokenCount(self._exact(req), estimate.max_output_tokens, True, ())
            except Exception as exc:  # noqa: BLE001 - an estimate beats a failed run
                if isinstance(exc, CredentialsError):
                    raise
                _LOG.warning(
                    "exact token count failed (%s); this request is estimated",
                    type(exc).__name__,
                )
        return estimate

    def record(self, output_name: str, request: Request) -> TokenCount:
        """Count ``request`` for the Beam counters of ``output_name`` (added at the next
        :meth:`flush`)."""
        tc = self.count(request)
        inc = self._inc
        inc(INPUT_TOKENS, output_name, tc.input_tokens)
        inc(REQUESTS_COUNTED, output_name, 1)
        if tc.unknown:
            inc(REQUESTS_UNKNOWN, output_name, 1)
        if not tc.exact:
            inc(INPUT_TOKENS_ESTIMATED, output_name, tc.input_tokens)
            inc(REQUESTS_ESTIMATED, output_name, 1)
        if tc.max_output_tokens is None:
            inc(REQUESTS_WITHOUT_OUTPUT_LIMIT, output_name, 1)
        else:
            inc(MAX_OUTPUT_TOKENS, output_name, tc.max_output_tokens)
        return tc

    def _inc(self, name: str, output_name: str, value: int) -> None:
        # Summed here and added to the Beam counters by flush() (once per bundle): a
        # metrics lookup per request and counter costs more than the count itself.
        pending = self.__dict__.setdefault("_pending", {})
        key = (name, output_name)
        pending[key] = pending.get(key, 0) + value

    def pending_stats(self) -> dict[str, int]:
        """What :meth:`record` counted since the last flush, keyed like the Beam
        counters (``"<metric>:<output>"``)."""
        pending = self.__dict__.get("_pending") or {}
        return {f"{name}:{output}": value for (name, output), value in pending.items()}

    def flush(self) -> None:
        """Add what :meth:`record` counted since the last flush to the Beam counters;
        call it from the DoFn's ``finish_bundle``."""
        pending = self.__dict__.get("_pending")
        if not pending:
            return
        from apache_beam.metrics import Metrics

        for (name, output_name), value in pending.items():
            key = f"{name}:{output_name}"
            counter = self._counters.get(key)
            if counter is None:
                counter = self._counters[key] = Metrics.counter(METRICS_NAMESPACE, key)
            counter.inc(value)
        pending.clear()


def token_counter_for(provider_config: Any) -> TokenCounter:
    """The :class:`TokenCounter` of a processor config (``provider``, ``model``,
    ``exact_tokens``, ``base_url``)."""
    return TokenCounter(
        provider_config.provider,
        getattr(provider_config, "model", None),
        exact_tokens=bool(getattr(provider_config, "exact_tokens", False)),
        base_url=getattr(provider_config, "base_url", None),
        provider_config=provider_config,
    )
