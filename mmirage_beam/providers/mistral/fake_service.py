"""Mistral's fake as the fake's shared core sees it: its endpoint names, rule refusals
and path prefix. The routes, handlers, error shapes and the class registered with
:mod:`mmirage_beam.testing.fake_registry` (from this package's ``__init__``),
:class:`~mmirage_beam.providers.mistral.fake.MistralFake`, are
:mod:`~mmirage_beam.providers.mistral.fake`'s (under ``/mistral`` on the shared port).
"""

from __future__ import annotations

from collections.abc import Collection

from mmirage_beam.providers.mistral import FAKE_ENDPOINT_NAMES
from mmirage_beam.providers.mistral.rules import RULES

MISTRAL = "mistral"
#: the path prefix of its routes: ``Mistral(server_url=<base>/mistral)``
PREFIX = "/mistral"
#: the endpoint names of its calls (``call_counts()``, ``leading_errors.paths``)
ENDPOINT_NAMES = FAKE_ENDPOINT_NAMES


def mistral_model_error(model: str, models: Collection[str]) -> str | None:
    """The 400 message for a job model Mistral does not serve, else None."""
    if RULES.is_known(model, models):
        return None
    return f"Invalid model: {model}"
