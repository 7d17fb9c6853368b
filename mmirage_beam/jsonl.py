"""Reading JSONL the one safe way: split on ``b"\\n"`` only, decode each line on its own.

``str.splitlines()`` also splits on U+2028, U+2029, U+0085, ``\\x1c``-``\\x1e``, ``\\x0b``,
``\\x0c`` and ``\\r`` (Python docs, "str.splitlines"), which ``json.dumps(...,
ensure_ascii=False)`` leaves raw and which do occur in model output and in provider
error messages. JSON Lines (https://jsonlines.org) separates records by ``\\n`` only, so
every JSONL file this tool reads (receipts, errors files, provider results, invalid-rows
files, id lists) goes through :func:`iter_raw_lines`. A trailing ``\\r`` is dropped
(``\\r\\n`` files), as JSON allows it as whitespace anyway.
"""

from __future__ import annotations

import json
import re
from typing import Any, BinaryIO, Callable, Iterable, Iterator, NamedTuple, Optional

_READ_BLOCK = 1 << 20  # bytes read at a time from a file


class RawLine(NamedTuple):
    """One line of a byte stream.

    Attributes:
        number: 1-based line number in the stream.
        offset: byte offset of the line's first byte in the stream.
        data: the line's bytes, without its ``\\n`` (nor a trailing ``\\r``).
        length: bytes the line takes in the stream, its ``\\n`` included.
    """

    number: int
    offset: int
    data: bytes
    length: int = -1

    @property
    def end(self) -> int:
        """Offset just past the line's ``\\n`` (or its last byte)."""
        return self.offset + self.length


def iter_raw_lines(chunks: Iterable[bytes]) -> Iterator[RawLine]:
    """Split a stream of byte blocks into lines on ``b"\\n"`` only.

    Holds at most one line plus one block in memory. Blank lines are yielded too (the
    caller decides); a last line without ``\\n`` is yielded as well.

    Args:
        chunks: byte blocks of any size (e.g. ``httpx.Response.iter_bytes()``).
    """
    number = 0
    offset = 0  # offset of the first byte of ``pending``
    pending = b""
    for block in chunks:
        if not block:
            continue
        pending += block
        start = 0
        while True:
            end = pending.find(b"\n", start)
            if end < 0:
                break
            number += 1
            yield RawLine(number, offset + start, _strip_cr(pending[start:end]), end + 1 - start)
            start = end + 1
        offset += start
        pending = pending[start:]
    if pending:
        yield RawLine(number + 1, offset, _strip_cr(pending), len(pending))


def _strip_cr(data: bytes) -> bytes:
    return data[:-1] if data.endswith(b"\r") else data


def iter_file_blocks(f: BinaryIO, block_size: int = _READ_BLOCK) -> Iterator[bytes]:
    """The blocks of an open binary file, ``block_size`` bytes at a time."""
    while True:
        block = f.read(block_size)
        if not block:
            return
        yield block


def iter_jsonl_file(path: str) -> Iterator[tuple[RawLine, Any]]:
    """``(line, parsed JSON)`` for every non-blank line of ``path`` (Beam FileSystems).

    Raises:
        ValueError: a line is not UTF-8 or not JSON; the message names the file and the
            line number.
    """
    from mmirage_beam.io.filesystems import FileSystems

    with FileSystems.open(path, compression_type="uncompressed") as f:
        for line in iter_raw_lines(iter_file_blocks(f)):
            if not line.data.strip():
                continue
            yield line, parse_line(line, path)


def parse_line(line: RawLine, where: str) -> Any:
    """The JSON value of one line.

    Raises:
        ValueError: not UTF-8 or not JSON, naming ``where`` and the line number.
    """
    try:
        return json.loads(line.data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{where} line {line.number}: not valid UTF-8 (byte {exc.start})"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} line {line.number}: not valid JSON ({exc.msg})") from None


def read_jsonl(path: str, limit: Optional[int] = None) -> list[dict[str, Any]]:
    """The records of a JSONL file (blank lines skipped); ``[]`` when it is absent.

    Raises:
        ValueError: a line is not UTF-8 or not JSON (names the file and line).
    """
    from mmirage_beam.io.filesystems import FileSystems

    if not FileSystems.exists(path):
        return []
    out = []
    for _line, value in iter_jsonl_file(path):
        out.append(value)
        if limit is not None and len(out) >= limit:
            break
    return out


