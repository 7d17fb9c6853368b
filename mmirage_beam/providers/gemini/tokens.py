"""Token counts of Gemini batch lines ``{"key", "request": GenerateContentRequest}``.

Gemini's tokenizer is not published for offline use (google-genai's ``local_tokenizer``
downloads a model at first use), so the offline count is a labelled **estimate**: text
by ``cl100k_base`` as a proxy (:func:`mmirage_beam.providers.tokens.count_proxy_text`),
images by the token rules of the Gemini docs ("Understand and count tokens",
https://ai.google.dev/gemini-api/docs/tokens, read 2026-12: an image with both sides at
most 384 px is 258 tokens; a larger one is cropped and scaled into 768 x 768 px tiles of
258 tokens each). With ``exact_tokens``, the free ``models.count_tokens`` endpoint counts
each request's ``contents`` exactly (:class:`GeminiExactCounter`).
"""

from __future__ import annotations

import math
from typing import Any, Optional

from mmirage_beam.providers.base import resolve_credentials
from mmirage_beam.providers.tokens import Tally as _Tally
from mmirage_beam.providers.tokens import (
    TokenCount,
    count_proxy_text,
    image_size_from_base64,
    request_body,
)
from mmirage_beam.providers.tokens import first_int as _first_int
from mmirage_beam.providers.tokens import json_text as _json_text

IMAGE_TILE_TOKENS = 258
IMAGE_SMALL_SIDE_PX = 384
IMAGE_TILE_PX = 768


def gemini_image_tokens(width: Optional[int], height: Optional[int]) -> int:
    """Tokens of one image: 258 when both sides are at most 384 px, else 258 per
    768 x 768 px tile; an image of unknown size counts one tile. Source: the module
    docstring."""
    if width is None or height is None:
        return IMAGE_TILE_TOKENS
    if max(width, height) <= IMAGE_SMALL_SIDE_PX:
        return IMAGE_TILE_TOKENS
    tiles = math.ceil(width / IMAGE_TILE_PX) * math.ceil(height / IMAGE_TILE_PX)
    return IMAGE_TILE_TOKENS * tiles


def _get(mapping: Any, snake: str) -> Any:
    if not isinstance(mapping, dict):
        return None
    if snake in mapping:
        return mapping[snake]
    head, *rest = snake.split("_")
    return mapping.get(head + "".join(w.title() for w in rest))


def count_gemini_request(request: dict[str, Any], model_hint: Optional[str] = None) -> TokenCount:
    """The estimated :class:`TokenCount` of one Gemini batch line (see the module
    docstring); the output limit is ``generation_config.max_output_tokens``.

    Raises:
        ValueError: the line has no ``request`` object.
    """
    body = request_body(request, "request", "a Gemini batch line")
    tally = _Tally()
    tally.estimate("Gemini has no offline tokenizer (cl100k_base used as a proxy)")
    content = body.get("content")
    if isinstance(content, dict) and "contents" not in body:  # an embeddings request
        for part in _get(content, "parts") or ():
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                tally.tokens += count_proxy_text(part["text"])
        return TokenCount(tally.tokens, 0, False, tuple(tally.notes))
    for content in _get(body, "contents") or ():
        for part in _get(content, "parts") or ():
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                tally.tokens += count_proxy_text(part["text"])
                continue
            inline = _get(part, "inline_data")
            if isinstance(inline, dict):
                size = image_size_from_base64(str(inline.get("data") or ""))
                tally.tokens += gemini_image_tokens(*(size or (None, None)))
                tally.estimate("images (the Gemini docs' tile rule)")
            else:
                tally.tokens += count_proxy_text(_json_text(part))
    generation = _get(body, "generation_config") or {}
    schema = _get(generation, "response_schema")
    if schema:
        tally.tokens += count_proxy_text(_json_text(schema))
        tally.estimate("a response_schema (counted as its JSON text)")
    max_out = _first_int(generation, "max_output_tokens", "maxOutputTokens")
    return TokenCount(tally.tokens, max_out, False, tuple(tally.notes))


class GeminiExactCounter:
    """Exact input tokens of Gemini requests through the SDK's free
    ``models.count_tokens`` (``POST v1beta/models/{model}:countTokens`` with the
    request's ``contents``; the Developer API's count takes no generation config, so a
    response schema is not counted). The key is read on first use with
    :func:`mmirage_beam.providers.base.resolve_credentials` (``GEMINI_API_KEY``, else
    ``GOOGLE_API_KEY``, or ``GEMINI_API_KEY_FILE``). ``adapter_cls`` is the adapter class
    whose credentials and SDK check are used (the adapter passes ``type(self)``, so this
    module never imports the adapter back)."""

    def __init__(
        self, adapter_cls: Any, model: Optional[str], base_url: Optional[str] = None
    ) -> None:
        self.adapter_cls = adapter_cls
        self.model = model
        self.base_url = base_url
        self._client: Any = None

    def __reduce__(self) -> tuple[type, tuple[Any, Optional[str], Optional[str]]]:
        # pickled as its constructor's arguments: never the client
        return (type(self), (self.adapter_cls, self.model, self.base_url))

    def __call__(self, request: dict[str, Any]) -> int:
        if self._client is None:
            self.adapter_cls.check_dependencies()  # a ConfigError naming the extra
            # optional SDK (the [gemini] extra), imported only when exact counts are asked
            from google import genai
            from google.genai import types

            key = resolve_credentials(self.adapter_cls, "gemini")["api_key"]
            options = types.HttpOptions(base_url=self.base_url) if self.base_url else None
            self._client = genai.Client(api_key=key, http_options=options)
        body = request.get("request") or {}
        model = str(request.get("model") or self.model or "")
        contents = _get(body, "contents")
        if contents is None and isinstance(body.get("content"), dict):  # an embeddings request
            contents = [body["content"]]
        answer = self._client.models.count_tokens(model=model, contents=contents)
        return int(answer.total_tokens or 0)
