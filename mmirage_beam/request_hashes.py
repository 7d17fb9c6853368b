"""The hashes a receipt holds of its requests, computed as MMIRAGE does.

A leaf module (``json`` and ``hashlib`` only), so that what rebuilds requests to check
them (merge, reuse) and what writes receipts (:mod:`mmirage_beam.run.receipts`, which
re-exports every name here) share one definition without importing the run wing.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

__all__ = [
    "REQUEST_HASH_CHARS",
    "parsed_request_hash",
    "request_hash",
    "request_line_hash",
    "str_keys_only",
]


def request_hash(lines: Iterable[bytes]) -> str:
    """SHA-256 (hex) of a chunk's requests, computed as MMIRAGE does.

    MMIRAGE hashes ``json.dumps(requests, sort_keys=True, separators=(",", ":"))`` (ASCII
    escapes on), so receipts of either tool can be checked against re-built requests.
    Verified against the first receipt of the original tool in
    ``tests/data/mmirage_original`` (its later chunks do not reproduce from the exported
    requests, so only receipts with a ``run_id``, i.e. ours, are verified this way).
    """
    requests = [json.loads(line) for line in lines]
    text = json.dumps(requests, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: hex digits kept of each request's SHA-256 in ``request_hashes`` (64 bits: enough to
#: tell a changed request from an unchanged one, and 16 bytes per request in a receipt).
REQUEST_HASH_CHARS = 16


def request_line_hash(line: bytes) -> str:
    """The hash of one request line, as stored per custom_id in a receipt's
    ``request_hashes``: the first :data:`REQUEST_HASH_CHARS` hex digits of the SHA-256 of
    its canonical JSON (sorted keys, compact), so it does not depend on key order."""
    return parsed_request_hash(json.loads(line))


def parsed_request_hash(request: Any) -> str:
    """:func:`request_line_hash` of a request line already parsed (``json.loads`` of
    it, any JSON value)."""
    text = json.dumps(request, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:REQUEST_HASH_CHARS]


_JSON_SCALARS = frozenset((str, int, float, bool, type(None)))


def str_keys_only(value: Any) -> bool:
    """Whether ``value`` is plain JSON (dicts, lists, str, int, float, bool, None, no
    subclasses) whose every dict key is a ``str``.

    Only then is the dict's sorted encoding the line's canonical form: a line's keys are
    strings once parsed back, sorted as strings, while ``{10: x, 9: y}`` sorts as ints;
    anything else (a tuple, a subclass) is canonicalised from the line instead."""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (
                type(item) not in _JSON_SCALARS and not str_keys_only(item)
            ):
                return False
        return True
    if kind is list:
        for item in value:
            if type(item) not in _JSON_SCALARS and not str_keys_only(item):
                return False
        return True
    return kind in _JSON_SCALARS
