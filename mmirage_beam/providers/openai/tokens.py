"""Token counts of OpenAI batch lines (chat completions, the Responses API, embeddings).

**Embeddings** (``/v1/embeddings`` lines): the ``input`` text's tokens, no framing, no
output tokens.

**Text** is counted by tiktoken (OpenAI's tokenizer) with the model's own encoding
(``o200k_base`` or ``cl100k_base``, :func:`encoding_for_model`), built offline
(:func:`mmirage_beam.providers.tokens.load_encoding`). The chat overhead is OpenAI's
documented one: 3 tokens per message, 1 more per ``name``, 3 to prime the reply
(``num_tokens_from_messages`` in the OpenAI Cookbook, "How to count tokens with
tiktoken", which checks it against the API's ``usage.prompt_tokens``:
https://github.com/openai/openai-cookbook/blob/main/examples/How_to_count_tokens_with_tiktoken.ipynb).
Such a count is **exact**. It becomes an **estimate** when the request also holds what
OpenAI does not document the tokenisation of: a JSON schema (``response_format``, the
Responses API ``text.format``), tools, content given as a list of parts, the Responses
API's own framing, images, or a model whose encoding is not known.

**Images**: the "Calculating costs" rules of OpenAI's images and vision guide
(https://platform.openai.com/docs/guides/images-vision#calculating-costs): tile models
(``base + tile * tiles``: scaled into 2048 x 2048, shortest side to 768, 512 px tiles;
``detail: low`` is ``base``) and patch models (32 px patches, at most 1536, times the
model's multiplier). ``detail: auto`` is counted as ``high`` (the upper bound). An image
given by URL has no known size and is counted at its model's maximum.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from mmirage_beam.providers.tokens import Tally as _Tally
from mmirage_beam.providers.tokens import TokenCount, image_size_from_url, request_body
from mmirage_beam.providers.tokens import first_int as _first_int
from mmirage_beam.providers.tokens import json_text as _json_text

#: Model -> encoding, from tiktoken 0.14.0 ``tiktoken/model.py`` (MODEL_TO_ENCODING and
#: MODEL_PREFIX_TO_ENCODING): https://github.com/openai/tiktoken/blob/0.14.0/tiktoken/model.py
_MODEL_ENCODINGS = {
    "o1": "o200k_base",
    "o3": "o200k_base",
    "o4-mini": "o200k_base",
    "gpt-5": "o200k_base",
    "gpt-4.1": "o200k_base",
    "gpt-4o": "o200k_base",
    "gpt-4": "cl100k_base",
    "gpt-3.5-turbo": "cl100k_base",
    "gpt-3.5": "cl100k_base",
    "gpt-35-turbo": "cl100k_base",
    # embeddings (the same MODEL_TO_ENCODING)
    "text-embedding-ada-002": "cl100k_base",
    "text-embedding-3-small": "cl100k_base",
    "text-embedding-3-large": "cl100k_base",
}
_PREFIX_ENCODINGS = (
    ("o1-", "o200k_base"),
    ("o3-", "o200k_base"),
    ("o4-mini-", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("gpt-4.5-", "o200k_base"),
    ("gpt-4.1-", "o200k_base"),
    ("chatgpt-4o-", "o200k_base"),
    ("gpt-4o-", "o200k_base"),
    ("gpt-4-", "cl100k_base"),
    ("gpt-3.5-turbo-", "cl100k_base"),
    ("gpt-35-turbo-", "cl100k_base"),
    ("ft:gpt-4o", "o200k_base"),
    ("ft:gpt-4", "cl100k_base"),
    ("ft:gpt-3.5-turbo", "cl100k_base"),
)
#: the encoding assumed for an OpenAI model tiktoken does not know (counts are estimates)
DEFAULT_ENCODING = "o200k_base"


def encoding_for_model(model: str) -> Optional[str]:
    """``"o200k_base"`` / ``"cl100k_base"`` for an OpenAI model name, as tiktoken maps it
    (exact names first, then prefixes); None for a model tiktoken does not map."""
    if model in _MODEL_ENCODINGS:
        return _MODEL_ENCODINGS[model]
    for prefix, name in _PREFIX_ENCODINGS:
        if model.startswith(prefix):
            return name
    return None


# OpenAI images and vision guide, "Calculating costs" (see the module docstring).
# Patch models: 32 px patches, at most 1536, times the multiplier.
_OPENAI_PATCH_MULTIPLIERS = (
    ("gpt-5-mini", 1.62),
    ("gpt-5-nano", 2.46),
    ("gpt-4.1-mini", 1.62),
    ("gpt-4.1-nano", 2.46),
    ("o4-mini", 1.72),
)
# Tile models: (base tokens, tokens per 512 px tile).
_OPENAI_TILE_COSTS = (
    ("gpt-4o-mini", (2833, 5667)),
    ("gpt-5-chat-latest", (70, 140)),
    ("gpt-5", (70, 140)),
    ("gpt-4o", (85, 170)),
    ("gpt-4.1", (85, 170)),
    ("gpt-4.5", (85, 170)),
    ("chatgpt-4o", (85, 170)),
    ("o1-pro", (75, 150)),
    ("o1", (75, 150)),
    ("o3", (75, 150)),
    ("computer-use-preview", (65, 129)),
)
_PATCH_PX = 32
_MAX_PATCHES = 1536


def openai_image_tokens(
    model: str, width: Optional[int], height: Optional[int], detail: str = "auto"
) -> tuple[int, bool]:
    """``(tokens, documented)`` for one image in an OpenAI request.

    ``width``/``height`` None (an image by URL) gives the model's maximum. ``detail``
    ``auto`` is counted as ``high``. ``documented`` is False for a model outside the
    guide's tables (counted as ``gpt-4o``). Source: OpenAI images and vision guide,
    "Calculating costs"."""
    for prefix, multiplier in _OPENAI_PATCH_MULTIPLIERS:
        if model.startswith(prefix):
            patches = _MAX_PATCHES if width is None else _openai_patches(width, height)
            return round(patches * multiplier), True
    documented = False
    base, tile = 85, 170
    for prefix, costs in _OPENAI_TILE_COSTS:
        if model.startswith(prefix):
            (base, tile), documented = costs, True
            break
    if detail == "low":
        return base, documented
    if width is None or height is None:
        return base + tile * 8, documented  # 768 x 2048 after scaling: 2 x 4 tiles
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(int(w) / 512) * math.ceil(int(h) / 512)
    return base + tile * tiles, documented


def _openai_patches(width: int, height: Optional[int]) -> int:
    h = height or width
    raw = math.ceil(width / _PATCH_PX) * math.ceil(h / _PATCH_PX)
    if raw <= _MAX_PATCHES:
        return raw
    shrink = math.sqrt(_PATCH_PX**2 * _MAX_PATCHES / (width * h))
    # Then shrink a little more so a whole number of patches covers the width.
    wp, hp = width * shrink / _PATCH_PX, h * shrink / _PATCH_PX
    shrink *= min(math.floor(wp) / wp, math.floor(hp) / hp)
    w, hh = width * shrink, h * shrink
    return min(_MAX_PATCHES, math.ceil(w / _PATCH_PX) * math.ceil(hh / _PATCH_PX))


def count_openai_request(request: dict[str, Any], model_hint: Optional[str] = None) -> TokenCount:
    """The :class:`TokenCount` of one OpenAI batch line (chat completions or Responses).

    Raises:
        ValueError: the line has no ``body`` object.
    """
    body = request_body(request, "body", "an OpenAI batch line")
    model = str(body.get("model") or model_hint or "")
    tally = _Tally()
    encoding = encoding_for_model(model)
    if encoding is None:
        encoding = DEFAULT_ENCODING
        tally.estimate(f"model {model!r} has no known encoding ({DEFAULT_ENCODING} assumed)")
    if request.get("url") == "/v1/embeddings":
        # the input text alone, no framing: an embedding bills its input tokens only
        text = body.get("input")
        if not isinstance(text, str):
            raise ValueError("an OpenAI /v1/embeddings line needs an 'input' string")
        tally.text(text, encoding)
        return TokenCount(tally.tokens, 0, not tally.notes, tuple(tally.notes))
    if "messages" in body:
        _count_chat(body, model, encoding, tally)
        max_out = _first_int(body, "max_completion_tokens", "max_tokens")
    else:
        _count_responses(body, model, encoding, tally)
        max_out = _first_int(body, "max_output_tokens")
    for key, what in (("response_format", "a response_format"), ("tools", "tools")):
        value = body.get(key)
        if value and not (key == "response_format" and value.get("type") == "text"):
            tally.text(_json_text(value), encoding, repeated=True)
            tally.estimate(f"{what} (counted as its JSON text)")
    text_format = (
        (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    )
    if isinstance(text_format, dict) and text_format.get("type") != "text":
        tally.text(_json_text(text_format), encoding, repeated=True)
        tally.estimate("a text.format schema (counted as its JSON text)")
    return TokenCount(tally.tokens, max_out, not tally.notes, tuple(tally.notes))


def _count_chat(body: dict, model: str, encoding: str, tally: _Tally) -> None:
    # OpenAI Cookbook num_tokens_from_messages: 3 per message, 1 per name, 3 for the reply.
    for message in body.get("messages") or ():
        tally.tokens += 3
        for key, value in message.items():
            if key == "content" and isinstance(value, str):
                tally.text(value, encoding)
            elif isinstance(value, str):  # role, name: the same few strings every time
                tally.text(value, encoding, repeated=True)
            elif key == "content" and isinstance(value, list):
                _count_parts(value, model, encoding, tally)
            elif value is not None:
                tally.text(_json_text(value), encoding)
                tally.estimate(f"a message field {key!r} that is not text")
            if key == "name":
                tally.tokens += 1
    tally.tokens += 3


def _count_responses(body: dict, model: str, encoding: str, tally: _Tally) -> None:
    tally.estimate("the Responses API's message framing is not documented (chat's assumed)")
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        tally.tokens += 3
        tally.text(instructions, encoding)
        tally.text("developer", encoding, repeated=True)
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items or ():
        tally.tokens += 3
        for key, value in item.items():
            if key == "type":
                continue
            if isinstance(value, str):
                tally.text(value, encoding)
            elif key == "content" and isinstance(value, list):
                _count_parts(value, model, encoding, tally)
    tally.tokens += 3


def _count_parts(parts: list, model: str, encoding: str, tally: _Tally) -> None:
    tally.estimate("content given as parts (their framing is not documented)")
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("text", "input_text"):
            tally.text(str(part.get("text") or ""), encoding)
        elif kind in ("image_url", "input_image"):
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            detail = (image.get("detail") if isinstance(image, dict) else None) or part.get(
                "detail"
            )
            size = image_size_from_url(str(url or ""))
            tokens, documented = openai_image_tokens(
                model, *(size or (None, None)), detail=str(detail or "auto")
            )
            tally.tokens += tokens
            tally.estimate("images (OpenAI's documented formula)")
            if size is None:
                tally.estimate("an image of unknown size (counted at the model's maximum)")
            if not documented:
                tally.estimate(f"model {model!r} is not in OpenAI's image cost tables")
        else:
            tally.text(_json_text(part), encoding)
            tally.estimate(f"a content part of type {kind!r}")
