"""Identifiers: run ids and custom_ids (DESIGN.md "Identifiers and files")."""

from __future__ import annotations

import functools
import hashlib
import re
import secrets
from typing import Callable

MAX_CUSTOM_ID_CHARS = 64  # Anthropic: ^[a-zA-Z0-9_-]{1,64}$ (Message Batches API)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


def new_run_id() -> str:
    """A fresh 6-hex-digit run id, e.g. ``"3aa41d"`` (MMIRAGE's format)."""
    return secrets.token_hex(3)


def check_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is 1-32 chars of ``[A-Za-z0-9_-]`` (it is part of file names).

    Raises:
        ValueError: otherwise.
    """
    if not _RUN_ID_RE.match(run_id or ""):
        raise ValueError(f"run id {run_id!r} must be 1-32 characters of A-Z, a-z, 0-9, '_', '-'")
    return run_id


def custom_id(output_name: str, modality: str, source_index: int) -> str:
    """``<output_name>-<modality>-<source_index>``, only ``[A-Za-z0-9_-]``, <= 64 chars.

    Characters outside the set become ``_``. When the id would be longer than 64
    characters, the output name is cut and an 8-hex-digit hash of the full id is added so
    distinct long names stay distinct: ``<cut name>~<hash>-<modality>-<index>`` with ``~``
    replaced by ``_``.
    """
    name = _UNSAFE.sub("_", output_name)
    tail = f"-{modality}-{source_index}"
    cid = name + tail
    if len(cid) <= MAX_CUSTOM_ID_CHARS:
        return cid
    return _cut_custom_id(output_name, name, tail)


@functools.lru_cache(maxsize=256)
def custom_id_maker(output_name: str, modality: str) -> Callable[[int], str]:
    """``source_index -> custom_id(output_name, modality, source_index)``, the same ids,
    for callers that build one per row: the name's unsafe characters are replaced once
    (cached per output and modality), and only an id over
    :data:`MAX_CUSTOM_ID_CHARS` goes through :func:`custom_id` to be cut."""
    prefix = f"{_UNSAFE.sub('_', output_name)}-{modality}-"

    def make(source_index: int) -> str:
        cid = prefix + str(source_index)
        if len(cid) > MAX_CUSTOM_ID_CHARS:
            return custom_id(output_name, modality, source_index)
        return cid

    return make


def _cut_custom_id(output_name: str, name: str, tail: str) -> str:
    """The id of a too-long ``name + tail``: the name cut, a hash of the full id added."""
    digest = hashlib.sha256(f"{output_name}{tail}".encode()).hexdigest()[:8]
    keep = MAX_CUSTOM_ID_CHARS - len(tail) - len(digest) - 1
    if keep < 1:
        raise ValueError(f"cannot build a custom_id of at most 64 chars for {output_name!r}")
    return f"{name[:keep]}_{digest}{tail}"
