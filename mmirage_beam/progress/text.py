"""Progress in words: counts, totals, rates, ETAs, tokens and cost as one line.

What :mod:`mmirage_beam.progress`'s reporter logs (:func:`progress_line`) and its live
bar draws (:func:`counter_text`, :func:`tokens_text`), and what ``check --watch`` and
``run --wait`` say while batches run (:class:`PollRate`, :func:`waiting_tokens_text`).
Plain text, no Beam: :mod:`mmirage_beam.progress` re-exports these names.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Optional

__all__ = [
    "INPUT_TOKENS",
    "OUTPUT_TOKENS",
    "TOKEN_NAMES",
    "ORDER",
    "duration_text",
    "compact",
    "counter_text",
    "tokens_text",
    "waiting_tokens_text",
    "PollRate",
    "rate_per_sec",
    "progress_line",
]

#: the counters that are token counts (shown with the cost, not as progress rows)
INPUT_TOKENS, OUTPUT_TOKENS = "input tokens", "output tokens"
TOKEN_NAMES = (INPUT_TOKENS, OUTPUT_TOKENS)
#: the order counters are shown in (others follow, in the order they were first counted)
ORDER = (
    "rows read",
    "requests built",
    "chunks exported",
    "batches submitted",
    "results fetched",
    "rows merged",
)


def duration_text(secs: float) -> str:
    """``"45 s"``, ``"2 min 11 s"``, ``"3 h 05 min"``."""
    s = max(0, int(round(secs)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def compact(n: float) -> str:
    """``"950"``, ``"12.3k"``, ``"3.1M"``, ``"2.0B"``."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= size:
            return f"{n / size:.1f}{suffix}"
    return f"{int(n)}"


def _usd(x: float) -> str:
    """``"$1.24"``; four decimals under ten cents."""
    return f"${x:.2f}" if x >= 0.1 else f"${x:.4f}"


def _unit(name: str) -> str:
    """``rows read`` -> ``rows``: the counted thing, for the rate."""
    return name.split(" ", 1)[0]


def counter_text(
    name: str, done: int, total: Optional[int], rate: Optional[float], with_name: bool = True
) -> str:
    """``"rows read 132,000 of 1,000,000 (13%), 6,600 rows/s, ETA 2 min 11 s"``; the
    total, rate and ETA only when known (``total`` None and ``name`` among the totals:
    ``of ?``)."""
    text = f"{name} {done:,}" if with_name else f"{done:,}"
    if total is None:
        return text
    pct = 100 * done / total if total else 100.0
    text += f" of {total:,} ({pct:.0f}%)"
    if rate and done < total:
        text += f", {rate:,.0f} {_unit(name)}/s, ETA {duration_text((total - done) / rate)}"
    return text


def tokens_text(counts: Mapping[str, int], price: Any = None) -> str:
    """``"input tokens 3.1M (est. $1.24)"`` (estimated while submitting) or ``"tokens
    1.2M in + 300.0k out, cost $0.41"`` (reported by the provider, merge); empty
    without token counts."""
    i, o = counts.get(INPUT_TOKENS), counts.get(OUTPUT_TOKENS)
    if i is None and o is None:
        return ""
    if o is None:  # the estimate of what is sent: input tokens only are known
        text = f"input tokens {compact(i)}"
        return text + (f" (est. {_usd(price.cost_usd(i))})" if price is not None else "")
    text = f"tokens {compact(i or 0)} in + {compact(o)} out"
    return text + (f", cost {_usd(price.cost_usd(i or 0, o))}" if price is not None else "")


def waiting_tokens_text(finished: int, total: int, input_tokens: int, price: Any = None) -> str:
    """While batches run: ``"input tokens ~115.7k of 463.0k (est. $0.0232 of $0.0926)"``,
    the run's estimated input tokens (``input_tokens``, from its record) times the
    share of its ``total`` requests ``finished``; empty without an estimate."""
    if not input_tokens or not total:
        return ""
    share = min(max(finished, 0) / total, 1.0)
    text = f"input tokens ~{compact(input_tokens * share)} of {compact(input_tokens)}"
    if price is not None:
        so_far, whole = price.cost_usd(input_tokens * share), price.cost_usd(input_tokens)
        text += f" (est. {_usd(so_far)} of {_usd(whole)})"
    return text


class PollRate:
    """Requests finished per second between the first poll and now, and the ETA of
    the rest (for ``check --watch`` and ``run --wait``)."""

    def __init__(self) -> None:
        self._first: Optional[tuple[int, float]] = None

    def text(self, finished: int, total: int, elapsed_secs: float) -> str:
        """``"12.5 requests/s, ETA 3 min 2 s"``; empty until requests finished between
        two polls, and once every request finished."""
        if self._first is None:
            self._first = (finished, elapsed_secs)
            return ""
        f0, t0 = self._first
        if finished <= f0 or elapsed_secs <= t0 or finished >= total:
            return ""  # nothing moved yet, or nothing is left
        rate = (finished - f0) / (elapsed_secs - t0)
        return f"{rate:,.1f} requests/s, ETA {duration_text((total - finished) / rate)}"


def rate_per_sec(name: str, done: int, first: Mapping[str, float], now: float) -> Optional[float]:
    """``done`` per second since counter ``name`` was first seen (``first``); None
    before its first count."""
    since = first.get(name)
    if since is None or not done:
        return None
    return done / max(now - since, 1e-3)


def progress_line(
    counts: dict[str, int],
    elapsed_secs: float,
    totals: Optional[Mapping[str, Optional[int]]] = None,
    first_seen: Optional[Mapping[str, float]] = None,
    now: Optional[float] = None,
    price: Any = None,
) -> str:
    """``"progress after 20 s: rows read 132,000 of 1,000,000 (13%), 6,600 rows/s, ETA
    2 min 11 s; requests built 264,000; input tokens 3.1M (est. $1.24)"``.

    Args:
        counts: counter name -> count.
        elapsed_secs: seconds since the job started.
        totals: counter name -> its total (None: ``of ?``); counters not in it show
            their count only.
        first_seen: counter name -> ``time.monotonic()`` of its first count (for rates).
        now: ``time.monotonic()`` now (default: now).
        price: a :class:`~mmirage_beam.costs.prices.BatchPrice` for the cost, or None.
    """
    totals, first_seen = totals or {}, first_seen or {}
    now = time.monotonic() if now is None else now
    parts = []
    for name, n in counts.items():
        if name in TOKEN_NAMES:
            continue
        if name in totals and totals[name] is None:
            parts.append(f"{name} {n:,} of ?")
        else:
            rate = rate_per_sec(name, n, first_seen, now) if name in totals else None
            parts.append(counter_text(name, n, totals.get(name), rate))
    tokens = tokens_text(counts, price)
    if tokens:
        parts.append(tokens)
    return f"progress after {duration_text(elapsed_secs)}: " + "; ".join(parts)


def human_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
