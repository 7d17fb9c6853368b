"""Input tokens of a Mistral batch line: a labelled estimate.

Mistral's tokenizers (Tekken, SentencePiece) ship offline only in ``mistral-common``
(PyPI). Its 1.13.1 wheel holds the 2024 vocabularies (``tekken_240718.json``,
``tekken_240911.json``, SentencePiece v1-v7); the tokenizers of today's models
(``mistral-small-latest``, ``mistral-medium-latest``...) are fetched from the Hugging
Face hub at run time, which this project cannot do, and the package pulls numpy,
tiktoken, pillow and requests with it. So counts here are an estimate, and labelled so:
text is counted with tiktoken's ``o200k_base`` (a byte-level BPE of a similar vocabulary
size to Tekken's 131,072 tokens, read from the bpe-openai wheel), plus 4 tokens per
message for the control tokens around it; an image whose size is known counts one token
per 16 x 16 pixel patch after fitting it into 1024 x 1024 (Pixtral's image encoder,
mistral-common ``ImageConfig`` defaults), else 1024.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from mmirage_beam.providers.tokens import (
    TokenCount,
    count_messages,
    count_text,
    first_int,
    image_size_from_url,
    request_body,
)

ENCODING = "o200k_base"
TOKENS_PER_MESSAGE = 4
IMAGE_PATCH_PX = 16
MAX_IMAGE_SIDE_PX = 1024
UNKNOWN_IMAGE_TOKENS = 1024
NOTE = (
    "Mistral tokens are estimated (o200k_base text counts; no offline tokenizer for "
    "current Mistral models)"
)


def image_tokens(size: Optional[tuple[int, int]]) -> int:
    """Estimated tokens of one image of ``size`` (width, height) pixels, or None."""
    if size is None:
        return UNKNOWN_IMAGE_TOKENS
    width, height = size
    scale = min(1.0, MAX_IMAGE_SIDE_PX / max(width, height, 1))
    return math.ceil(width * scale / IMAGE_PATCH_PX) * math.ceil(height * scale / IMAGE_PATCH_PX)


def count_mistral_request(request: dict[str, Any], model_hint: Optional[str] = None) -> TokenCount:
    """The estimated :class:`~mmirage_beam.providers.tokens.TokenCount` of one line
    ``{"custom_id", "body"}`` (``exact`` is always False).

    Raises:
        ValueError: the line has no ``body`` object.
    """
    body = request_body(request, "body", "a Mistral batch line")
    if "messages" not in body and isinstance(body.get("input"), str):  # an embeddings line
        return TokenCount(count_text(body["input"], ENCODING), 0, False, (NOTE,))
    tokens = count_messages(
        body.get("messages") or (), ENCODING, TOKENS_PER_MESSAGE, "image_url", _image_part_tokens
    )
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        tokens += count_text(json.dumps(fmt, separators=(",", ":")), ENCODING)
    return TokenCount(tokens, first_int(body, "max_tokens"), False, (NOTE,))


def _image_part_tokens(part: dict[str, Any]) -> int:
    """An ``image_url`` part's tokens (:func:`image_tokens` of its URL's image size)."""
    url = part.get("image_url")
    url = url.get("url") if isinstance(url, dict) else url
    return image_tokens(image_size_from_url(str(url or "")))
