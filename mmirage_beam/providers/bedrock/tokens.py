"""Input tokens of a Bedrock record: a labelled estimate.

Neither Anthropic's Claude tokenizer nor Bedrock's ``CountTokens`` is available offline,
and Llama 3's tokenizer ships only with the model's weights; so text is counted with
tiktoken's ``o200k_base`` (as the Mistral estimate does), plus 4 tokens per message for
the control tokens around it, and an image of a Claude body counts
``width * height / 750`` tokens when its size is known (Anthropic's vision guide), else
1,600.
"""

from __future__ import annotations

from typing import Any, Optional

from mmirage_beam.providers.tokens import (
    TokenCount,
    count_messages,
    count_text,
    first_int,
    request_body,
)

ENCODING = "o200k_base"
TOKENS_PER_MESSAGE = 4
UNKNOWN_IMAGE_TOKENS = 1600
NOTE = "Bedrock tokens are estimated (o200k_base text counts; no offline tokenizer)"


def count_bedrock_request(request: dict[str, Any], model_hint: Optional[str] = None) -> TokenCount:
    """The estimated :class:`~mmirage_beam.providers.tokens.TokenCount` of one record
    ``{"recordId", "modelInput"}`` (``exact`` is always False).

    Raises:
        ValueError: the record has no ``modelInput`` object.
    """
    body = request_body(request, "modelInput", "a Bedrock record")
    if isinstance(body.get("prompt"), str):  # Llama
        tokens = count_text(body["prompt"], ENCODING)
        max_out = first_int(body, "max_gen_len")
    else:  # Anthropic Messages
        tokens = count_messages(
            body.get("messages") or (),
            ENCODING,
            TOKENS_PER_MESSAGE,
            "image",
            lambda part: UNKNOWN_IMAGE_TOKENS,
        )
        max_out = first_int(body, "max_tokens")
    return TokenCount(tokens, max_out, False, (NOTE,))
