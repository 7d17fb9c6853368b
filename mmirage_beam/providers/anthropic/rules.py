"""Anthropic's model and parameter rules (a :class:`~mmirage_beam.providers.model_rules.
ModelRules`), with their sources:

- Names: the anthropic SDK's ``anthropic.types.Model``; a ``-YYYYMMDD`` snapshot of a
  listed alias (models overview, https://docs.anthropic.com/en/docs/about-claude/models).
  Retired models the SDK no longer lists (Claude 3.x) are not known.
- Request keys: ``anthropic.types.message_create_params.MessageCreateParamsBase`` and
  ``stream``; plus ``temperature``, ``top_p``, ``top_k``, which the Messages API
  reference still documents but anthropic 2.14's TypedDict no longer names (never
  stricter than the service).
- Extended thinking (https://docs.anthropic.com/en/docs/build-with-claude/
  extended-thinking): ``thinking.budget_tokens`` is at least 1024 and less than
  ``max_tokens``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from mmirage_beam.providers.model_rules import ModelRules, Refusal, literals, typed_keys

__all__ = ["RULES", "SAMPLING_KEYS"]

#: Messages API reference: sampling settings beside the SDK TypedDict's keys.
SAMPLING_KEYS = ("temperature", "top_p", "top_k")


@functools.cache
def _names() -> frozenset[str]:
    from anthropic.types import Model

    return frozenset(literals(Model))


@functools.cache
def _request_keys(endpoint: str) -> frozenset[str]:
    from anthropic.types import message_create_params

    typed = typed_keys(message_create_params.MessageCreateParamsBase)
    return frozenset({*typed, "stream", *SAMPLING_KEYS})


def _refusals(model: str, params: Mapping[str, Any]) -> list[Refusal]:
    thinking = params.get("thinking")
    if not isinstance(thinking, Mapping) or thinking.get("type") != "enabled":
        return []
    budget, max_tokens = thinking.get("budget_tokens"), params.get("max_tokens")
    if isinstance(budget, int) and budget < 1024:
        return [
            Refusal(
                "thinking.budget_tokens",
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
            )
        ]
    if isinstance(budget, int) and isinstance(max_tokens, int) and budget >= max_tokens:
        return [
            Refusal(
                "thinking.budget_tokens",
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult "
                "our documentation at https://docs.claude.com/en/docs/build-with-claude/"
                "extended-thinking#max-tokens-and-context-window-size",
            )
        ]
    return []


RULES = ModelRules(
    service="anthropic",
    source="anthropic.types.Model, + -YYYYMMDD snapshots of a listed alias",
    names=_names,
    snapshot=re.compile(r"^(?P<base>.+)-\d{8}$"),
    refusals=_refusals,
    request_keys=_request_keys,
)
