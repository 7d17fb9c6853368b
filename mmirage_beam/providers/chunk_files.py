"""Reading a staged chunk file (:mod:`mmirage_beam.run.staging`) for its upload.

:func:`open_chunk_file` opens one, local or ``scheme://``, its bytes as stored;
:func:`iter_chunk_lines` streams its request lines; :func:`staged_upload` hands the
adapters that upload a file a fresh file object (or the bytes) for each attempt. The
adapter contract (:mod:`mmirage_beam.providers.base`) re-exports the first two.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

__all__ = ["open_chunk_file", "iter_chunk_lines", "staged_upload"]


def open_chunk_file(path: str) -> Any:
    """A binary file object of the chunk file ``path`` (local or ``scheme://``), its
    bytes as stored (never decompressed, whatever its name)."""
    # Beam's file systems, imported on use: the providers (the registries, ``mmirage
    # --help``) stay importable without loading Beam.
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type="uncompressed")


def iter_chunk_lines(path: str) -> Iterator[bytes]:
    """The lines of the chunk file ``path``, each with its ``\n``, one at a time."""
    with open_chunk_file(path) as f:
        yield from f


@contextlib.contextmanager
def staged_upload(
    path: str, in_memory: Callable[[bytes], Any] = bytes
) -> Iterator[Callable[[], Any]]:
    """A callable giving the staged chunk file ``path`` afresh for each upload attempt,
    for the adapters that upload a file: a local file is opened anew (the previous
    attempt's closed), an object-store path (``scheme://``) is read into memory and
    passed through ``in_memory``. Every file it opened is closed on exit."""
    if "://" in path:

        def content() -> Any:
            with open_chunk_file(path) as f:
                return in_memory(f.read())

        yield content
        return
    opened: list[Any] = []

    def stream() -> Any:
        for f in opened:
            f.close()
        opened.clear()
        opened.append(open(path, "rb"))  # noqa: SIM115 - closed below
        return opened[0]

    try:
        yield stream
    finally:
        for f in opened:
            f.close()
