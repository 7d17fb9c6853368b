"""Give freed heap memory back to the operating system.

CPython hands allocations over 512 bytes (row dicts' long strings, pickled records,
request lines) to the C allocator. On glibc, memory freed in the middle of its heap stays
in the process (counted in its RSS) until ``malloc_trim`` returns the free pages: after
millions of rows with short-lived records between long-lived ones, that is a
high-water mark far above what is live (measured for the merge: docs/benchmarks.md, under the
scale benchmark).
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any, Optional


@functools.cache
def _malloc_trim() -> Optional[Any]:
    """glibc's ``malloc_trim`` from the symbols already loaded (no library search), or
    None where the C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc only (musl has none)
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Return the C heap's free pages to the OS (glibc ``malloc_trim(0)``, see
    ``man 3 malloc_trim``). A no-op returning False where the C library has none (macOS,
    musl, Windows). Costs about a millisecond per hundred MiB of heap: call it after
    freeing something large (spill buffers, a joined partition), not per row.

    Returns:
        True if memory was returned to the system.
    """
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
