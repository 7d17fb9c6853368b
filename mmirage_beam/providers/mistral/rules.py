"""Mistral's model rules (a :class:`~mmirage_beam.providers.model_rules.ModelRules`).
mistralai has no model enum, so the names are the families of Mistral's models overview
(https://docs.mistral.ai/getting-started/models/models_overview/), each with ``-latest``
or a ``-YYMM`` version (``mistral-medium-2508``), and fine-tunes ``ft:...``
(https://docs.mistral.ai/capabilities/finetuning/).
"""

from __future__ import annotations

import re

from mmirage_beam.providers.model_rules import ModelRules

__all__ = ["FAMILIES", "RULES"]

FAMILIES = (
    "mistral-large",
    "mistral-medium",
    "mistral-small",
    "ministral-3b",
    "ministral-8b",
    "ministral-14b",
    "magistral-medium",
    "magistral-small",
    "codestral",
    "codestral-embed",
    "devstral-small",
    "devstral-medium",
    "pixtral-large",
    "pixtral-12b",
    "mistral-embed",
    "mistral-moderation",
    "mistral-ocr",
    "mistral-saba",
    "voxtral-small",
    "voxtral-mini",
    "open-mistral-nemo",
    "open-mistral-7b",
    "open-mixtral-8x7b",
    "open-mixtral-8x22b",
)
_LISTED = frozenset(f"{family}-latest" for family in FAMILIES)

RULES = ModelRules(
    service="mistralai",
    source="https://docs.mistral.ai/getting-started/models/models_overview/ (families; "
    "no SDK enum); fine-tunes ft:...",
    names=lambda: _LISTED,
    patterns=(
        re.compile(
            r"^(" + "|".join(re.escape(f) for f in FAMILIES) + r")(-latest|-\d{4}|-\d{2}\.\d{2})?$"
        ),
        re.compile(r"^ft:[\w.:-]+$"),
    ),
)
