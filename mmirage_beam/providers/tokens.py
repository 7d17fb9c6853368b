"""What the adapters' token counters share (``providers/<name>/tokens.py``).

Counting is the adapter's (:class:`~mmirage_beam.providers.base.BatchSubmissionAdapter`):
``count_request_tokens`` (offline, a pure function of the line, so it gives the same
answer on every worker) and, with ``exact_tokens``, ``exact_token_counter`` (the
provider's own free counting endpoint); :class:`mmirage_beam.providers.tokens.TokenCounter`
asks it for each request and keeps the Beam counters.

This module holds :class:`TokenCount` (one request's count), tiktoken's byte-pair
encodings (``o200k_base``, ``cl100k_base``) built offline from the vocabulary files a
wheel ships (byte-identical to tiktoken's published files: their SHA-256 is checked
against tiktoken's ``expected_hash`` when loaded), so nothing is downloaded at first
use; :func:`count_text`; the size of a base64 image read from its header (Pillow reads
the size without decoding pixels); and :class:`Tally`, one request's running count.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import json
import re
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional

__all__ = [
    "TokenCount",
    "vocabulary_file",
    "load_encoding",
    "TextTokens",
    "PIECE_CHARS",
    "RUN_CHARS",
    "text_tokens",
    "count_text",
    "repeated_tokens",
    "count_repeated",
    "PROXY_ENCODING",
    "count_proxy_text",
    "image_size_from_url",
    "image_size_from_base64",
    "Tally",
    "RUN_NOTE",
    "json_text",
    "first_int",
    "request_body",
    "count_messages",
]


class TokenCount(NamedTuple):
    """The token count of one request.

    Attributes:
        input_tokens: prompt tokens the provider will bill (exact or estimated).
        max_output_tokens: the request's output limit (``max_tokens``,
            ``max_completion_tokens``, ``max_output_tokens``), None when it sets none.
        exact: True when ``input_tokens`` is exact (see the module docstring).
        notes: why the count is an estimate (empty when exact).
        unknown: True when the provider cannot count the request at all
            (``input_tokens`` is then 0 and means nothing; summaries say "unknown").
    """

    input_tokens: int
    max_output_tokens: Optional[int]
    exact: bool
    notes: tuple[str, ...] = ()
    unknown: bool = False


# --------------------------------------------------------------------------- encodings


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
    # tiktoken.load.load_tiktoken_bpe's format, "<base64 token> <rank>" a line. The
    # comprehension over binascii (what base64.b64decode calls, without its per-call
    # argument checks) halves the 0.4 s every process that counts tokens pays.
    a2b = binascii.a2b_base64
    ranks = {a2b(t): int(r) for t, r in map(bytes.split, filter(None, contents.splitlines()))}
    del contents
    return tiktoken.Encoding(
        name=encoding, pat_str=pat_str, mergeable_ranks=ranks, special_tokens=special_tokens
    )


class TextTokens(NamedTuple):
    """The token count of one text (:func:`text_tokens`).

    Attributes:
        tokens: the number of tokens.
        exact: False when a run of more than :data:`PIECE_CHARS` characters without a
            place where the pre-tokeniser always splits had to be cut at a fixed length,
            which can change the count by about one token per cut.
    """

    tokens: int
    exact: bool


#: No tiktoken call sees more than this many characters (the memory bound of counting).
PIECE_CHARS = 8192
#: A stretch of :data:`PIECE_CHARS` characters without a safe boundary is counted in
#: pieces of this many characters (an estimate). tiktoken's BPE is super-linear in the
#: length of one pre-tokenised piece (``o200k_base``: ``"x" * 20_000_000`` in one call
#: took 16.7 s and 1.06 GB); cut at 512 characters, such a run costs per character about
#: what prose costs (``benchmarks/bench_tokens.py`` prints both).
RUN_CHARS = 512
_TAIL_CHARS = (256, 2048)  # how far back from a piece's end boundaries are looked for first

# Where a text can be cut without changing its count: before a character both
# encodings' pre-tokenising patterns (_ENCODING_SPECS) always start a new piece at,
# whatever precedes the letter or number before it. Before a space (U+0020) that follows
# a character that is not whitespace: no pattern takes a space after a non-space (only
# the whitespace alternatives hold spaces, and they hold nothing else; a word's optional
# leading character can be a space, but only at its start). Before a tab, a line break or an
# ASCII punctuation character other than the apostrophe (o200k_base's contractions ``'s``,
# ``'t``...) or a common CJK punctuation mark, when it follows a letter or a digit: a
# letter run (o200k_base: with marks) and a run of up to three digits end there. The
# patterns have no lookbehind, so the piece after the cut is pre-tokenised as it is in
# the whole text; ahead of the cut, the last piece ends with a character that is not
# whitespace, so the patterns' lookaheads (``\s+(?!\S)``, ``\s++$``) do not apply to
# it. Counts add up across such a cut exactly (tests/unit/test_costs.py checks it against
# whole-text counts).
_CANDIDATES = re.compile(
    r"[ \t\n\r!-&(-/:-@\[-`{-~\u3001\u3002\u300c-\u300f\uff01\uff08\uff09\uff0c\uff1a\uff1b\uff1f]"
)


def _is_boundary(text: str, i: int) -> bool:
    """Whether the text can be cut before ``text[i]`` (``i`` a match of _CANDIDATES)."""
    before = text[i - 1]
    if text[i] == " ":
        return not before.isspace()
    return before.isalnum()


def _last_boundary(text: str, start: int, end: int) -> Optional[int]:
    """The last safe cut in ``(start, end]`` (a cut before ``text[i]``), or None."""
    hi = end + 1
    for back in (*_TAIL_CHARS, end - start):
        lo = max(start + 1, end - back)
        if lo >= hi:
            continue
        found = None
        for m in _CANDIDATES.finditer(text, lo, hi):
            if _is_boundary(text, m.start()):
                found = m.start()
        if found is not None:
            return found
        hi = lo
        if lo == start + 1:
            break
    return None


def _encoder(encoding: str) -> Callable[[str], list]:
    fn = _ENCODERS.get(encoding)
    if fn is None:
        fn = _ENCODERS.setdefault(encoding, load_encoding(encoding).encode_ordinary)
    return fn


def text_tokens(
    text: str, encoding: str, piece_chars: int = PIECE_CHARS, run_chars: int = RUN_CHARS
) -> TextTokens:
    """Tokens of ``text`` in ``encoding`` (``o200k_base`` or ``cl100k_base``), special
    tokens such as ``<|endoftext|>`` counted as the plain text they are (tiktoken's
    ``encode_ordinary``), in time linear in ``len(text)``.

    The text is counted in pieces of at most ``piece_chars`` characters, each cut at the
    last place of its window where the count does not change (see ``_CANDIDATES``), so
    prose, code, JSON and CJK text count exactly what one tiktoken call on the whole
    text counts. Only a window of ``piece_chars`` characters without such a place (a
    base64 blob without ``+``/``/``, ``"x" * N``, a long run of one symbol or of spaces)
    is cut into pieces of ``run_chars`` characters: then the count is labelled an
    estimate (``exact`` False), off by about one token per cut.

    Memory: beyond ``text`` itself and the encoding (loaded once per process,
    :func:`load_encoding`), at most one piece of ``piece_chars`` characters is copied and
    encoded at a time: the piece, its UTF-8 bytes inside tiktoken and its token list, a
    few hundred KiB at the defaults (8192 characters), whatever the length of ``text``.

    Raises:
        KeyError: an unknown encoding.
        ValueError: ``piece_chars`` or ``run_chars`` below 1, or ``run_chars`` above
            ``piece_chars``.
    """
    if not text:
        return TextTokens(0, True)
    if piece_chars < 1 or run_chars < 1 or run_chars > piece_chars:
        raise ValueError("need 1 <= run_chars <= piece_chars")
    fn = _encoder(encoding)
    n = len(text)
    if n <= piece_chars:
        return TextTokens(len(fn(text)), True)
    tokens, exact, pos = 0, True, 0
    while pos < n:
        end = pos + piece_chars
        if end >= n:
            tokens += len(fn(text[pos:]))
            break
        cut = _last_boundary(text, pos, end)
        if cut is not None:
            tokens += len(fn(text[pos:cut]))
            pos = cut
            continue
        exact = False  # no safe cut in the whole window: fixed-length pieces
        for at in range(pos, end, run_chars):
            tokens += len(fn(text[at : min(at + run_chars, end)]))
        pos = end
    return TextTokens(tokens, exact)


def count_text(text: str, encoding: str) -> int:
    """The number of tokens of :func:`text_tokens` (which also says whether the count
    is exact). The encoding is loaded once per process (:func:`load_encoding`).

    Raises:
        KeyError: an unknown encoding.
    """
    return text_tokens(text, encoding).tokens


@functools.lru_cache(maxsize=4096)
def repeated_tokens(text: str, encoding: str) -> TextTokens:
    """:func:`text_tokens` memoised, for texts every request repeats (roles, schemas)."""
    return text_tokens(text, encoding)


def count_repeated(text: str, encoding: str) -> int:
    """The number of tokens of :func:`repeated_tokens`."""
    return repeated_tokens(text, encoding).tokens


#: the encoding used as a labelled proxy for providers without a public tokenizer
PROXY_ENCODING = "cl100k_base"


def count_proxy_text(text: str) -> int:
    """Tokens of ``text`` in :data:`PROXY_ENCODING`: an estimate for a provider that
    publishes no tokenizer (label the count as such)."""
    return count_text(text, PROXY_ENCODING)


# ------------------------------------------------------------------------------ images

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


# ---------------------------------------------------------------- counting helpers


# ------------------------------------------------------------------- request counters


class Tally:
    """Accumulates one request's count (``tokens``) and the reasons it is an estimate
    (``notes``), for the adapters' counters."""

    def __init__(self) -> None:
        self.tokens = 0
        self.notes: list[str] = []

    def estimate(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def text(self, text: str, encoding: str, repeated: bool = False) -> None:
        """Add the tokens of ``text`` (:func:`text_tokens`, memoised when ``repeated``);
        a count cut at a fixed length makes the request's count an estimate."""
        counted = repeated_tokens(text, encoding) if repeated else text_tokens(text, encoding)
        self.tokens += counted.tokens
        if not counted.exact:
            self.estimate(RUN_NOTE)


#: why a request's count is an estimate when a long unbroken run was cut (Tally.text)
RUN_NOTE = (
    f"text with more than {PIECE_CHARS} characters without a space or punctuation "
    f"(counted in pieces of {RUN_CHARS})"
)


def json_text(value: Any) -> str:
    """Compact JSON text of ``value`` (how a schema or a tool is counted as text)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def first_int(mapping: dict, *keys: str) -> Optional[int]:
    """The first of ``keys`` in ``mapping`` whose value is an int (not a bool), or None."""
    for key in keys:
        value = mapping.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def request_body(request: Mapping[str, Any], key: str, what: str) -> dict[str, Any]:
    """``request[key]``: the body of one line of a batch input file (``body``,
    ``params``, ``modelInput``...), which a counter reads.

    Raises:
        ValueError: it is not an object (``"<what> needs a '<key>' object"``; ``what``
            names the line, e.g. "a Mistral batch line").
    """
    body = request.get(key)
    if not isinstance(body, dict):
        raise ValueError(f"{what} needs a {key!r} object")
    return body


def count_messages(
    messages: Iterable[Mapping[str, Any]],
    encoding: str,
    per_message: int,
    image_type: str,
    image_tokens: Callable[[Mapping[str, Any]], int],
) -> int:
    """Estimated tokens of chat ``messages`` (``{"role", "content"}``, the content a
    string or a list of parts): ``per_message`` tokens each (the control tokens around
    it), the text (a string content, or each ``text`` part's ``text``) by
    :func:`count_text` with ``encoding``, and ``image_tokens(part)`` for each part of
    type ``image_type``; other parts count nothing."""
    tokens = 0
    for message in messages:
        tokens += per_message
        content = message.get("content")
        if isinstance(content, str):
            tokens += count_text(content, encoding)
            continue
        for part in content or ():
            if part.get("type") == "text":
                tokens += count_text(str(part.get("text") or ""), encoding)
            elif part.get("type") == image_type:
                tokens += image_tokens(part)
    return tokens
