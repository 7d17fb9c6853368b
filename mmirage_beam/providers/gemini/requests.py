"""Gemini batch request parts built from the neutral payload: the prompt's text, and
a JSON schema as Gemini's ``response_schema`` (an OpenAPI 3.0 subset, google-genai 2.34
``types.Schema``). :mod:`mmirage_beam.providers.gemini.adapter` builds each line with
them.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence

__all__ = ["embed_request", "prompt_text", "response_schema"]


def prompt_text(messages: Sequence[Dict[str, Any]]) -> str:
    """The text of the first message: its string, or its text parts joined by ``\\n``."""
    content = messages[0]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if p.get("type") == "text")


#: JSON-schema keyword -> Gemini ``response_schema`` field (an OpenAPI 3.0 subset,
#: google-genai 2.34 ``types.Schema``; snake_case like the rest of the request).
_SCHEMA_KEYS = {
    "description": "description",
    "enum": "enum",
    "format": "format",
    "minimum": "minimum",
    "maximum": "maximum",
    "minItems": "min_items",
    "maxItems": "max_items",
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
    "nullable": "nullable",
    "title": "title",
}


def response_schema(schema: Mapping[str, Any]) -> Dict[str, Any]:
    """A JSON schema (:mod:`mmirage_beam.config.schema`) as Gemini's
    ``response_schema``: the same ``type`` / ``properties`` / ``items`` / ``required``
    tree with the keywords of :data:`_SCHEMA_KEYS`, ``property_ordering`` set to the
    properties' order (so keys come back in that order) and ``additionalProperties``
    dropped (Gemini's schema has no such keyword: unlisted keys are never generated)."""
    out: Dict[str, Any] = {}
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"] -> nullable string
        kinds = [k for k in kind if k != "null"]
        if len(kinds) < len(kind):
            out["nullable"] = True
        kind = kinds[0] if kinds else "string"
    if kind:
        out["type"] = str(kind).upper()
    for key, name in _SCHEMA_KEYS.items():
        if key in schema:
            out[name] = schema[key]
    props = schema.get("properties")
    if isinstance(props, Mapping):
        out["properties"] = {k: response_schema(v) for k, v in props.items()}
        out["property_ordering"] = list(props)
    if isinstance(schema.get("items"), Mapping):
        out["items"] = response_schema(schema["items"])
    if isinstance(schema.get("required"), list):
        out["required"] = list(schema["required"])
    if isinstance(schema.get("anyOf"), list):
        out["any_of"] = [response_schema(s) for s in schema["anyOf"]]
    return out


def embed_request(payload: Dict[str, Any]) -> Dict[str, Any]:
    """The ``request`` of an embeddings-job line for an embedding output's payload:
    ``{"content": {"parts": [{"text"}]}, "output_dimensionality"?}``, the file form of
    Gemini batch embeddings ("Gemini Batch API now supports Embeddings", Google
    Developers Blog, 2025-09-10:
    https://developers.googleblog.com/gemini-batch-api-now-supports-embeddings-and-openai-compatibility;
    google-genai ``EmbedContentConfig.output_dimensionality``)."""
    request: Dict[str, Any] = {"content": {"parts": [{"text": payload["text"]}]}}
    if payload.get("dimensions") is not None:
        request["output_dimensionality"] = int(payload["dimensions"])
    return request
