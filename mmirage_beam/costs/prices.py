"""Batch prices: each provider's dated price rows and the config overrides.

Every provider keeps its own rows (a built-in: ``prices.json`` in its package, read by
:meth:`~mmirage_beam.providers.base.BatchSubmissionAdapter.price_table`): per model the
standard (synchronous) price in USD per million input and output tokens, where it was
read and when, and the provider's batch discount with its source. A batch price is the
standard price times ``1 - discount``; the adapter's ``price_key`` names the row of a
config (default: its ``model``).

A processor may override both numbers with ``price_per_million_input_tokens`` and
``price_per_million_output_tokens``: these are **batch** prices (what the run pays,
no discount applied to them). A model the table does not list, without overrides, has
no price: the summaries say "price unknown" instead of guessing.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional, TypedDict

from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.providers.config import PRICE_KEYS

__all__ = [
    "BatchPrice",
    "provider_price_table",
    "price_table",
    "PriceTable",
    "batch_price",
    "processor_price",
]


class BatchPrice(NamedTuple):
    """USD per million tokens at the batch price, and where the numbers come from.

    Attributes:
        input_per_million: USD per 1,000,000 input tokens.
        output_per_million: USD per 1,000,000 output tokens.
        source: ``"config"`` or the table row's source and date.
    """

    input_per_million: float
    output_per_million: float
    source: str
    #: USD per 1,000,000 cached input tokens (OpenAI prompt caching), None: unknown
    cached_input_per_million: Optional[float] = None

    def cached_input_usd(self, tokens: int) -> float:
        """USD for ``tokens`` cached input tokens: at the cached-input price, else (no
        such price known) at the input price, never below what they cost."""
        per = self.cached_input_per_million
        return tokens * (self.input_per_million if per is None else per) / 1_000_000

    def cost_usd(self, input_tokens: int, output_tokens: int = 0) -> float:
        """USD for ``input_tokens`` and ``output_tokens`` at this price."""
        return (
            input_tokens * self.input_per_million + output_tokens * self.output_per_million
        ) / 1_000_000


def provider_price_table(provider: str) -> Optional[dict[str, Any]]:
    """The price rows of ``provider``'s registered adapter (``{"batch_discount",
    "models"}``), or None when it has none.

    Raises:
        ConfigError: no adapter is registered under ``provider``.
    """
    return _cached_table(BatchAdapterRegistry.get(provider))


@functools.cache
def _cached_table(adapter_cls: type) -> Optional[dict[str, Any]]:
    table = adapter_cls.price_table()
    return dict(table) if table else None


class PriceTable(TypedDict):
    """Every registered provider's prices (:func:`price_table`): ``batch_discount``
    (provider -> its discount rows) and ``models`` (one row per provider and model:
    ``{"provider", "model", ...}``, each provider's ``prices.json`` row)."""

    batch_discount: dict[str, Any]
    models: list[dict[str, Any]]


def price_table() -> PriceTable:
    """Every registered provider's rows in one table (for listings and checks)."""
    out = PriceTable(batch_discount={}, models=[])
    for name in BatchAdapterRegistry.names():
        table = provider_price_table(name)
        if not table:
            continue
        out["batch_discount"][name] = table.get("batch_discount") or {}
        out["models"] += [{"provider": name, **row} for row in table.get("models") or ()]
    return out


def _row_for(table: Optional[dict[str, Any]], model: str) -> Optional[dict[str, Any]]:
    rows = list((table or {}).get("models") or ())
    for row in rows:
        if row["model"] == model:
            return row
    # A dated snapshot of a listed model (gpt-4.1-mini-2025-04-14, claude-haiku-4-5-20251001)
    best = None
    for row in rows:
        name = row["model"]
        rest = model[len(name) :]
        if model.startswith(name + "-") and rest[1:2].isdigit() and len(rest) >= 9:
            if best is None or len(name) > len(best["model"]):
                best = row
    return best


def processor_price(provider_config: Any) -> Optional[BatchPrice]:
    """The batch price of a processor config (:func:`batch_price` of its provider, model
    and overrides), or None when it is unknown, or when the provider is unknown (an
    unknown provider fails the run elsewhere, with its own message)."""
    try:
        return batch_price(
            provider_config.provider, getattr(provider_config, "model", None), provider_config
        )
    except Exception:
        return None


def batch_price(
    provider: str, model: Optional[str], provider_config: Any = None
) -> Optional[BatchPrice]:
    """The batch price of ``model`` (or, with a ``provider_config``, of its adapter's
    ``price_key``), or None when it is unknown.

    The processor's ``price_per_million_input_tokens`` / ``..._output_tokens`` win (both
    are batch prices); else the provider's row of the model (or of the model a dated
    snapshot name belongs to) times ``1 - batch_discount``. One override without the
    other takes the other number from the table (None if the table has no row).
    """
    override_in = getattr(provider_config, PRICE_KEYS[0], None)
    override_out = getattr(provider_config, PRICE_KEYS[1], None)
    table = provider_price_table(provider)
    if provider_config is not None:
        model = BatchAdapterRegistry.get(provider)().price_key(provider_config) or model
    row = _row_for(table, model or "") if model else None
    found: Optional[BatchPrice] = None
    if row is not None:
        discount = (table.get("batch_discount") or {}).get("fraction", 0.0)
        factor = 1.0 - float(discount)
        where = row.get("official_page", "")
        cached = row.get("cached_input")
        found = BatchPrice(
            float(row["input"]) * factor,
            float(row["output"]) * factor,
            f"prices.json {row['model']} ({where}, checked {row.get('checked')}), "
            f"batch discount {discount:.0%}",
            float(cached) * factor if cached is not None else None,
        )
    if override_in is None and override_out is None:
        return found
    if found is None and (override_in is None or override_out is None):
        return None
    return BatchPrice(
        float(override_in) if override_in is not None else found.input_per_million,
        float(override_out) if override_out is not None else found.output_per_million,
        "config (price_per_million_*_tokens)",
        None if override_in is not None or found is None else found.cached_input_per_million,
    )
