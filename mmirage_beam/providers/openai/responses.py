"""The OpenAI Responses API (``batch_endpoint: /v1/responses``): request bodies and results.

Contract facts (openai-python 3.57, ``types/responses/response_create_params.py`` and
``types/responses/response.py``; OpenAI API reference "Create a model response"):

- A request body is ``{model, input, instructions?, max_output_tokens?, temperature?,
  top_p?, text?}``. ``input`` is a list of messages ``{role, content: [parts]}``; a
  text part is ``{type: "input_text", text}``, an image part ``{type: "input_image",
  image_url: "https://..." | "data:<mime>;base64,...", detail}`` (``detail`` is
  required by the SDK's ``ResponseInputImageParam``). A system prompt is
  ``instructions``, not a message.
- Structured output is ``text.format = {type: "json_schema", name, schema, strict}``
  (``ResponseFormatTextJSONSchemaConfigParam``; not chat's nested ``json_schema``).
- A result body is a ``Response``: ``{object: "response", status, output: [...],
  incomplete_details: {reason} | null, usage: {input_tokens, output_tokens}, error}``.
  The answer is the ``output_text`` parts of the ``type: "message"`` items of
  ``output``; a refusal is a ``{type: "refusal", refusal}`` part; a cut-off answer has
  ``status: "incomplete"`` and ``incomplete_details.reason`` ``max_output_tokens`` (or
  ``content_filter`` when a filter stopped it).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, TypedDict

from mmirage_beam.providers.chat import generation_options, schema_name
from mmirage_beam.records import ProviderResult, ResultError
from mmirage_beam.results import kind_text, token_count

#: error types of :func:`normalise_responses_body` (shared with merge, see
#: :mod:`mmirage_beam.results`).
REFUSAL = "refusal"
TRUNCATED = "truncated"
CONTENT_FILTER = "content_filter"
EMPTY = "empty"
MALFORMED = "malformed_response"


def detail_tokens(usage: Dict[str, Any], input_details: str, output_details: str) -> Dict[str, int]:
    """``cached_input_tokens`` and ``reasoning_tokens`` of an OpenAI ``usage`` object
    (``<input_details>.cached_tokens``, ``<output_details>.reasoning_tokens``: chat
    ``prompt_tokens_details`` / ``completion_tokens_details``, Responses
    ``input_tokens_details`` / ``output_tokens_details``; openai-python
    ``CompletionUsage`` / ``ResponseUsage``), the non-zero ones only."""
    out: Dict[str, int] = {}
    for details, key, name in (
        (input_details, "cached_tokens", "cached_input_tokens"),
        (output_details, "reasoning_tokens", "reasoning_tokens"),
    ):
        block = usage.get(details)
        n = token_count(block.get(key)) if isinstance(block, dict) else None
        if n:
            out[name] = n
    return out


class OpenAIResponsesBody(TypedDict, total=False):
    """A ``/v1/responses`` batch body (openai-python ``ResponseCreateParamsNonStreaming``),
    keys in the order they are sent."""

    model: str
    input: List[Dict[str, Any]]
    instructions: str
    max_output_tokens: int
    temperature: float
    top_p: float
    text: Dict[str, Any]


def build_responses_body(
    payload: Mapping[str, Any], config: Any, image_detail: str = "auto"
) -> OpenAIResponsesBody:
    """The ``/v1/responses`` body for one neutral payload (see
    :class:`~mmirage_beam.providers.base.BatchSubmissionAdapter`).

    Args:
        payload: the neutral payload: its ``messages`` (chat-shaped; a ``system``
            message becomes ``instructions``, ``user`` text parts ``input_text``,
            ``image_url`` parts ``input_image``), ``json_schema`` and ``output_name``.
        config: the OpenAI provider config; ``model`` and, when set, ``max_tokens``
            (sent as ``max_output_tokens``), ``temperature`` and ``top_p``.
        image_detail: ``detail`` of every image part.

    Returns:
        A dict that validates as openai-python's ``ResponseCreateParamsNonStreaming``.
    """
    instructions: list[str] = []
    items: list[Dict[str, Any]] = []
    for message in payload["messages"]:
        role = message.get("role", "user")
        content = message.get("content")
        if role in ("system", "developer"):
            instructions.append(_plain_text(content))
            continue
        parts: list[Dict[str, Any]] = []
        for part in [content] if isinstance(content, str) else content or []:
            if isinstance(part, str):
                parts.append({"type": "input_text", "text": part})
            elif part.get("type") == "text":
                parts.append({"type": "input_text", "text": part["text"]})
            elif part.get("type") == "image_url":
                image = part["image_url"]
                parts.append(
                    {
                        "type": "input_image",
                        "image_url": image["url"],
                        "detail": image.get("detail") or image_detail,
                    }
                )
        items.append({"role": role, "content": parts})
    body: OpenAIResponsesBody = {"model": config.model, "input": items}
    if instructions:
        body["instructions"] = "\n\n".join(instructions)
    body.update(generation_options(config, "max_output_tokens"))  # type: ignore[typeddict-item]
    schema = payload.get("json_schema")
    if schema is not None:
        body["text"] = {
            "format": {
                "type": "json_schema",
                "name": schema_name(payload.get("output_name")),
                "schema": schema,
                "strict": True,
            }
        }
    return body


def _plain_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


def normalise_responses_body(body: Dict[str, Any]) -> ProviderResult:
    """One ``Response`` body (a 200 result of ``/v1/responses``) -> its result fields.

    Returns:
        a :class:`~mmirage_beam.records.ProviderResult` with ``custom_id`` None (the
        caller adds it): ``generated_text`` for a usable answer, else an ``error``
        (:class:`~mmirage_beam.records.ResultError`, ``status_code`` 200) of type one
        of ``refusal`` (a ``refusal`` content part; the message is the provider's refusal text),
        ``truncated`` (``status: "incomplete"``, reason ``max_output_tokens``),
        ``content_filter`` (reason ``content_filter``), ``empty`` (no output text) or
        ``malformed_response`` (the body is not shaped like a Response; a Response
        with ``status: "failed"`` keeps its ``error.code``, e.g. ``server_error``,
        and is ``malformed_response`` only when it has none). Either way
        ``input_tokens`` / ``output_tokens`` are set when ``usage`` reports them, and
        the text produced so far is kept in the error message of ``truncated`` and
        ``content_filter``.
    """
    if not isinstance(body, dict) or not isinstance(body.get("output"), list):
        shape = type(body).__name__ if not isinstance(body, dict) else "no output[] list"
        return _error(MALFORMED, f"the body is not a Response ({shape})", None)

    usage = body.get("usage")
    tokens: Dict[str, int] = {}
    if isinstance(usage, dict) and token_count(usage.get("input_tokens")) is not None:
        tokens["input_tokens"] = usage["input_tokens"]
        tokens["output_tokens"] = token_count(usage.get("output_tokens")) or 0
        tokens.update(detail_tokens(usage, "input_tokens_details", "output_tokens_details"))
    texts: list[str] = []
    refusals: list[str] = []
    for item in body["output"]:
        if not isinstance(item, dict):
            return _error(MALFORMED, "an output[] item is not an object", tokens)
        if item.get("type") != "message":
            continue  # reasoning, tool calls: not the answer
        content = item.get("content")
        if not isinstance(content, list):
            return _error(MALFORMED, "a message output has no content[] list", tokens)
        for part in content:
            if not isinstance(part, dict):
                return _error(MALFORMED, "a content[] part is not an object", tokens)
            if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif part.get("type") == "refusal":
                refusals.append(str(part.get("refusal") or ""))
    text = "".join(texts)
    if refusals:
        return _error(REFUSAL, " ".join(r for r in refusals if r) or "the model refused", tokens)
    if body.get("status") == "incomplete":
        details = body.get("incomplete_details")
        reason = (details.get("reason") if isinstance(details, dict) else None) or "unknown"
        kind = CONTENT_FILTER if reason == "content_filter" else TRUNCATED
        said = f"; text so far: {text}" if text else ""
        return _error(kind, f"the response is incomplete ({reason}){said}", tokens)
    if body.get("status") == "failed" or body.get("error"):
        err = body.get("error") if isinstance(body.get("error"), dict) else {}
        message = err.get("message") or "no message"
        return _error(
            kind_text(err.get("code")) or MALFORMED, f"the response failed: {message}", tokens
        )
    if not text.strip():
        return _error(EMPTY, "the response holds no output text", tokens)
    return ProviderResult(None, generated_text=text, **tokens)


def _error(kind: str, message: str, tokens: Optional[Dict[str, int]]) -> ProviderResult:
    return ProviderResult(None, error=ResultError(kind, message, 200), **(tokens or {}))
