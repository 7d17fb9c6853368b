"""The body of one Mistral chat-completion batch line, built from the neutral payload.

Shapes: mistralai 3.7 ``ChatCompletionRequest`` (``messages`` with ``content`` a string
or chunks ``{"type": "text", "text"}`` / ``{"type": "image_url", "image_url": {"url"}}``;
``response_format = {"type": "json_schema", "json_schema": {"name", "schema",
"strict"}}``; ``max_tokens``, ``temperature``, ``top_p``). ``model`` is left out: the job
names it (``batch.jobs.create(model=...)``).
"""

from __future__ import annotations

from typing import Any, Dict

from mmirage_beam.providers.config import BatchProviderConfig


def schema_name(output_name: Any) -> str:
    """A ``json_schema.name`` from the output's name: ``[A-Za-z0-9_-]``, at most 64."""
    import re

    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(output_name or "output"))[:64]
    return name or "output"


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
    for name in ("max_tokens", "temperature", "top_p"):
        value = getattr(config, name, None)
        if value is not None:
            body[name] = value
    schema = payload.get("json_schema")
    if schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": schema_name(payload.get("output_name")),
                "schema": schema,
                "strict": True,
            },
        }
    return body
