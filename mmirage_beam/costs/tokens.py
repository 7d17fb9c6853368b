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

import hashlib
import json
import logging
import math
from typing import Any, Mapping, NamedTuple, Optional, Union

from mmirage_beam.errors import ConfigError, CredentialsError
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.providers.config import BatchProviderConfigRegistry
from mmirage_beam.providers.tokens import TokenCount

__all__ = [
    "TOKEN_METRICS",
    "SampleEstimate",
    "TokenCount",
    "TokenCounter",
    "check_sample_fraction",
    "extrapolated_counters",
    "in_sample",
    "sample_estimate",
    "scaled_counts",
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
# ``--estimate sample`` only (never incremented by an exact estimate): the requests not
# in the sample (counted in REQUESTS_COUNTED, nothing else), and the sum of the squared
# input tokens of the sampled ones (for the error bound). Every other counter then sums
# over the sampled requests only; :func:`sample_estimate` extrapolates.
REQUESTS_NOT_SAMPLED = "token_requests_not_sampled"
INPUT_TOKENS_SQUARES = "input_tokens_squares"
TOKEN_METRICS = (
    INPUT_TOKENS,
    INPUT_TOKENS_ESTIMATED,
    REQUESTS_COUNTED,
    REQUESTS_ESTIMATED,
    MAX_OUTPUT_TOKENS,
    REQUESTS_WITHOUT_OUTPUT_LIMIT,
    REQUESTS_UNKNOWN,
    REQUESTS_NOT_SAMPLED,
    INPUT_TOKENS_SQUARES,
)
#: the counters summed over the sampled requests only, scaled up by the extrapolation
_SAMPLED_SUMS = (
    INPUT_TOKENS,
    INPUT_TOKENS_ESTIMATED,
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

_HASH_SPAN = float(1 << 64)


def check_sample_fraction(fraction: Any, key: str = "--estimate-fraction") -> float:
    """``fraction`` as a float in (0, 1].

    Raises:
        ConfigError: not a number, or not in (0, 1] (the message names ``key``).
    """
    try:
        value = float(fraction)
    except (TypeError, ValueError):
        raise ConfigError(key, f"must be a number in (0, 1], got {fraction!r}") from None
    if not (0.0 < value <= 1.0):  # also NaN
        raise ConfigError(key, f"must be in (0, 1] (e.g. 0.01 for 1%), got {fraction!r}")
    return value


def in_sample(custom_id: str, fraction: float) -> bool:
    """Whether the request ``custom_id`` is in the ``fraction`` sample of
    ``--estimate sample``: the first 8 bytes of its BLAKE2b hash, as a number in [0, 1),
    fall below ``fraction``. A pure function of the custom_id (which is a function of
    the output, the modality and the source_index), so every worker, runner and rerun
    samples the same requests."""
    if fraction >= 1.0:
        return True
    digest = hashlib.blake2b(custom_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _HASH_SPAN < fraction


# Student's t, two-sided 95% (0.975 quantile), for 1..30 degrees of freedom (any
# statistics table, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2); above 30, the normal 1.96.
_T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


class SampleEstimate(NamedTuple):
    """One output's input tokens extrapolated from a sample (``--estimate sample``).

    ``requests``: every request counted (N); ``sampled``: those whose tokens were
    counted (n); ``input_tokens``: N times the sampled mean; ``bound_tokens``: the 95%
    half-width of that total (t quantile for n - 1 degrees of freedom times the
    standard error of the mean times N, with the finite-population correction); None
    when fewer than 2 requests were sampled (no bound can be given). ``scale``: N / n
    (0 when nothing was sampled).
    """

    requests: int
    sampled: int
    input_tokens: int
    bound_tokens: Optional[float]
    scale: float

    @property
    def upper_tokens(self) -> Optional[int]:
        """The 95% upper bound of the input tokens (None: no bound)."""
        if self.bound_tokens is None:
            return None
        return int(math.ceil(self.input_tokens + self.bound_tokens))


def sample_estimate(r: Mapping[str, int]) -> Optional[SampleEstimate]:
    """The :class:`SampleEstimate` of one output's counters (``{metric: value}``, the
    metrics of :data:`TOKEN_METRICS`); None when the counts are exact (no request was
    left out of a sample)."""
    left_out = int(r.get(REQUESTS_NOT_SAMPLED, 0))
    if left_out <= 0:
        return None
    total_n = int(r.get(REQUESTS_COUNTED, 0))
    n = max(total_n - left_out, 0)
    if n == 0:
        return SampleEstimate(total_n, 0, 0, None, 0.0)
    s = float(r.get(INPUT_TOKENS, 0))
    mean = s / n
    estimate = int(round(mean * total_n))
    if n < 2:
        return SampleEstimate(total_n, n, estimate, None, total_n / n)
    var = max(float(r.get(INPUT_TOKENS_SQUARES, 0)) - s * s / n, 0.0) / (n - 1)
    fpc = max(1.0 - n / total_n, 0.0)
    t = _T_975[n - 2] if n - 1 <= len(_T_975) else 1.96
    bound = t * math.sqrt(var / n * fpc) * total_n
    return SampleEstimate(total_n, n, estimate, bound, total_n / n)


def scaled_counts(r: Mapping[str, int], est: SampleEstimate) -> dict[str, int]:
    """One output's counters (``{metric: value}``) with those summed over the sample
    scaled up to all its requests: the input tokens are ``est.input_tokens``, the other
    sums are multiplied by ``est.scale``; the rest are kept as they are."""
    out = dict(r)
    for metric in _SAMPLED_SUMS:
        if metric in out:
            out[metric] = (
                est.input_tokens if metric == INPUT_TOKENS else round(r[metric] * est.scale)
            )
    return out


def extrapolated_counters(stats: Mapping[str, int]) -> dict[str, int]:
    """``stats`` with each sampled output's token counters (``<metric>:<output>``)
    scaled up to all its requests (:func:`scaled_counts`), and the sampling counters
    dropped: what a run record keeps as its estimate. Exact counters are returned as
    they are."""
    by_output: dict[str, dict[str, int]] = {}
    for key, value in stats.items():
        metric, sep, output = key.partition(":")
        if sep and metric in TOKEN_METRICS:
            by_output.setdefault(output, {})[metric] = int(value)
    out = dict(stats)
    for output, r in by_output.items():
        est = sample_estimate(r)
        if est is None:
            continue
        for metric, value in scaled_counts(r, est).items():
            out[f"{metric}:{output}"] = value
        for metric in (REQUESTS_NOT_SAMPLED, INPUT_TOKENS_SQUARES):
            out.pop(f"{metric}:{output}", None)
    return out


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

    With ``sample_fraction`` (``--estimate sample``), ``record`` counts only the requests
    :func:`in_sample` keeps (by custom_id); the others add 1 to
    ``token_requests:<output>`` and ``token_requests_not_sampled:<output>`` and nothing
    else, and the sampled ones also add their squared input tokens to
    ``input_tokens_squares:<output>`` (see :func:`sample_estimate`).

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
        sample_fraction: Optional[float] = None,
    ) -> None:
        self.provider = provider
        self.sample_fraction = (
            None if sample_fraction is None else check_sample_fraction(sample_fraction)
        )
        self.model = model
        self.exact_tokens = bool(exact_tokens)
        self.base_url = base_url
        self.provider_config = provider_config
        self._counters: dict[str, Any] = {}
        adapter = self._adapter()
        self._exact = (
            adapter.exact_token_counter(self._config_for_exact())
            if self.exact_tokens and adapter.counts_tokens_exactly
            else None
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

    def record(
        self, output_name: str, request: Request, custom_id: Optional[str] = None
    ) -> Optional[TokenCount]:
        """Count ``request`` for the Beam counters of ``output_name`` (added at the next
        :meth:`flush`). With ``sample_fraction``, ``custom_id`` decides whether it is in
        the sample; one left out is only counted as a request, and None is returned.

        Raises:
            ValueError: ``sample_fraction`` is set and ``custom_id`` is not given.
        """
        inc = self._inc
        if self.sample_fraction is not None:
            if custom_id is None:
                raise ValueError("a sampled TokenCounter needs each request's custom_id")
            if not in_sample(custom_id, self.sample_fraction):
                # tallied per output, folded into the pending counts when they are read
                skipped = self.__dict__.setdefault("_skipped", {})
                skipped[output_name] = skipped.get(output_name, 0) + 1
                return None
        tc = self.count(request)
        inc(INPUT_TOKENS, output_name, tc.input_tokens)
        inc(REQUESTS_COUNTED, output_name, 1)
        if self.sample_fraction is not None:
            inc(INPUT_TOKENS_SQUARES, output_name, tc.input_tokens * tc.input_tokens)
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

    def _fold_skipped(self) -> None:
        """Add the requests left out of the sample since the last call to the pending
        counts (each is a request counted and one not sampled)."""
        skipped = self.__dict__.get("_skipped")
        if not skipped:
            return
        for output_name, n in skipped.items():
            self._inc(REQUESTS_COUNTED, output_name, n)
            self._inc(REQUESTS_NOT_SAMPLED, output_name, n)
        skipped.clear()

    def pending_stats(self) -> dict[str, int]:
        """What :meth:`record` counted since the last flush, keyed like the Beam
        counters (``"<metric>:<output>"``)."""
        self._fold_skipped()
        pending = self.__dict__.get("_pending") or {}
        return {f"{name}:{output}": value for (name, output), value in pending.items()}

    def flush(self) -> None:
        """Add what :meth:`record` counted since the last flush to the Beam counters;
        call it from the DoFn's ``finish_bundle``."""
        self._fold_skipped()
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


def token_counter_for(
    provider_config: Any, sample_fraction: Optional[float] = None
) -> TokenCounter:
    """The :class:`TokenCounter` of a processor config (``provider``, ``model``,
    ``exact_tokens``, ``base_url``); ``sample_fraction``: count only that share of the
    requests (``--estimate sample``), None: every request."""
    return TokenCounter(
        provider_config.provider,
        getattr(provider_config, "model", None),
        exact_tokens=bool(getattr(provider_config, "exact_tokens", False)),
        base_url=getattr(provider_config, "base_url", None),
        provider_config=provider_config,
        sample_fraction=sample_fraction,
    )
