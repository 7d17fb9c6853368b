"""Per-request token counts: input tokens, the output-token upper bound, exact or not.

    request line (bytes/str) or request dict --TokenCounter.count--> TokenCount

A request is what the adapter built (``BatchRequest.line``): OpenAI's batch line
``{"custom_id", "method", "url", "body"}`` or Anthropic's ``{"custom_id", "params"}``.
Counting is a pure function of it, so it gives the same answer on every worker.

**OpenAI text** is counted by tiktoken (OpenAI's tokenizer) with the model's own
encoding (``o200k_base`` or ``cl100k_base``), built from the vocabulary files the
``bpe-openai`` wheels ship (byte-identical to tiktoken's published files: their SHA-256
is checked against tiktoken's ``expected_hash`` when loaded), so nothing is downloaded
at first use. The chat
overhead is OpenAI's documented one: 3 tokens per message, 1 more per ``name``, 3 to
prime the reply (``num_tokens_from_messages`` in the OpenAI Cookbook, "How to count
tokens with tiktoken", which checks it against the API's ``usage.prompt_tokens``:
https://github.com/openai/openai-cookbook/blob/main/examples/How_to_count_tokens_with_tiktoken.ipynb).
Such a count is **exact**. It becomes an **estimate** when the request also holds what
OpenAI does not document the tokenisation of: a JSON schema (``response_format``, the
Responses API ``text.format``), tools, content given as a list of parts, the Responses
API's own framing, images, or a model whose encoding is not known.

**OpenAI images**: the "Calculating costs" rules of OpenAI's images and vision guide
(https://platform.openai.com/docs/guides/images-vision#calculating-costs): tile models
(``base + tile * tiles``: scaled into 2048 x 2048, shortest side to 768, 512 px tiles;
``detail: low`` is ``base``) and patch models (32 px patches, at most 1536, times the
model's multiplier). ``detail: auto`` is counted as ``high`` (the upper bound).

**Anthropic** has no public tokenizer: text is estimated with ``cl100k_base`` (labelled
estimate); images follow the vision guide's patch rule
(https://platform.claude.com/docs/en/build-with-claude/vision: 28 x 28 px patches,
``ceil(w/28) * ceil(h/28)`` after resizing to the model's native resolution, 1568 px /
1568 patches, or 2576 px / 4784 patches for the high-resolution models; the guide's older
``(width * height) / 750`` approximation is within a few percent). With
``exact_tokens`` the free ``messages.count_tokens`` endpoint counts each request exactly.

Image sizes come from the request itself: the base64 data URL's header is decoded
(Pillow reads the size without decoding pixels); an image given by URL has no known size
and is counted at its model's maximum.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import json
import math
from typing import Any, Callable, NamedTuple, Optional, Union

NAMESPACE = "mmirage"
#: Beam counter names, one of each per output (``<name>:<output_name>``), all in
#: :data:`NAMESPACE`. Tokens are summed over the requests built.
INPUT_TOKENS = "input_tokens"
INPUT_TOKENS_ESTIMATED = "input_tokens_estimated"  # the part of INPUT_TOKENS not exact
REQUESTS_COUNTED = "token_requests"
REQUESTS_ESTIMATED = "token_requests_estimated"
MAX_OUTPUT_TOKENS = "max_output_tokens"  # sum of the requests' output limits
REQUESTS_WITHOUT_OUTPUT_LIMIT = "requests_without_output_limit"
TOKEN_METRICS = (
    INPUT_TOKENS,
    INPUT_TOKENS_ESTIMATED,
    REQUESTS_COUNTED,
    REQUESTS_ESTIMATED,
    MAX_OUTPUT_TOKENS,
    REQUESTS_WITHOUT_OUTPUT_LIMIT,
)


def token_counters(stats: dict[str, int]) -> dict[str, int]:
    """The ``<metric>:<output>`` counters of :data:`TOKEN_METRICS` among ``stats``."""
    return {
        k: int(v) for k, v in stats.items() if ":" in k and k.partition(":")[0] in TOKEN_METRICS
    }


Request = Union[bytes, str, dict]


class TokenCount(NamedTuple):
    """The token count of one request.

    Attributes:
        input_tokens: prompt tokens the provider will bill (exact or estimated).
        max_output_tokens: the request's output limit (``max_tokens``,
            ``max_completion_tokens``, ``max_output_tokens``), None when it sets none.
        exact: True when ``input_tokens`` is exact (see the module docstring).
        notes: why the count is an estimate (empty when exact).
    """

    input_tokens: int
    max_output_tokens: Optional[int]
    exact: bool
    notes: tuple[str, ...] = ()


# --------------------------------------------------------------------------- encodings

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


#: The encodings, as tiktoken 0.14.0 defines them (``tiktoken_ext/openai_public.py``:
#: https://github.com/openai/tiktoken/blob/0.14.0/tiktoken_ext/openai_public.py):
#: the SHA-256 of the vocabulary file (``expected_hash``), the pre-tokenising pattern
#: and the special tokens. tiktoken's own constructors download the vocabulary at first
#: use, so the Encoding is built here from the same fields and a file shipped in a wheel.
_ENCODING_SPECS: dict[str, tuple[str, str, dict[str, int]]] = {
    "o200k_base": (
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    "cl100k_base": (
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501 (verbatim)
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
}

_ENCODERS: dict[str, Callable[[str], list]] = {}


def vocabulary_file(encoding: str) -> str:
    """The path of ``<encoding>.tiktoken.gz`` in the installed ``bpe-openai`` wheel, found
    without importing that package (its native extension alone is about 70 MB of RSS;
    only its data is used).

    Raises:
        KeyError: an encoding not in :data:`_ENCODING_SPECS`.
        FileNotFoundError: bpe-openai is not installed, or ships no such file.
    """
    import importlib.util
    import os

    if encoding not in _ENCODING_SPECS:
        raise KeyError(f"unknown encoding {encoding!r}")
    spec = importlib.util.find_spec("bpe_openai")  # a top-level package: not executed
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        path = os.path.join(folder, "data", f"{encoding}.tiktoken.gz")
        if os.path.exists(path):
            return path
    raise FileNotFoundError(
        f"{encoding}.tiktoken.gz not found in the bpe-openai package ({folders or 'not installed'})"
    )


def load_encoding(encoding: str) -> Any:
    """tiktoken's ``Encoding`` for ``o200k_base`` / ``cl100k_base``, built offline from the
    vocabulary bpe-openai ships, after checking it is byte for byte the file tiktoken
    downloads (its SHA-256 is tiktoken's ``expected_hash``). About 0.5 s and 75 MB.

    Raises:
        KeyError: an unknown encoding.
        FileNotFoundError: the vocabulary file is missing (see :func:`vocabulary_file`).
        ValueError: the file is not tiktoken's (a different SHA-256).
    """
    import gzip
    import hashlib

    import tiktoken

    expected, pat_str, special_tokens = _ENCODING_SPECS[encoding]
    path = vocabulary_file(encoding)
    with open(path, "rb") as f:
        contents = gzip.decompress(f.read())
    actual = hashlib.sha256(contents).hexdigest()
    if actual != expected:
        raise ValueError(f"{path}: SHA-256 {actual} is not tiktoken's {encoding} ({expected})")
    ranks = {}
    for line in contents.splitlines():  # tiktoken.load.load_tiktoken_bpe's format
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    del contents
    return tiktoken.Encoding(
        name=encoding, pat_str=pat_str, mergeable_ranks=ranks, special_tokens=special_tokens
    )


def count_text(text: str, encoding: str) -> int:
    """Tokens of ``text`` in ``encoding`` (``o200k_base`` or ``cl100k_base``), special
    tokens such as ``<|endoftext|>`` counted as the plain text they are (tiktoken's
    ``encode_ordinary``). The encoding is loaded once per process
    (:func:`load_encoding`).

    Raises:
        KeyError: an unknown encoding.
    """
    if not text:
        return 0
    fn = _ENCODERS.get(encoding)
    if fn is None:
        fn = _ENCODERS.setdefault(encoding, load_encoding(encoding).encode_ordinary)
    return len(fn(text))


@functools.lru_cache(maxsize=4096)
def _count_repeated(text: str, encoding: str) -> int:
    """:func:`count_text` memoised, for texts every request repeats (roles, schemas)."""
    return count_text(text, encoding)


# ------------------------------------------------------------------------------ images

_HEADER_B64_CHARS = 64 * 1024  # decode this much of a data URL first (48 KiB of image)


def image_size_from_url(url: str) -> Optional[tuple[int, int]]:
    """``(width, height)`` in pixels of a ``data:<mime>;base64,...`` image, read from its
    header only (the first 48 KiB, all of it when the header is further in); None for an
    http(s) URL or bytes that are not an image."""
    if not url.startswith("data:"):
        return None
    _, _, data = url.partition(",")
    return image_size_from_base64(data)


def image_size_from_base64(data: str) -> Optional[tuple[int, int]]:
    """``(width, height)`` of base64 image bytes (see :func:`image_size_from_url`)."""
    from PIL import Image, UnidentifiedImageError

    head = data[:_HEADER_B64_CHARS]
    head = head[: len(head) - len(head) % 4]
    for chunk in (head, data) if len(data) > len(head) else (data,):
        try:
            raw = base64.b64decode(chunk)
            with Image.open(io.BytesIO(raw)) as im:
                return int(im.size[0]), int(im.size[1])
        except (binascii.Error, UnidentifiedImageError, OSError, ValueError, SyntaxError):
            continue
        except Image.DecompressionBombError:
            return None
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


# ------------------------------------------------------------------- request counters


class _Tally:
    """Accumulates one request's count and the reasons it is an estimate."""

    def __init__(self) -> None:
        self.tokens = 0
        self.notes: list[str] = []

    def estimate(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _first_int(mapping: dict, *keys: str) -> Optional[int]:
    for key in keys:
        value = mapping.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def count_openai_request(request: dict[str, Any], model_hint: Optional[str] = None) -> TokenCount:
    """The :class:`TokenCount` of one OpenAI batch line (chat completions or Responses).

    Raises:
        ValueError: the line has no ``body`` object.
    """
    body = request.get("body")
    if not isinstance(body, dict):
        raise ValueError("an OpenAI batch line needs a 'body' object")
    model = str(body.get("model") or model_hint or "")
    tally = _Tally()
    encoding = encoding_for_model(model)
    if encoding is None:
        encoding = DEFAULT_ENCODING
        tally.estimate(f"model {model!r} has no known encoding ({DEFAULT_ENCODING} assumed)")
    if "messages" in body:
        _count_chat(body, model, encoding, tally)
        max_out = _first_int(body, "max_completion_tokens", "max_tokens")
    else:
        _count_responses(body, model, encoding, tally)
        max_out = _first_int(body, "max_output_tokens")
    for key, what in (("response_format", "a response_format"), ("tools", "tools")):
        value = body.get(key)
        if value and not (key == "response_format" and value.get("type") == "text"):
            tally.tokens += _count_repeated(_json_text(value), encoding)
            tally.estimate(f"{what} (counted as its JSON text)")
    text_format = (
        (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    )
    if isinstance(text_format, dict) and text_format.get("type") != "text":
        tally.tokens += _count_repeated(_json_text(text_format), encoding)
        tally.estimate("a text.format schema (counted as its JSON text)")
    return TokenCount(tally.tokens, max_out, not tally.notes, tuple(tally.notes))


def _count_chat(body: dict, model: str, encoding: str, tally: _Tally) -> None:
    # OpenAI Cookbook num_tokens_from_messages: 3 per message, 1 per name, 3 for the reply.
    for message in body.get("messages") or ():
        tally.tokens += 3
        for key, value in message.items():
            if key == "content" and isinstance(value, str):
                tally.tokens += count_text(value, encoding)
            elif isinstance(value, str):  # role, name: the same few strings every time
                tally.tokens += _count_repeated(value, encoding)
            elif key == "content" and isinstance(value, list):
                _count_parts(value, model, encoding, tally)
            elif value is not None:
                tally.tokens += count_text(_json_text(value), encoding)
                tally.estimate(f"a message field {key!r} that is not text")
            if key == "name":
                tally.tokens += 1
    tally.tokens += 3


def _count_responses(body: dict, model: str, encoding: str, tally: _Tally) -> None:
    tally.estimate("the Responses API's message framing is not documented (chat's assumed)")
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        tally.tokens += 3 + count_text(instructions, encoding) + count_text("developer", encoding)
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items or ():
        tally.tokens += 3
        for key, value in item.items():
            if key == "type":
                continue
            if isinstance(value, str):
                tally.tokens += count_text(value, encoding)
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
            tally.tokens += count_text(str(part.get("text") or ""), encoding)
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
            tally.tokens += count_text(_json_text(part), encoding)
            tally.estimate(f"a content part of type {kind!r}")


_ANTHROPIC_TEXT_ENCODING = "cl100k_base"


def count_anthropic_request(
    request: dict[str, Any], model_hint: Optional[str] = None
) -> TokenCount:
    """The estimated :class:`TokenCount` of one Anthropic batch request ``{custom_id,
    params}`` (text by ``cl100k_base`` as a proxy, images by the vision guide's rule).

    Raises:
        ValueError: the request has no ``params`` object.
    """
    params = request.get("params")
    if not isinstance(params, dict):
        raise ValueError("an Anthropic batch request needs a 'params' object")
    model = str(params.get("model") or model_hint or "")
    tally = _Tally()
    tally.estimate("Anthropic has no public tokenizer (cl100k_base used as a proxy)")
    enc = _ANTHROPIC_TEXT_ENCODING
    system = params.get("system")
    if isinstance(system, str):
        tally.tokens += count_text(system, enc)
    elif isinstance(system, list):
        tally.tokens += sum(count_text(str(b.get("text") or ""), enc) for b in system)
    for message in params.get("messages") or ():
        tally.tokens += 3
        content = message.get("content")
        if isinstance(content, str):
            tally.tokens += count_text(content, enc)
            continue
        for block in content or ():
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                tally.tokens += count_text(str(block.get("text") or ""), enc)
            elif kind == "image":
                source = block.get("source") or {}
                size = (
                    image_size_from_base64(str(source.get("data") or ""))
                    if source.get("type") == "base64"
                    else None
                )
                tally.tokens += anthropic_image_tokens(model, *(size or (None, None)))
            elif block is not None:
                tally.tokens += count_text(_json_text(block), enc)
    for key in ("tools", "output_config"):
        if params.get(key):
            tally.tokens += count_text(_json_text(params[key]), enc)
    return TokenCount(tally.tokens, _first_int(params, "max_tokens"), False, tuple(tally.notes))


#: provider name -> function(request dict, model hint) -> TokenCount. A provider without
#: one is counted as 0 estimated tokens (its summary says "no token counter").
REQUEST_COUNTERS: dict[str, Callable[[dict[str, Any], Optional[str]], TokenCount]] = {
    "openai": count_openai_request,
    "anthropic": count_anthropic_request,
}


def register_request_counter(
    provider: str, counter: Callable[[dict[str, Any], Optional[str]], TokenCount]
) -> None:
    """Count ``provider``'s requests with ``counter`` (for plugin providers)."""
    REQUEST_COUNTERS[provider] = counter


class AnthropicExactCounter:
    """Exact input tokens of Anthropic requests through the official SDK's
    ``messages.count_tokens`` (``POST /v1/messages/count_tokens``, free; rate-limited
    per minute like other calls, which the SDK's retries absorb). The key is read on
    first use with :func:`mmirage_beam.providers.base.resolve_credentials`
    (``ANTHROPIC_API_KEY`` or ``ANTHROPIC_API_KEY_FILE``)."""

    def __init__(self, base_url: Optional[str] = None) -> None:
        self.base_url = base_url
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "_client": None}

    def __call__(self, request: dict[str, Any]) -> int:
        if self._client is None:
            import anthropic

            from mmirage_beam.providers.anthropic_batch import AnthropicBatchAdapter
            from mmirage_beam.providers.base import resolve_credentials

            key = resolve_credentials(AnthropicBatchAdapter, "anthropic")["api_key"]
            self._client = anthropic.Anthropic(api_key=key, base_url=self.base_url)
        params = request.get("params") or {}
        kwargs = {k: params[k] for k in _COUNT_TOKENS_PARAMS if k in params}
        return int(self._client.messages.count_tokens(**kwargs).input_tokens)


# The count_tokens parameters a batch request's params can carry (anthropic-sdk-python
# 2.14 ``messages.count_tokens``); sampling settings and max_tokens are not among them.
_COUNT_TOKENS_PARAMS = ("model", "messages", "system", "tools", "tool_choice", "output_config")

#: provider name -> factory(base_url) of a callable(request dict) -> exact input tokens,
#: for ``exact_tokens``. A provider without one keeps its offline count.
EXACT_COUNTERS: dict[str, Callable[[Optional[str]], Callable[[dict[str, Any]], int]]] = {
    "anthropic": AnthropicExactCounter,
}


def _as_dict(request: Request) -> dict[str, Any]:
    if isinstance(request, dict):
        return request
    return json.loads(request)


class TokenCounter:
    """Counts each request of one processor, and records the counts as Beam counters.

    Build one per worker (e.g. in a DoFn's ``setup()``); it keeps only the provider name,
    the model and, for ``exact_tokens``, the base URL, so pickling it is safe. The
    tokenizer and any client are made on first use.

    ``count(request)`` -> :class:`TokenCount` for one request (line bytes/str or dict).
    ``record(output_name, request)`` counts it and increments, in namespace ``mmirage``,
    ``input_tokens:<output>``, ``input_tokens_estimated:<output>``,
    ``token_requests:<output>``, ``token_requests_estimated:<output>``,
    ``max_output_tokens:<output>`` and ``requests_without_output_limit:<output>``.

    With ``exact_tokens``, a provider in :data:`EXACT_COUNTERS` (Anthropic) has each
    request counted by its own endpoint (``messages.count_tokens``, key read on the
    worker); a call that fails after the SDK's retries falls back to the estimate.

    Raises (from ``count``):
        ValueError: the request is not JSON or not the provider's request shape.
        CredentialsError: ``exact_tokens`` without the provider's key on the worker.
    """

    def __init__(
        self,
        provider: str,
        model: Optional[str] = None,
        exact_tokens: bool = False,
        base_url: Optional[str] = None,
    ) -> None:
        self.provider = provider
        self.model = model
        self.exact_tokens = bool(exact_tokens)
        self.base_url = base_url
        self._counters: dict[str, Any] = {}
        factory = EXACT_COUNTERS.get(provider) if self.exact_tokens else None
        self._exact = factory(base_url) if factory is not None else None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_counters"] = {}
        return state

    def count(self, request: Request) -> TokenCount:
        req = _as_dict(request)
        counter = REQUEST_COUNTERS.get(self.provider)
        if counter is None:
            return TokenCount(0, None, False, (f"no token counter for {self.provider!r}",))
        estimate = counter(req, self.model)
        if self._exact is not None:
            try:
                return TokenCount(self._exact(req), estimate.max_output_tokens, True, ())
            except Exception as exc:  # noqa: BLE001 - an estimate beats a failed run
                from mmirage_beam.errors import CredentialsError

                if isinstance(exc, CredentialsError):
                    raise
                import logging

                logging.getLogger(__name__).warning(
                    "exact token count failed (%s); this request is estimated",
                    type(exc).__name__,
                )
        return estimate

    def record(self, output_name: str, request: Request) -> TokenCount:
        """Count ``request`` for the Beam counters of ``output_name`` (added at the next
        :meth:`flush`)."""
        tc = self.count(request)
        inc = self._inc
        inc(INPUT_TOKENS, output_name, tc.input_tokens)
        inc(REQUESTS_COUNTED, output_name, 1)
        if not tc.exact:
            inc(INPUT_TOKENS_ESTIMATED, output_name, tc.input_tokens)
            inc(REQUESTS_ESTIMATED, output_name, 1)
        if tc.max_output_tokens is None:
            inc(REQUESTS_WITHOUT_OUTPUT_LIMIT, output_name, 1)
        else:
            inc(MAX_OUTPUT_TOKENS, output_name, tc.max_output_tokens)
        return tc

    def _inc(self, name: str, output_name: str, value: int) -> None:
        # Summed here and added to the Beam counters by flush() (once per bundle): a
        # metrics lookup per request and counter costs more than the count itself.
        pending = self.__dict__.setdefault("_pending", {})
        key = (name, output_name)
        pending[key] = pending.get(key, 0) + value

    def pending_stats(self) -> dict[str, int]:
        """What :meth:`record` counted since the last flush, keyed like the Beam
        counters (``"<metric>:<output>"``)."""
        pending = self.__dict__.get("_pending") or {}
        return {f"{name}:{output}": value for (name, output), value in pending.items()}

    def flush(self) -> None:
        """Add what :meth:`record` counted since the last flush to the Beam counters;
        call it from the DoFn's ``finish_bundle``."""
        pending = self.__dict__.get("_pending")
        if not pending:
            return
        from apache_beam.metrics import Metrics

        for (name, output_name), value in pending.items():
            key = f"{name}:{output_name}"
            counter = self._counters.get(key)
            if counter is None:
                counter = self._counters[key] = Metrics.counter(NAMESPACE, key)
            counter.inc(value)
        pending.clear()


def token_counter_for(provider_config: Any) -> TokenCounter:
    """The :class:`TokenCounter` of a processor config (``provider``, ``model``,
    ``exact_tokens``, ``base_url``)."""
    return TokenCounter(
        provider_config.provider,
        getattr(provider_config, "model", None),
        exact_tokens=bool(getattr(provider_config, "exact_tokens", False)),
        base_url=getattr(provider_config, "base_url", None),
    )