def read_text_lines(path: str) -> list[str]:
    """The non-blank lines of a UTF-8 text file (e.g. an id list), split on ``\\n`` only,
    stripped; ``[]`` when it is absent."""
    from mmirage_beam.io.filesystems import FileSystems

    if not FileSystems.exists(path):
        return []
    with FileSystems.open(path, compression_type="uncompressed") as f:
        return [
            text
            for line in iter_raw_lines(iter_file_blocks(f))
            if (text := line.data.decode("utf-8").strip())
        ]


# ------------------------------------------------------------------ lone surrogates

# A UTF-16 surrogate code point. Python's json decodes the escape "\ud800" (valid JSON)
# to a str holding one, which has no UTF-8 encoding; a paired escape ("\ud83d\ude00")
# decodes to the one character it stands for, so a surrogate left in a str is lone.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate_at(value: Any, path: str = "") -> Optional[str]:
    """Where the first lone UTF-16 surrogate of ``value`` is, or None.

    ``value`` is a JSON value (str, list, dict; keys are looked at too). The answer is a
    readable place, its characters escaped: ``'\\ud800' at character 4``,
    ``[2].name: '\\udc00' at character 0``, ``the key '\\udc00key'``; ``path`` is the
    prefix it starts with (the caller's own place).
    """
    if isinstance(value, str):
        if value.isascii():
            return None
        m = _LONE_SURROGATE.search(value)
        if m is None:
            return None
        at = f"{ascii(m.group())} at character {m.start()}"
        return f"{path}: {at}" if path else at
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and lone_surrogate_at(k) is not None:
                return f"{path + ': ' if path else ''}the key {ascii(k)}"
            found = lone_surrogate_at(v, f"{path}.{k}" if path else str(k))
            if found is not None:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = lone_surrogate_at(v, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def json_encoder(
    *,
    ensure_ascii: bool = True,
    sort_keys: bool = False,
    separators: tuple[str, str] = (", ", ": "),
    default: Optional[Callable[[Any], Any]] = None,
) -> Callable[[Any], str]:
    """``obj -> json.dumps(obj, ensure_ascii=..., sort_keys=..., separators=...,
    default=...)``, the same text, through one C encoder made here once (when the
    interpreter has one): ``json.dumps`` with any argument builds a ``JSONEncoder`` and
    a C encoder per call, Python work that costs more than encoding a 1 KB request. One
    difference: no circular-reference check (a circular value recurses until
    ``RecursionError`` instead of ``ValueError``); what this encodes (requests, rows,
    records built from JSON) holds none. Safe to share between threads (the encoder
    keeps no state between calls)."""
    from json.encoder import c_make_encoder, encode_basestring, encode_basestring_ascii

    if default is None:
        default = json.JSONEncoder().default  # TypeError: "... is not JSON serializable"
    if c_make_encoder is None:
        py = json.JSONEncoder(
            ensure_ascii=ensure_ascii, sort_keys=sort_keys, separators=separators, default=default
        )
        return py.encode
    item_sep, key_sep = separators
    strings = encode_basestring_ascii if ensure_ascii else encode_basestring
    enc = c_make_encoder(None, default, strings, None, key_sep, item_sep, sort_keys, False, True)
    join = "".join

    def encode(obj: Any) -> str:
        if isinstance(obj, str):  # as JSONEncoder.encode: a bare string
            return strings(obj)
        return join(enc(obj, 0))

    return encode


_LINE_ENCODERS: dict[Any, Callable[[Any], str]] = {}


def json_line(obj: Any, default: Optional[Callable[[Any], Any]] = None) -> bytes:
    """``obj`` as one UTF-8 JSON line (``json.dumps(..., ensure_ascii=False)`` plus
    ``\\n``), a lone surrogate in any of its strings written as the ``\\udXXX`` escape a
    JSON source holds it as, so such a row is written back as it was read (one escape
    per surrogate; every other character as before, byte for byte).

    Raises:
        TypeError, ValueError: as ``json.dumps`` (a value it cannot encode).
    """
    encode = _LINE_ENCODERS.get(default)
    if encode is None:
        encode = json_encoder(ensure_ascii=False, default=default)
        if len(_LINE_ENCODERS) < 64:  # a few module-level defaults, kept
            _LINE_ENCODERS[default] = encode
    text = encode(obj) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Surrogates can only sit inside JSON strings, where their escape means the same.
        return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")
