"""Gemini ``GenerateContentRequest`` bodies built from the neutral payload
(:func:`generate_content_request`): the prompt's text, inline images, and a JSON schema
as Gemini's ``response_schema`` (an OpenAPI 3.0 subset, google-genai 2.34
``types.Schema``). :mod:`mmirage_beam.providers.gemini.adapter` (the Developer API) and
:mod:`mmirage_beam.providers.vertex.adapter` (Vertex AI) build each line with them.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, TypedDict, Union

from mmirage_beam.images import image_error, images_error
from mmirage_beam.providers.chat import generation_options, prompt_text
from mmirage_beam.providers.gemini.config import MAX_INLINE_BYTES

__all__ = [
    "GeminiBatchLine",
    "GeminiEmbedRequest",
    "GeminiGenerateContentRequest",
    "GeminiGenerationConfig",
    "GeminiSchema",
    "ACCEPTED_IMAGE_TYPES",
    "VISION_LIMITS_SOURCE",
    "embed_request",
    "generate_content_request",
    "response_schema",
]

# Image understanding guide (https://ai.google.dev/gemini-api/docs/image-understanding,
# read 2026-12): "Gemini supports the following image format MIME types: PNG, JPEG,
# WEBP, HEIC, HEIF"; inline data only (an http(s) URL is not fetched by the API).
ACCEPTED_IMAGE_TYPES = ("image/png", "image/jpeg", "image/webp", "image/heic", "image/heif")
VISION_LIMITS_SOURCE = "Gemini image understanding guide"


class GeminiSchema(TypedDict, total=False):
    """Gemini's ``response_schema`` (google-genai ``types.Schema``, snake_case), keys in
    the order :func:`response_schema` writes them."""

    nullable: bool
    type: str
    description: str
    enum: List[Any]
    format: str
    minimum: float
    maximum: float
    min_items: int
    max_items: int
    min_length: int
    max_length: int
    pattern: str
    title: str
    properties: Dict[str, GeminiSchema]
    property_ordering: List[str]
    items: GeminiSchema
    required: List[str]
    any_of: List[GeminiSchema]


class GeminiGenerationConfig(TypedDict, total=False):
    """A request's ``generation_config`` (google-genai ``types.GenerationConfig``)."""

    max_output_tokens: int
    temperature: float
    top_p: float
    response_mime_type: str
    response_schema: GeminiSchema


class GeminiGenerateContentRequest(TypedDict, total=False):
    """A ``GenerateContentRequest`` of a batch line: ``contents``, ``generation_config``
    (Vertex AI's lines put their ``labels`` first)."""

    labels: Dict[str, str]
    contents: List[Dict[str, Any]]
    generation_config: GeminiGenerationConfig


class GeminiEmbedRequest(TypedDict, total=False):
    """An embeddings-job line's ``request`` (``EmbedContentRequest``)."""

    content: Dict[str, List[Dict[str, str]]]
    output_dimensionality: int


class GeminiBatchLine(TypedDict):
    """One line of a Gemini batch input file: ``{"key", "request"}`` (Gemini batch
    mode docs, "input file": https://ai.google.dev/gemini-api/docs/batch-mode)."""

    key: str
    request: Union[GeminiGenerateContentRequest, GeminiEmbedRequest]


def generate_content_request(payload: Dict[str, Any], config: Any) -> GeminiGenerateContentRequest:
    """``{"contents": [{"role": "user", "parts"}], "generation_config"?}`` of a neutral
    payload: the prompt text, then each image as ``inline_data``; ``config``'s
    ``max_tokens`` / ``temperature`` / ``top_p`` (as ``max_output_tokens``...) and the
    payload's JSON schema (``response_mime_type``, ``response_schema``) in
    ``generation_config``.

    Raises:
        mmirage_beam.errors.RequestBuildError: an image given by URL, of a type
            Gemini refuses, or a request whose inline images pass 20 MB.
    """
    parts: list[Dict[str, Any]] = [{"text": prompt_text(payload["messages"])}]
    images = payload.get("images") or []
    total = 0
    for img in images:
        if img.get("data") is None:
            raise image_error(
                img,
                f"image {img.get('source')!r} is a URL; Gemini batch requests take images "
                "as inline data only (give a local path or a storage path instead)",
            )
        if img.get("media_type") not in ACCEPTED_IMAGE_TYPES:
            raise image_error(
                img,
                f"image {img.get('source')!r} is {img.get('media_type')}; Gemini accepts "
                f"only PNG, JPEG, WEBP, HEIC and HEIF ({VISION_LIMITS_SOURCE})",
            )
        total += len(img["data"])
        parts.append({"inline_data": {"mime_type": img["media_type"], "data": img["data"]}})
    if total > MAX_INLINE_BYTES:
        raise images_error(
            images,
            f"the request's images are {total} bytes of base64, over Gemini's 20 MB "
            f"({MAX_INLINE_BYTES} bytes) per request with inline data "
            f"({VISION_LIMITS_SOURCE})",
        )
    generation: GeminiGenerationConfig = dict(generation_options(config, "max_output_tokens"))  # type: ignore[assignment]
    schema = payload.get("json_schema")
    if schema is not None:
        generation["response_mime_type"] = "application/json"
        generation["response_schema"] = response_schema(schema)
    request: GeminiGenerateContentRequest = {"contents": [{"role": "user", "parts": parts}]}
    if generation:
        request["generation_config"] = generation
    return request


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


def response_schema(schema: Mapping[str, Any]) -> GeminiSchema:
    """A JSON schema (:mod:`mmirage_beam.config.schema`) as Gemini's
    ``response_schema``: the same ``type`` / ``properties`` / ``items`` / ``required``
    tree with the keywords of :data:`_SCHEMA_KEYS`, ``property_ordering`` set to the
    properties' order (so keys come back in that order) and ``additionalProperties``
    dropped (Gemini's schema has no such keyword: unlisted keys are never generated)."""
    out: GeminiSchema = {}
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
            out[name] = schema[key]  # type: ignore[literal-required]
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


def embed_request(payload: Dict[str, Any]) -> GeminiEmbedRequest:
    """The ``request`` of an embeddings-job line for an embedding output's payload:
    ``{"content": {"parts": [{"text"}]}, "output_dimensionality"?}``, the file form of
    Gemini batch embeddings ("Gemini Batch API now supports Embeddings", Google
    Developers Blog, 2025-09-10:
    https://developers.googleblog.com/gemini-batch-api-now-supports-embeddings-and-openai-compatibility;
    google-genai ``EmbedContentConfig.output_dimensionality``)."""
    request: GeminiEmbedRequest = {"content": {"parts": [{"text": payload["text"]}]}}
    if payload.get("dimensions") is not None:
        request["output_dimensionality"] = int(payload["dimensions"])
    return request
