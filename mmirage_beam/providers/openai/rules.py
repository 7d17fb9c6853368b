"""OpenAI's model and parameter rules (a :class:`~mmirage_beam.providers.model_rules.
ModelRules`), with their sources:

- Names: the openai SDK's ``openai.types.shared.ChatModel`` and ``ResponsesModel``,
  ``openai.types.EmbeddingModel`` and the ``model`` Literal of
  ``openai.types.completion_create_params.CompletionCreateParamsBase``; a
  ``-YYYY-MM-DD`` snapshot of a listed name; fine-tunes ``ft:<base>:<org>:<suffix>:<id>``
  (fine-tuning guide, https://platform.openai.com/docs/guides/fine-tuning).
- Request keys: the params TypedDicts ``openai.types.chat.completion_create_params.
  CompletionCreateParamsBase``, ``openai.types.responses.response_create_params.
  ResponseCreateParamsBase``, ``openai.types.embedding_create_params.
  EmbeddingCreateParams``, ``openai.types.completion_create_params.
  CompletionCreateParamsBase``, each with ``stream``.
- Reasoning models (``o1``, ``o3``, ``o4``, ``gpt-5`` families; reasoning guide,
  https://platform.openai.com/docs/guides/reasoning): ``max_tokens`` is refused ("Use
  'max_completion_tokens' instead"); ``temperature`` and ``top_p`` other than the
  default 1 are refused ("Only the default (1) value is supported").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from mmirage_beam.providers.model_rules import ModelRules, Refusal, literals, typed_keys

__all__ = ["RULES", "is_reasoning_model"]

_REASONING_RE = re.compile(r"^(o1|o3|o4|gpt-5)([.-]|$)")


@functools.cache
def _names() -> frozenset[str]:
    from openai.types import EmbeddingModel, completion_create_params
    from openai.types.shared import ChatModel, ResponsesModel

    legacy = completion_create_params.CompletionCreateParamsBase.__annotations__["model"]
    legacy = getattr(legacy, "__forward_arg__", legacy)  # a TypedDict's ForwardRef
    if isinstance(legacy, str):
        legacy = eval(legacy, vars(completion_create_params))  # noqa: S307 - the SDK's text
    return frozenset(
        [*literals(ChatModel), *literals(ResponsesModel), *literals(EmbeddingModel)]
        + literals(legacy)
    )


@functools.cache
def _request_keys(endpoint: str) -> frozenset[str]:
    from openai.types import completion_create_params, embedding_create_params
    from openai.types.chat import completion_create_params as chat_params
    from openai.types.responses import response_create_params

    typed = {
        "/v1/chat/completions": chat_params.CompletionCreateParamsBase,
        "/v1/responses": response_create_params.ResponseCreateParamsBase,
        "/v1/embeddings": embedding_create_params.EmbeddingCreateParams,
        "/v1/completions": completion_create_params.CompletionCreateParamsBase,
    }.get(endpoint)
    return frozenset({*typed_keys(typed), "stream"}) if typed else frozenset()


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` is a reasoning model (``o1``, ``o3``, ``o4``, ``gpt-5``
    families, fine-tunes of them included; the ``*-chat-latest`` chat models are not)."""
    base = model.split(":")[1] if model.startswith("ft:") and model.count(":") >= 2 else model
    return bool(_REASONING_RE.match(base)) and "chat-latest" not in base


def _refusals(model: str, params: Mapping[str, Any]) -> list[Refusal]:
    out: list[Refusal] = []
    if not is_reasoning_model(model):
        return out
    if params.get("max_tokens") is not None:
        out.append(
            Refusal(
                "max_tokens",
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
                "unsupported_parameter",
                "max_completion_tokens",
            )
        )
    for key in ("temperature", "top_p"):
        value = params.get(key)
        if value is not None and value != 1:
            out.append(
                Refusal(
                    key,
                    f"Unsupported value: '{key}' does not support {value} with this model. "
                    "Only the default (1) value is supported.",
                    "unsupported_value",
                )
            )
    return out


RULES = ModelRules(
    service="openai",
    source="openai.types.shared.ChatModel / ResponsesModel, openai.types.EmbeddingModel; "
    "fine-tunes ft:<base>:<org>:<suffix>:<id>",
    names=_names,
    patterns=(re.compile(r"^ft:[^:]+:[^:]*:[^:]*:[^:]+$"),),
    snapshot=re.compile(r"^(?P<base>.+)-\d{4}-\d{2}-\d{2}$"),
    refusals=_refusals,
    request_keys=_request_keys,
)
