"""The model and parameter rules the fake enforces, as each service refuses: the tables
(names, keys, per-family rules, with their sources) are the project's own
(``mmirage_beam/providers/<name>/rules.py``, on :mod:`mmirage_beam.providers.model_rules`);
this module turns a broken rule into the service's own refusal. The rule table with
sources is in ``docs/fake-provider.md``.

- OpenAI (a batch line): 404 ``model_not_found`` "The model `X` does not exist or you do
  not have access to it." (the API's answer to an unknown model, as quoted in
  openai/openai-agents-python#458 and Aider-AI/aider#2030) in the error file; an unknown
  key: 400 "Unrecognized request argument supplied: K" (chat, completions, embeddings)
  or 400 ``unknown_parameter`` "Unknown parameter: 'K'." (Responses); ``stream``: 400
  (wording **undocumented**); reasoning-model rules: 400 ``unsupported_parameter`` /
  ``unsupported_value``. The batch itself completes, as OpenAI's does.
- Anthropic (a batch request): ``errored`` with ``not_found_error`` "model: X" (the
  Messages API's 404 for an unknown model), ``invalid_request_error`` "K: Extra inputs
  are not permitted" for an unknown key, "stream: ..." for ``stream``, and the thinking
  budget rules.
- Gemini (the create): 404 ``NOT_FOUND`` "models/X is not found for API version
  v1beta, or is not supported for batchGenerateContent." (the API's well-known answer
  for generateContent, with this method's name).
- Mistral (the job create): 400 "Invalid model: X" (Mistral's docs are silent on the
  wording; a job names one model, so the create is where it can be refused).

Models outside the table are admitted with ``FakeProviderServer(models=...)`` /
``mmirage fake-provider --models a,b``. The OpenAI-compatible profiles (Azure
deployments, Groq, Together) are not checked: their model names are not OpenAI's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from mmirage_beam.providers.anthropic.rules import RULES as ANTHROPIC_RULES
from mmirage_beam.providers.gemini.rules import RULES as GEMINI_RULES
from mmirage_beam.providers.mistral.rules import RULES as MISTRAL_RULES
from mmirage_beam.providers.openai.fake_bodies import HttpFailure, oa_error
from mmirage_beam.providers.openai.rules import RULES as OPENAI_RULES
from mmirage_beam.testing.fake_provider.wire import ApiError

__all__ = [
    "anthropic_problem",
    "gemini_model_error",
    "mistral_model_error",
    "openai_failure",
]

_UNRECOGNIZED_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")


def openai_failure(
    endpoint: str, body: Mapping[str, Any], models: Collection[str]
) -> HttpFailure | None:
    """The first rule an OpenAI batch line's ``body`` breaks, as the API's failure."""
    model = body["model"]
    if not OPENAI_RULES.is_known(model, models):
        return oa_error(
            404,
            f"The model `{model}` does not exist or you do not have access to it.",
            code="model_not_found",
        )
    keys = OPENAI_RULES.request_keys(endpoint)
    unknown = [k for k in body if keys and k not in keys]
    if unknown:
        if endpoint in _UNRECOGNIZED_ENDPOINTS:
            return oa_error(400, f"Unrecognized request argument supplied: {unknown[0]}")
        return oa_error(
            400, f"Unknown parameter: '{unknown[0]}'.", param=unknown[0], code="unknown_parameter"
        )
    if body.get("stream"):
        return oa_error(
            400,
            "Streaming is not supported in batch requests: 'stream' must be false or absent.",
            param="stream",
            code="invalid_value",
        )
    for refusal in OPENAI_RULES.refusals(model, body):
        return oa_error(400, refusal.message, param=refusal.key, code=refusal.code)
    dimensions = body.get("dimensions")
    if endpoint == "/v1/embeddings" and dimensions is not None:
        if model == "text-embedding-ada-002":
            return oa_error(400, "This model does not support specifying dimensions.")
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            return oa_error(
                400,
                f"Invalid 'dimensions': integer below minimum value. Expected a value >= 1, "
                f"but got {dimensions} instead.",
                param="dimensions",
                code="integer_below_min_value",
            )
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 128):
        return oa_error(
            400, f"Invalid 'n': must be an integer from 1 to 128, got {n!r}.", param="n"
        )
    return None


def anthropic_problem(params: Mapping[str, Any], models: Collection[str]) -> tuple[str, str] | None:
    """(error type, message) of the first rule a Message Batches request's ``params``
    break, or None."""
    model = params["model"]
    if not ANTHROPIC_RULES.is_known(model, models):
        return "not_found_error", f"model: {model}"
    keys = ANTHROPIC_RULES.request_keys("/v1/messages")
    unknown = [k for k in params if k not in keys]
    if unknown:
        return "invalid_request_error", f"{unknown[0]}: Extra inputs are not permitted"
    if params.get("stream"):
        # batch_create_params.Request.params is MessageCreateParamsNonStreaming.
        return "invalid_request_error", "stream: streaming is not supported in message batches"
    for refusal in ANTHROPIC_RULES.refusals(model, params):
        return "invalid_request_error", refusal.message
    return None


def gemini_model_error(model: str, models: Collection[str]) -> ApiError | None:
    """404 ``NOT_FOUND`` for a model the Gemini API does not serve, else None."""
    if GEMINI_RULES.is_known(model, models):
        return None
    return ApiError(
        404,
        "NOT_FOUND",
        f"models/{model} is not found for API version v1beta, or is not supported for "
        "batchGenerateContent. Call ListModels to see the list of available models and "
        "their supported methods.",
    )


def mistral_model_error(model: str, models: Collection[str]) -> str | None:
    """The 400 message for a job model Mistral does not serve, else None."""
    if MISTRAL_RULES.is_known(model, models):
        return None
    return f"Invalid model: {model}"
