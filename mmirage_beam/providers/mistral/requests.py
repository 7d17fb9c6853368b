"""The body of one Mistral chat-completion batch line, built from the neutral payload.

Shapes: mistralai 3.7 ``ChatCompletionRequest`` (``messages`` with ``content`` a string
or chunks ``{"type": "text", "text"}`` / ``{"type": "image_url", "image_url": {"url"}}``;
``response_format = {"type": "json_schema", "json_schema": {"name", "schema",
"strict"}}``; ``max_tokens``, ``temperature``, ``top_p``). ``model`` is left out: the job
names it (``batch.jobs.create(model=...)``).
"""

from __future__ import annotations

from typing import Any, Dict, List, TypedDict, Union

from mmirage_beam.providers.chat import generation_options, json_schema_format, schema_name
from mmirage_beam.providers.config import BatchProviderConfig

__all__ = [
    "MistralBatchLine",
    "MistralChatBody",
    "MistralEmbeddingsBody",
    "chat_body",
    "embeddings_body",
    "schema_name",
]


class MistralChatBody(TypedDict, total=False):
    """A ``/v1/chat/completions`` line's body (mistralai ``ChatCompletionRequest``
    without ``model``), keys in the order they are sent."""

    messages: List[Dict[str, Any]]
    max_tokens: int
    temperature: float
    top_p: float
    response_format: Dict[str, Any]


class MistralEmbeddingsBody(TypedDict, total=False):
    """A ``/v1/embeddings`` line's body (mistralai ``EmbeddingRequest`` without
    ``model``)."""

    input: str
    encoding_format: str
    output_dimension: int


class MistralBatchLine(TypedDict):
    """One line of a Mistral batch input file: ``{"custom_id", "body"}``."""

    custom_id: str
    body: Union[MistralChatBody, MistralEmbeddingsBody]


def chat_body(payload: Dict[str, Any], config: BatchProviderConfig) -> MistralChatBody:
    """The ``/v1/chat/completions`` body of a neutral payload (see
    :class:`~mmirage_beam.providers.base.BatchSubmissionAdapter` for its shape).

    Returns:
        ``{"messages", "response_format"?, "max_tokens"?, "temperature"?, "top_p"?}``.
    """
    messages = []
    for message in payload["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            content = [
                {"type": "image_url", "image_url": {"url": p["image_url"]["url"]}}
                if p.get("type") == "image_url"
                else {"type": "text", "text": p.get("text", "")}
                for p in content
            ]
        messages.append({"role": message.get("role", "user"), "content": content})
    body: MistralChatBody = {"messages": messages}
    body.update(generation_options(config, "max_tokens"))  # type: ignore[typeddict-item]
    response_format = json_schema_format(payload, strict_first=False)
    if response_format is not None:
        body["response_format"] = response_format
    return body


def embeddings_body(payload: Dict[str, Any]) -> MistralEmbeddingsBody:
    """The ``/v1/embeddings`` body of an embedding output's payload: ``{"input": text,
    "encoding_format": "float", "output_dimension"?}`` (mistralai 3.7
    ``EmbeddingRequest``: ``input``, ``output_dimension`` "The dimension of the output
    embeddings when feature available", ``encoding_format`` ``float | base64``); the
    model is the job's, as for chat lines."""
    body: MistralEmbeddingsBody = {"input": payload["text"], "encoding_format": "float"}
    if payload.get("dimensions") is not None:
        body["output_dimension"] = int(payload["dimensions"])
    return body
