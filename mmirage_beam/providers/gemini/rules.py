"""The Gemini API's model rules (a :class:`~mmirage_beam.providers.model_rules.
ModelRules`). google-genai has no model enum, so the names are the models page's
(https://ai.google.dev/gemini-api/docs/models) and the family pattern:
``gemini-<version>-<pro|flash|flash-lite>`` with ``-preview``/``-exp``/``-latest``/
``-image``/``-NNN``/``-MM-DD``/``-MM-YYYY`` suffixes, the ``gemini-*-latest`` aliases,
``gemini-embedding-NNN`` and tuned models ``tunedModels/...``; ``models/`` is stripped.
"""

from __future__ import annotations

import re

from mmirage_beam.providers.model_rules import ModelRules

__all__ = ["LISTED", "RULES"]

#: The models page's current names (did-you-mean candidates).
LISTED = frozenset(
    {
        "gemini-3-pro-preview",
        "gemini-3-flash-preview",
        "gemini-3.1-pro-preview",
        "gemini-2.5-pro",
        "gemini-2.5-flash",
        "gemini-2.5-flash-lite",
        "gemini-2.0-flash",
        "gemini-2.0-flash-lite",
        "gemini-flash-latest",
        "gemini-flash-lite-latest",
        "gemini-pro-latest",
        "gemini-embedding-001",
    }
)

RULES = ModelRules(
    service="google-genai",
    source="https://ai.google.dev/gemini-api/docs/models (family pattern; no SDK enum)",
    names=lambda: LISTED,
    patterns=(
        re.compile(
            r"^gemini-\d+(\.\d+)?-(pro|flash|flash-lite)"
            r"(-(preview|exp|latest|image|\d{3}|\d{2}-\d{2}|\d{2}-\d{4}))*$"
        ),
        re.compile(r"^gemini-(pro|flash|flash-lite)-latest$|^gemini-embedding-\d{3}$"),
        re.compile(r"^tunedModels/[\w-]+$"),
    ),
    strip_prefix="models/",
)
