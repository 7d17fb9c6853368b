"""Request templates: a text request's line and canonical JSON without encoding its dict.

Every text request of one output has the same shape: the adapter's dict with the
custom_id and the rendered prompt as string values, and everything else from the config.
:class:`RequestTemplate` encodes that dict once, with sentinel strings in place of the
custom_id and the prompt, and keeps the encoded text around them; a row's line and
canonical JSON are then the template's pieces joined with the row's custom_id and prompt
encoded as JSON strings, byte for byte what encoding the row's dict gives (so the request
hashes, the staged line, the export and the upload are unchanged).

A template is made only for an adapter that says its text requests hold the prompt
verbatim (``BatchSubmissionAdapter.verbatim_prompt``) and encodes lines the base class's
way, and only when two probe requests (different lengths, quotes, backslashes, control
and non-ASCII characters) built by the adapter encode exactly as their splices do; any
other output is encoded from its dict as before.
"""

from __future__ import annotations

import uuid
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any, Callable, Optional

from mmirage_beam.request_hashes import str_keys_only

__all__ = ["RequestTemplate", "json_string_bytes"]

#: the probes' prompts and custom_ids: JSON escapes of every kind, and non-ASCII text
_PROBES = (
    ('Probe "one"\\ with\nnew lines\tand é ü 漢字 \u2028 \x01 ' * 3, "probe-text-1"),
    ("p2 ✓ 'q' \"\" \\\\ \r\n", "probe_text-22"),
)


class RequestTemplate:
    """The encoded line and canonical JSON of one output's text requests, with holes for
    the custom_id and the prompt.

    :meth:`encode` ``(custom_id, prompt) -> (line, canonical)``: ``line`` is the
    adapter's ``serialize_request`` of the request (compact UTF-8 JSON + ``\\n``) and
    ``canonical`` its sorted-keys ASCII JSON (the bytes the request hashes cover).
    """

    def __init__(self, line: str, canonical: str, cid_mark: str, prompt_mark: str) -> None:
        self._line = _pieces(line, encode_basestring(cid_mark), encode_basestring(prompt_mark))
        self._canon = _pieces(
            canonical, encode_basestring_ascii(cid_mark), encode_basestring_ascii(prompt_mark)
        )

    @classmethod
    def probe(
        cls,
        build: Callable[[str, str], dict[str, Any]],
        encode_line: Callable[[dict[str, Any]], bytes],
        encode_canonical: Callable[[Any], str],
    ) -> Optional[RequestTemplate]:
        """The template of the requests ``build(custom_id, prompt)`` makes, or None when
        they are not templates: a sentinel is not a whole string value of the request
        (cut, embedded in another string, or missing), a key is not a ``str``, or a probe
        request encodes other than its splice.

        Args:
            build: ``(custom_id, prompt) -> request dict``, the adapter's text request.
            encode_line: the adapter's ``serialize_request``.
            encode_canonical: sorted-keys, compact, ASCII JSON of a request.
        """
        tag = uuid.uuid4().hex
        cid_mark, prompt_mark = f"mmirage-cid-{tag}", f"mmirage-prompt-{tag}"
        try:
            request = build(cid_mark, prompt_mark)
            if not str_keys_only(request):
                return None
            line = encode_line(request)
            if not line.endswith(b"\n"):
                return None
            template = cls(line.decode("utf-8"), encode_canonical(request), cid_mark, prompt_mark)
        except Exception:  # noqa: BLE001 - _NotATemplate, or the adapter failed: no template
            return None
        for prompt, cid in _PROBES:
            try:
                request = build(cid, prompt)
                want = (encode_line(request), encode_canonical(request).encode("ascii"))
            except Exception:  # noqa: BLE001 - the probe itself failed: no template
                return None
            if not str_keys_only(request) or template.encode(cid, prompt) != want:
                return None
        return template

    def encode(self, custom_id: str, prompt: str) -> tuple[bytes, bytes]:
        """``(line, canonical)`` of the request for ``custom_id`` and ``prompt`` (a
        valid UTF-8 ``str``)."""
        cid_line, cid_canon = json_string_bytes(custom_id)
        prompt_line, prompt_canon = json_string_bytes(prompt)
        return (
            _fill(self._line, cid_line, prompt_line),
            _fill(self._canon, cid_canon, prompt_canon),
        )


#: what JSON escapes in a string, besides ``"``, ``\``, ``\n``, ``\r``, ``\t``: the other
#: control characters (``json.encoder.ESCAPE``), and DEL in ASCII output (``ESCAPE_ASCII``)
_RARE_ESCAPES = bytes(c for c in range(0x20) if c not in b"\n\r\t") + b"\x7f"


def json_string_bytes(text: str) -> tuple[bytes, bytes]:
    """``text`` as a JSON string, UTF-8: ``(json.encoder.encode_basestring(text),
    json.encoder.encode_basestring_ascii(text))``, encoded, the same bytes.

    A string whose only characters to escape are ``"``, ``\\``, newline, carriage
    return and tab (most prompts) is escaped by five ``bytes.replace`` on its UTF-8
    form, which is one pass of memchr each: CPython's own escaping writes the output a
    character at a time (about 4 ns a character for the UTF-8 form, 2.4 for the ASCII
    one, measured on 573-character GSM8K prompts). An ASCII string gets one escaping
    for both forms; anything else is left to the ``json`` module.
    """
    raw = text.encode("utf-8")
    if len(raw.translate(None, _RARE_ESCAPES)) != len(raw):  # a rare escape (or DEL)
        return (
            encode_basestring(text).encode("utf-8"),
            encode_basestring_ascii(text).encode("ascii"),
        )
    escaped = (
        b'"'
        + raw.replace(b"\\", b"\\\\")
        .replace(b'"', b'\\"')
        .replace(b"\n", b"\\n")
        .replace(b"\r", b"\\r")
        .replace(b"\t", b"\\t")
        + b'"'
    )
    if text.isascii():
        return escaped, escaped
    return escaped, encode_basestring_ascii(text).encode("ascii")


class _NotATemplate(Exception):
    """A sentinel is not only ever a whole string value of the encoded request."""


def _pieces(text: str, cid_json: str, prompt_json: str) -> tuple[list[bytes], list[int], list[int]]:
    """``text`` split around every whole-string occurrence of the two sentinels:
    ``(pieces, custom_id slots, prompt slots)``; the slots are indices into pieces.

    Raises:
        _NotATemplate: a sentinel also appears in some other form (part of a string).
    """
    pieces: list[str] = []
    cid_slots: list[int] = []
    prompt_slots: list[int] = []
    for i, chunk in enumerate(text.split(prompt_json)):
        if i:
            prompt_slots.append(len(pieces))
            pieces.append("")
        for j, part in enumerate(chunk.split(cid_json)):
            if j:
                cid_slots.append(len(pieces))
                pieces.append("")
            pieces.append(part)
    bare = (cid_json[1:-1], prompt_json[1:-1])
    if not prompt_slots or any(m in p for p in pieces for m in bare):
        raise _NotATemplate(text)
    return [p.encode("utf-8") for p in pieces], cid_slots, prompt_slots


def _fill(template: tuple[list[bytes], list[int], list[int]], cid: bytes, prompt: bytes) -> bytes:
    pieces, cid_slots, prompt_slots = template
    out = pieces.copy()
    for i in cid_slots:
        out[i] = cid
    for i in prompt_slots:
        out[i] = prompt
    return b"".join(out)
