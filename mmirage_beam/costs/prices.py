"""Batch prices: the dated table in ``prices.json`` and the config overrides.

``prices.json`` (shipped in the package) holds, per provider and model, the standard
(synchronous) price in USD per million input and output tokens, where it was read and
when, and per provider the batch discount with its source. A batch price is the standard
price times ``1 - discount``.

A processor may override both numbers with ``price_per_million_input_tokens`` and
``price_per_million_output_tokens``: these are **batch** prices (what the run pays,
no discount applied to them). A model the table does not list, without overrides, has
no price: the summaries say "price unknown" instead of guessing.
"""

from __future__ import annotations

import functools
import json
from typing import Any, NamedTuple, Optional

PRICE_KEYS = ("price_per_million_input_tokens", "price_per_million_output_tokens")


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

    def cost_usd(self, input_tokens: int, output_tokens: int = 0) -> float:
        """USD for ``input_tokens`` and ``output_tokens`` at this price."""
        return (
            input_tokens * self.input_per_million + output_tokens * self.output_per_million
        ) / 1_000_000


@functools.lru_cache(maxsize=1)
def price_table() -> dict[str, Any]:
    """The parsed ``prices.json`` of the installed package."""
    from importlib import resources

    text = resources.files("mmirage_beam.costs").joinpath("prices.json").read_text("utf-8")
    return json.loads(text)


def _row_for(provider: str, model: str) -> Optional[dict[str, Any]]:
    rows = [r for r in price_table()["models"] if r["provider"] == provider]
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


def batch_price(
    provider: str, model: Optional[str], provider_config: Any = None
) -> Optional[BatchPrice]:
    """The batch price of ``model``, or None when it is unknown.

    The processor's ``price_per_million_input_tokens`` / ``..._output_tokens`` win (both
    are batch prices); else the table row of the model (or of the model a dated snapshot
    name belongs to) times ``1 - batch_discount``. One override without the other takes
    the other number from the table (None if the table has no row).
    """
    override_in = getattr(provider_config, PRICE_KEYS[0], None)
    override_out = getattr(provider_config, PRICE_KEYS[1], None)
    row = _row_for(provider, model or "") if model else None
    table: Optional[BatchPrice] = None
    if row is not None:
        discount = price_table()["batch_discount"].get(provider, {}).get("fraction", 0.0)
        factor = 1.0 - float(discount)
        where = row.get("official_page", "")
        table = BatchPrice(
            float(row["input"]) * factor,
            float(row["output"]) * factor,
            f"prices.json {row['model']} ({where}, checked {row.get('checked')}), "
            f"batch discount {discount:.0%}",
        )
    if override_in is None and override_out is None:
        return table
    if table is None and (override_in is None or override_out is None):
        return None
    return BatchPrice(
        float(override_in) if override_in is not None else table.input_per_million,
        float(override_out) if override_out is not None else table.output_per_million,
        "config (price_per_million_*_tokens)",
    )


def check_price_overrides(provider_config: Any) -> None:
    """Validate the two price keys and ``max_enqueued_tokens`` of a processor.

    Raises:
        ConfigError: a price that is not a number >= 0, or a ``max_enqueued_tokens``
            that is not an integer >= 1, naming the key.
    """
    import math

    from mmirage_beam.errors import ConfigError, require_int

    for key in PRICE_KEYS:
        value = getattr(provider_config, key, None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise ConfigError(key, f"must be a number of USD per million tokens, got {value!r}")
        if value < 0 or math.isinf(value):
            raise ConfigError(key, f"must be >= 0 and finite, got {value}")
    limit = getattr(provider_config, "max_enqueued_tokens", None)
    if limit is not None:
        require_int("max_enqueued_tokens", limit, minimum=1)
    exact = getattr(provider_config, "exact_tokens", False)
    if not isinstance(exact, bool):
        raise ConfigError("exact_tokens", f"must be true or false, got {exact!r}")
