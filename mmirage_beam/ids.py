"""Identifiers: run ids and custom_ids (DESIGN.md "Identifiers and files")."""

from __future__ import annotations

import hashlib
import re
import secrets

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


def custom_id_prefix(output_name: str, modality: str) -> str:
    """``<output_name>-<modality>-`` as :func:`custom_id` writes it (unsafe characters
    replaced): ``custom_id_prefix(o, m) + str(i)`` is ``custom_id(o, m, i)`` whenever it
    has at most :data:`MAX_CUSTOM_ID_CHARS` characters (a longer one is cut by
    :func:`custom_id`). For callers that build many ids of one output."""
    return f"{_UNSAFE.sub('_', output_name)}-{modality}-"


def _cut_custom_id(output_name: str, name: str, tail: str) -> str:
    """The id of a too-long ``name + tail``: the name cut, a hash of the full id added."""
    digest = hashlib.sha256(f"{output_name}{tail}".encode()).hexdigest()[:8]
    keep = MAX_CUSTOM_ID_CHARS - len(tail) - len(digest) - 1
    if keep < 1:
        raise ValueError(f"cannot build a custom_id of at most 64 chars for {output_name!r}")
    return f"{name[:keep]}_{digest}{tail}"
