"""The body of one Mistral chat-completion batch line, built from the neutral payload.

Shapes: mistralai 3.7 ``ChatCompletionRequest`` (``messages`` with ``content`` a string
or chunks ``{"type": "text", "text"}`` / ``{"type": "image_url", "image_url": {"url"}}``;
``response_format = {"type": "json_schema", "json_schema": {"name", "schema",
"strict"}}``; ``max_tokens``, ``temperature``, ``top_p``). ``model`` is left out: the job
names it (``batch.jobs.create(model=...)``).
"""

from __future__ import annotations

from typing import Any, Dict

from mmirage_beam.providers.chat import generation_options, json_schema_format, schema_name
from mmirage_beam.providers.config import BatchProviderConfig

__all__ = ["chat_body", "embeddings_body", "schema_name"]


def chat_body(payload: Dict[str, Any], config: BatchProviderConfig) -> Dict[str, Any]:
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
    body: Dict[str, Any] = {"messages": messages}
    body.update(generation_options(config, "max_tokens"))
    response_format = json_schema_format(payload, strict_first=False)
    if response_format is not None:
        body["response_format"] = response_format
    return body


def embeddings_body(payload: Dict[str, Any]) -> Dict[str, Any]:
    """The ``/v1/embeddings`` body of an embedding output's payload: ``{"input": text,
    "encoding_format": "float", "output_dimension"?}`` (mistralai 3.7
    ``EmbeddingRequest``: ``input``, ``output_dimension`` "The dimension of the output
    embeddings when feature available", ``encoding_format`` ``float | base64``); the
    model is the job's, as for chat lines."""
    body: Dict[str, Any] = {"input": payload["text"], "encoding_format": "float"}
    if payload.get("dimensions") is not None:
        body["output_dimension"] = int(payload["dimensions"])
    return body
