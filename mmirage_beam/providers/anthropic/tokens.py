"""Token counts of Anthropic batch requests ``{custom_id, params}``.

Anthropic has no public tokenizer: text is estimated with ``cl100k_base`` (a labelled
estimate, :func:`mmirage_beam.providers.tokens.count_proxy_text`); images follow the vision
guide's patch rule (https://platform.claude.com/docs/en/build-with-claude/vision: 28 x 28
px patches, ``ceil(w/28) * ceil(h/28)`` after resizing to the model's native resolution,
1568 px / 1568 patches, or 2576 px / 4784 patches for the high-resolution models; the
guide's older ``(width * height) / 750`` approximation is within a few percent). With
``exact_tokens`` the free ``messages.count_tokens`` endpoint counts each request exactly
(:class:`AnthropicExactCounter`).
"""

from __future__ import annotations

import math
from typing import Any, Optional

from mmirage_beam.providers.base import resolve_credentials
from mmirage_beam.providers.tokens import Tally as _Tally
from mmirage_beam.providers.tokens import TokenCount, image_size_from_base64, request_body
from mmirage_beam.providers.tokens import first_int as _first_int
from mmirage_beam.providers.tokens import json_text as _json_text

# Anthropic vision guide: 28 px patches; native resolution per model tier.
_ANTHROPIC_PATCH_PX = 28
_ANTHROPIC_STANDARD = (1568, 1568)  # (max long edge px, max patches)
_ANTHROPIC_HIGH_RES = (2576, 4784)
_ANTHROPIC_HIGH_RES_MODELS = (
    "claude-opus-4-7",
    "claude-opus-4-8",
    "claude-sonnet-5",
    "claude-mythos-5",
    "claude-fable-5",
)


def anthropic_image_tokens(model: str, width: Optional[int], height: Optional[int]) -> int:
    """Estimated tokens of one image for an Anthropic model: resized (aspect kept) to fit
    the model's native resolution, padded to 28 px, ``ceil(w/28) * ceil(h/28)``; an image
    of unknown size counts the tier's maximum. Source: Anthropic vision guide (see the
    module docstring)."""
    max_edge, max_patches = (
        _ANTHROPIC_HIGH_RES if model.startswith(_ANTHROPIC_HIGH_RES_MODELS) else _ANTHROPIC_STANDARD
    )
    if width is None or height is None:
        return max_patches
    p = _ANTHROPIC_PATCH_PX
    scale = min(
        1.0, max_edge / max(width, height), math.sqrt(max_patches * p * p / (width * height))
    )
    w, h = max(1, int(width * scale)), max(1, int(height * scale))
    while math.ceil(w / p) * math.ceil(h / p) > max_patches:
        w, h = max(1, int(w * 0.99)), max(1, int(h * 0.99))
    return math.ceil(w / p) * math.ceil(h / p)


_ANTHROPIC_TEXT_ENCODING = "cl100k_base"


def count_anthropic_request(
    request: dict[str, Any], model_hint: Optional[str] = None
) -> TokenCount:
    """The estimated :class:`TokenCount` of one Anthropic batch request ``{custom_id,
    params}`` (text by ``cl100k_base`` as a proxy, images by the vision guide's rule).

    Raises:
        ValueError: the request has no ``params`` object.
    """
    params = request_body(request, "params", "an Anthropic batch request")
    model = str(params.get("model") or model_hint or "")
    tally = _Tally()
    tally.estimate("Anthropic has no public tokenizer (cl100k_base used as a proxy)")
    enc = _ANTHROPIC_TEXT_ENCODING
    system = params.get("system")
    if isinstance(system, str):
        tally.text(system, enc)
    elif isinstance(system, list):
        for b in system:
            tally.text(str(b.get("text") or ""), enc)
    for message in params.get("messages") or ():
        tally.tokens += 3
        content = message.get("content")
        if isinstance(content, str):
            tally.text(content, enc)
            continue
        for block in content or ():
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                tally.text(str(block.get("text") or ""), enc)
            elif kind == "image":
                source = block.get("source") or {}
                size = (
                    image_size_from_base64(str(source.get("data") or ""))
                    if source.get("type") == "base64"
                    else None
                )
                tally.tokens += anthropic_image_tokens(model, *(size or (None, None)))
            elif block is not None:
                tally.text(_json_text(block), enc)
    for key in ("tools", "output_config"):
        if params.get(key):
            tally.text(_json_text(params[key]), enc)
    return TokenCount(tally.tokens, _first_int(params, "max_tokens"), False, tuple(tally.notes))


class AnthropicExactCounter:
    """Exact input tokens of Anthropic requests through the official SDK's
    ``messages.count_tokens`` (``POST /v1/messages/count_tokens``, free; rate-limited
    per minute like other calls, which the SDK's retries absorb). The key is read on
    first use with :func:`mmirage_beam.providers.base.resolve_credentials`
    (``ANTHROPIC_API_KEY`` or ``ANTHROPIC_API_KEY_FILE``). ``adapter_cls`` is the adapter
    class whose credentials are read (the adapter passes ``type(self)``, so this module
    never imports the adapter back)."""

    def __init__(self, adapter_cls: Any, base_url: Optional[str] = None) -> None:
        self.adapter_cls = adapter_cls
        self.base_url = base_url
        self._client: Any = None

    def __reduce__(self) -> tuple[type, tuple[Any, Optional[str]]]:
        # pickled as its constructor's arguments: never the client
        return (type(self), (self.adapter_cls, self.base_url))

    def __call__(self, request: dict[str, Any]) -> int:
        if self._client is None:
            import anthropic  # optional SDK, needed only when exact counts are asked for

            key = resolve_credentials(self.adapter_cls, "anthropic")["api_key"]
            self._client = anthropic.Anthropic(api_key=key, base_url=self.base_url)
        params = request.get("params") or {}
        kwargs = {k: params[k] for k in _COUNT_TOKENS_PARAMS if k in params}
        return int(self._client.messages.count_tokens(**kwargs).input_tokens)


# The count_tokens parameters a batch request's params can carry (anthropic-sdk-python
# 2.14 ``messages.count_tokens``); sampling settings and max_tokens are not among them.
_COUNT_TOKENS_PARAMS = ("model", "messages", "system", "tools", "tool_choice", "output_config")
