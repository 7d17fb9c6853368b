"""What the providers' request bodies and chat-completion results share.

The prompt text of a payload (:func:`prompt_text`), the optional length and sampling
settings of a config (:func:`generation_options`), the structured-output ``name`` and
``json_schema`` object (:func:`schema_name`, :func:`json_schema_format`), and, on the
way back, a chat completion's ``choices[0].message`` (:func:`first_choice`, OpenAI's and
Mistral's result shape), an embeddings answer's vector and result
(:func:`first_embedding`, :func:`embedding_outcome`) and the error of a 200 whose body
is unusable (:func:`malformed_200`). Request bodies are wire JSON: every helper keeps
the key order each provider's body had, so the bytes of a request line (and their hash
in the receipts) do not change.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from mmirage_beam.records import ProviderResult, ResultError
from mmirage_beam.results import MALFORMED_RESPONSE, embedding_text

__all__ = [
    "prompt_text",
    "generation_options",
    "schema_name",
    "json_schema_format",
    "first_choice",
    "first_embedding",
    "embedding_outcome",
    "malformed_200",
]

_SCHEMA_NAME_RE = re.compile(r"[^a-zA-Z0-9_-]")


def prompt_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of a payload's first message: its content when a string, else its
    ``text`` parts joined by ``\\n`` (image parts left out). Raises ``KeyError`` on a
    text part without ``text``."""
    content = messages[0]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if p.get("type") == "text")


def generation_options(config: Any, max_tokens_key: str) -> List[Tuple[str, float]]:
    """The config's optional length and sampling settings that are set, as ``(wire
    key, value)`` pairs in this order (a body's ``update`` keeps it): ``max_tokens``
    (as ``int``, under ``max_tokens_key``: ``max_completion_tokens``,
    ``max_output_tokens``...), ``temperature``, ``top_p``. A config without one of
    these fields sends nothing for it. Pairs, not a dict: the key of the length is the
    caller's, so each body's TypedDict names it."""
    options: List[Tuple[str, float]] = []
    if getattr(config, "max_tokens", None) is not None:
        options.append((max_tokens_key, int(config.max_tokens)))
    for name in ("temperature", "top_p"):
        if getattr(config, name, None) is not None:
            options.append((name, getattr(config, name)))
    return options


def schema_name(output_name: Any) -> str:
    """A structured-output ``name``: ``[a-zA-Z0-9_-]{1,64}`` (other characters become
    ``_``), from the output's name (``output`` when it has none)."""
    return _SCHEMA_NAME_RE.sub("_", str(output_name or "output"))[:64] or "output"


def json_schema_format(
    payload: Mapping[str, Any], *, strict_first: bool
) -> Optional[Dict[str, Any]]:
    """``{"type": "json_schema", "json_schema": {"name", "strict", "schema"}}`` for a
    payload with a ``json_schema`` (None without one): ``strict`` before ``schema``
    with ``strict_first`` (OpenAI's body), after it otherwise (Mistral's)."""
    schema = payload.get("json_schema")
    if schema is None:
        return None
    spec: Dict[str, Any] = {"name": schema_name(payload.get("output_name"))}
    if strict_first:
        spec["strict"] = True
    spec["schema"] = schema
    spec.setdefault("strict", True)
    return {"type": "json_schema", "json_schema": spec}


def first_choice(body: Mapping[str, Any]) -> Optional[Tuple[Dict[str, Any], Dict[str, Any]]]:
    """A chat completion's ``choices[0]`` and its ``message`` (both objects), or None
    when the body has no such message."""
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    return (choice, message) if isinstance(message, dict) else None  # type: ignore[return-value]


def first_embedding(body: Mapping[str, Any]) -> Any:
    """An embeddings body's ``data[0].embedding`` (OpenAI's ``CreateEmbeddingResponse``
    shape, Mistral's ``EmbeddingResponse`` too), or None when the body has none."""
    data = body.get("data")
    first = data[0] if isinstance(data, list) and data else None
    return first.get("embedding") if isinstance(first, dict) else None


def embedding_outcome(
    cid: Optional[str], vector: Any, where: str, tokens: Mapping[str, int]
) -> ProviderResult:
    """The result of an embeddings answer whose vector is ``vector``: its JSON text as
    ``generated_text`` (:func:`~mmirage_beam.results.embedding_text`), or, when it is
    not a list of numbers, a ``malformed_response`` naming ``where`` (the vector's place
    in the body, e.g. ``data[0].embedding``); ``tokens`` (``input_tokens``... as ints)
    on the result either way."""
    text = embedding_text(vector)
    if text is None:
        error = malformed_200(f"HTTP 200 but {where} is not a list of numbers")
        return ProviderResult(cid, error=error, **tokens)
    return ProviderResult(cid, generated_text=text, **tokens)


def malformed_200(message: str) -> ResultError:
    """The error of an HTTP 200 whose body is not a usable answer."""
    return ResultError(MALFORMED_RESPONSE, message, 200)
