"""Paths resolved once, in the launcher, before a pipeline is built.

Workers of a remote or portable runner run in another process, often in another folder
or on another machine: a relative path would be resolved in *their* working directory.
So every path of the config and of the command line is made absolute (or kept as a URI,
e.g. ``gs://bucket/x``) here, against the launcher's current working directory, which is
what MMIRAGE does with relative paths too.
"""

from __future__ import annotations

import os
import re
from typing import Optional

_URI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(path: str) -> bool:
    """``gs://b/x``, ``s3://...``, ``mem://...``, ``http(s)://...``: a URI, not a local path."""
    return bool(_URI_RE.match(path))


def resolve_path(path: str, base_dir: Optional[str] = None) -> str:
    """An absolute local path or a URI for ``path``.

    Args:
        path: as written in the config or on the command line; ``~`` is expanded.
        base_dir: what a relative path is relative to (default: the current working
            directory of the calling process, i.e. the launcher).

    Returns:
        ``path`` unchanged when it is a URI or empty, else its absolute, normalised form.
    """
    if not path or is_uri(path):
        return path
    path = os.path.expanduser(path)
    if os.path.isabs(path):
        return os.path.normpath(path)
    return os.path.normpath(os.path.join(base_dir or os.getcwd(), path))


def path_argument(value: str) -> str:
    """argparse ``type=`` for path flags: :func:`resolve_path`, refusing an empty or blank
    value (an unset shell variable must not become the current folder or ``/``).

    Raises:
        argparse.ArgumentTypeError: for an empty or blank value (argparse exits 2).
    """
    import argparse

    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return resolve_path(value)


def resolve_optional(path: Optional[str], base_dir: Optional[str] = None) -> Optional[str]:
    """:func:`resolve_path` that passes ``None`` through."""
    return None if path is None else resolve_path(path, base_dir)


def is_local(path: str) -> bool:
    """Whether ``path`` is on the local disk (not a URI of another filesystem)."""
    return not is_uri(path) or path.startswith("file://")
