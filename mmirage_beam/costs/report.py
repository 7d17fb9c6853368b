"""The token and cost lines the launchers print, from the pipelines' Beam counters.

``mmirage run`` (dry run or real): :func:`estimate_lines` over the counters of
:class:`mmirage_beam.costs.tokens.TokenCounter` (``input_tokens:<output>``, ...).
``mmirage merge``: :func:`usage_lines` over ``used_input_tokens:<output>`` /
``used_output_tokens:<output>`` (the usage the provider reported, summed in merge).
``mmirage check``: :func:`batch_usage_line` for one provider batch object.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional

from mmirage_beam.costs import tokens as t
from mmirage_beam.costs.prices import BatchPrice, batch_price

__all__ = [
    "USED_INPUT_TOKENS",
    "USED_OUTPUT_TOKENS",
    "USED_CACHE_READ",
    "USED_CACHE_WRITE",
    "USED_CACHED_INPUT",
    "USED_REASONING",
    "CACHE_READ_PRICE_FACTOR",
    "CACHE_WRITE_PRICE_FACTOR",
    "per_output",
    "estimate_lines",
    "usage_lines",
    "batch_usage_line",
]


USED_INPUT_TOKENS = "used_input_tokens"
USED_OUTPUT_TOKENS = "used_output_tokens"
#: Anthropic prompt caching, per output (counted by the merge when reported)
USED_CACHE_READ = "used_cache_read_input_tokens"
USED_CACHE_WRITE = "used_cache_creation_input_tokens"
#: cache reads cost 0.1x and 5-minute cache writes 1.25x the base input price
#: (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching#pricing)
CACHE_READ_PRICE_FACTOR = 0.1
#: OpenAI prompt caching and reasoning, per output: ``cached_tokens`` are part of the
#: input tokens, billed at the model's cached-input price (``BatchPrice.cached_input``;
#: the input price where the table has none, an upper bound); ``reasoning_tokens`` are
#: part of the output tokens (shown, priced as output)
USED_CACHED_INPUT = "used_cached_input_tokens"
USED_REASONING = "used_reasoning_tokens"
CACHE_WRITE_PRICE_FACTOR = 1.25


def per_output(stats: Mapping[str, int], names: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """``{output: {metric: value}}`` from counters named ``<metric>:<output>``."""
    out: dict[str, dict[str, int]] = {}
    for key, value in stats.items():
        metric, sep, output = key.partition(":")
        if sep and metric in names:
            out.setdefault(output, {})[metric] = int(value)
    return out


def _usd(x: float) -> str:
    return f"${x:,.2f}" if x >= 1 else f"${x:,.4f}"


def _price_note(price: Optional[BatchPrice], model: Optional[str]) -> str:
    if price is None:
        return f"price unknown for {model!r} (set price_per_million_input_tokens / _output_tokens)"
    return (
        f"batch price {model}: ${price.input_per_million:g} in / "
        f"${price.output_per_million:g} out per million tokens ({price.source})"
    )


def estimate_lines(stats: Mapping[str, int], provider_config: Any) -> list[str]:
    """Per output and in total: requests, input tokens (exact or estimate), output-token
    upper bound, estimated cost at the batch price; then the ``max_enqueued_tokens``
    warning when the run's input tokens exceed it. Empty when nothing was counted.

    An output counted by ``--estimate sample`` (``token_requests_not_sampled:<output>``)
    shows its extrapolated input tokens as ``~N (sampled n of N requests, ... ±x% at
    95%)``; its cost and the ``max_enqueued_tokens`` comparison use the 95% upper bound
    of the input tokens (:func:`mmirage_beam.costs.tokens.sample_estimate`), and an
    output with fewer than 2 sampled requests has its input tokens and cost unknown."""
    rows = per_output(stats, t.TOKEN_METRICS)
    if not rows:
        return []
    model = getattr(provider_config, "model", None)
    price = batch_price(provider_config.provider, model, provider_config)
    lines = ["tokens and estimated cost:", "  " + _price_note(price, model)]
    total = {m: 0 for m in t.TOKEN_METRICS}
    samples: list[Optional[t.SampleEstimate]] = []
    for name in sorted(rows):
        r = {m: rows[name].get(m, 0) for m in t.TOKEN_METRICS}
        sample = t.sample_estimate(r)
        samples.append(sample)
        if sample is not None:  # still counts as sampled (token_requests_not_sampled)
            r = t.scaled_counts(r, sample)
        for m in t.TOKEN_METRICS:
            total[m] += r[m]
        lines.append(_estimate_line(name, r, price, sample))
    sampled = [s for s in samples if s is not None]
    total_sample = _combined(sampled, total) if sampled else None
    if len(rows) > 1:
        lines.append(_estimate_line("total", total, price, total_sample))
    limit = getattr(provider_config, "max_enqueued_tokens", None)
    if limit is not None and total_sample is not None:
        upper = total_sample.upper_tokens
        if upper is None:
            lines.append(
                "  warning: too few requests sampled to compare the run's input tokens "
                f"with max_enqueued_tokens ({limit:,}); use --estimate exact"
            )
        elif upper > limit:
            lines.append(
                f"  warning: the run's input tokens (~{total[t.INPUT_TOKENS]:,}, up to "
                f"{upper:,} at the 95% bound of the sample) may exceed max_enqueued_tokens "
                f"({limit:,}): batches are created only while this run's unfinished batches "
                "hold at most that many (submission waits for earlier batches to finish; see "
                "docs/tokens-and-cost.md, 'Enqueued-token limit')"
            )
    elif limit is not None and total[t.INPUT_TOKENS] > limit:
        lines.append(
            f"  warning: the run's {total[t.INPUT_TOKENS]:,} input tokens exceed "
            f"max_enqueued_tokens ({limit:,}): batches are created only while this run's "
            "unfinished batches hold at most that many (submission waits for earlier "
            "batches to finish; see docs/tokens-and-cost.md, 'Enqueued-token limit')"
        )
    return lines


def _combined(samples: list[t.SampleEstimate], total: Mapping[str, int]) -> t.SampleEstimate:
    """Several outputs' samples as one (independent samples: the bounds add in
    quadrature); the requests of outputs counted exactly add no error."""
    few = [s for s in samples if s.sampled < 2]
    if few:  # the total is as unknown as that output's tokens
        return few[0]
    bounds = [s.bound_tokens for s in samples]
    bound = None if any(b is None for b in bounds) else math.sqrt(sum(b * b for b in bounds))
    return t.SampleEstimate(
        total[t.REQUESTS_COUNTED],
        total[t.REQUESTS_COUNTED] - total[t.REQUESTS_NOT_SAMPLED],
        total[t.INPUT_TOKENS],
        bound,
        0.0,
    )


def _sample_note(sample: t.SampleEstimate) -> str:
    """``sampled 14 of 1,319 requests`` and the 95% bound, for the input tokens label."""
    what = f"sampled {sample.sampled:,} of {sample.requests:,} requests"
    if sample.bound_tokens is None:
        return what + ", no error bound"
    pct = 100.0 * sample.bound_tokens / sample.input_tokens if sample.input_tokens else 0.0
    return f"{what}, ±{pct:.1f}% (±{int(math.ceil(sample.bound_tokens)):,}) at 95%"


def _estimate_line(
    name: str,
    r: Mapping[str, int],
    price: Optional[BatchPrice],
    sample: Optional[t.SampleEstimate] = None,
) -> str:
    n = r[t.REQUESTS_COUNTED]
    inp = r[t.INPUT_TOKENS]
    est = r[t.INPUT_TOKENS_ESTIMATED]
    unknown = r.get(t.REQUESTS_UNKNOWN, 0)
    if sample is not None and sample.sampled < 2:
        return (
            f"  {name}: {n:,} request(s), input tokens unknown ({sample.sampled:,} of "
            f"{sample.requests:,} requests of an output sampled: too few to extrapolate; "
            "raise --estimate-fraction or use --estimate exact), cost unknown"
        )
    if unknown and unknown >= n:
        # the provider's adapter counts no tokens: say so, never "0"
        return (
            f"  {name}: {n:,} request(s), input tokens unknown (the provider's adapter "
            "counts no tokens), output tokens unknown, cost unknown"
        )
    if unknown:
        kind = f"estimate; {unknown:,} request(s) unknown, not included"
    elif est == 0 and r[t.REQUESTS_ESTIMATED] == 0:
        kind = "exact"
    elif est >= inp:
        kind = "estimate"
    else:
        kind = f"{inp - est:,} exact + {est:,} estimated"
    unbounded = r[t.REQUESTS_WITHOUT_OUTPUT_LIMIT]
    out = r[t.MAX_OUTPUT_TOKENS]
    approx = "~" if sample is not None else ""
    if unbounded:
        out_text = f"no upper bound ({approx}{unbounded:,} request(s) set no output limit)"
    else:
        out_text = f"at most {approx}{out:,}"
    inp_text = f"{inp:,} ({kind})"
    # a sample's cost is priced at the upper bound of its input tokens (never below)
    priced = inp
    if sample is not None:
        counts = "exact counts" if kind == "exact" else f"counts: {kind}"
        inp_text = f"~{inp:,} ({_sample_note(sample)}; {counts})"
        priced = sample.upper_tokens if sample.upper_tokens is not None else inp
    bound = ", at the 95% upper bound" if sample is not None else ""  # what is priced
    if price is None:
        cost = "price unknown"
    elif unbounded:
        cost = f"input {_usd(price.cost_usd(priced))}{bound} + output unbounded (estimate)"
    else:
        cost = (
            f"up to {_usd(price.cost_usd(priced, out))} (input {_usd(price.cost_usd(priced))}"
            f"{bound}, estimate)"
        )
    return (
        f"  {name}: {n:,} request(s), input tokens {inp_text}, "
        f"output tokens {out_text}, cost {cost}"
    )


def usage_lines(stats: Mapping[str, int], provider_config: Any) -> list[str]:
    """Per output and in total: the input and output tokens the provider reported, and
    their cost at the batch price (for ``mmirage merge``). Empty without usage."""
    metrics = (
        USED_INPUT_TOKENS,
        USED_OUTPUT_TOKENS,
        USED_CACHE_READ,
        USED_CACHE_WRITE,
        USED_CACHED_INPUT,
        USED_REASONING,
    )
    rows = per_output(stats, metrics)
    if not rows:
        return []
    model = getattr(provider_config, "model", None)
    price = batch_price(provider_config.provider, model, provider_config)
    lines = ["tokens used (reported by the provider) and cost:", "  " + _price_note(price, model)]
    total = dict.fromkeys(metrics, 0)
    for name in sorted(rows):
        counts = [rows[name].get(m, 0) for m in metrics]
        for m, n in zip(metrics, counts):
            total[m] += n
        lines.append(_usage_line(name, *counts, price=price))
    if len(rows) > 1:
        lines.append(_usage_line("total", *(total[m] for m in metrics), price=price))
    return lines


def _usage_line(
    name: str,
    i: int,
    o: int,
    cache_read: int = 0,
    cache_write: int = 0,
    cached_input: int = 0,
    reasoning: int = 0,
    *,
    price: Any = None,
) -> str:
    """One output's usage and cost; cached prompt tokens (Anthropic, not in ``i``)
    priced at their factors of the input price; OpenAI's cached input tokens (of ``i``)
    at the cached-input price, and its reasoning tokens (of ``o``) shown."""
    cached = ""
    if cache_read or cache_write:
        cached = f", cache read {cache_read:,}, cache write {cache_write:,}"
    if cached_input:
        cached += f", of which cached input {cached_input:,}"
    if reasoning:
        cached += f", of which reasoning {reasoning:,}"
    if price is None:
        cost = "price unknown"
    else:
        discounted = min(cached_input, i)
        usd = price.cost_usd(i - discounted, o) + price.cost_usd(
            cache_read * CACHE_READ_PRICE_FACTOR + cache_write * CACHE_WRITE_PRICE_FACTOR
        )
        usd += price.cached_input_usd(discounted)
        cost = _usd(usd)
    return f"  {name}: input tokens {i:,}, output tokens {o:,}{cached}, cost {cost}"


def batch_usage_line(usage: Optional[Mapping[str, Any]]) -> Optional[str]:
    """``"input 123, output 45 tokens so far"`` from an OpenAI batch object's ``usage``
    (openai-python 3.57 ``BatchUsage``: ``input_tokens``, ``output_tokens``; "only
    populated on batches created after September 7, 2025"); None when absent.
    Anthropic's Message Batch object reports no usage (only its results do)."""
    if not isinstance(usage, Mapping):
        return None
    i, o = usage.get("input_tokens"), usage.get("output_tokens")
    if i is None and o is None:
        return None
    return f"{int(i or 0):,} input + {int(o or 0):,} output tokens used so far"
