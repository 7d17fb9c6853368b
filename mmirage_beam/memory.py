"""Give freed heap memory back to the operating system.

CPython hands allocations over 512 bytes (row dicts' long strings, pickled records,
request lines) to the C allocator. On glibc, memory freed in the middle of its heap stays
in the process (counted in its RSS) until ``malloc_trim`` returns the free pages: after
millions of rows with short-lived records between long-lived ones, that is a
high-water mark far above what is live (measured by ``benchmarks/bench_scale.py``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any, Optional

_TRIM: Optional[Any] = None
_LOADED = False


def _malloc_trim() -> Optional[Any]:
    global _TRIM, _LOADED
    if not _LOADED:
        _LOADED = True
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                trim = libc.malloc_trim  # glibc only (musl has none)
            except (OSError, AttributeError):
                trim = None
            if trim is not None:
                trim.argtypes = [ctypes.c_size_t]
                trim.restype = ctypes.c_int
                _TRIM = trim
    return _TRIM


def release_free_memory() -> bool:
    """Return the C heap's free pages to the OS (glibc ``malloc_trim(0)``, see
    ``man 3 malloc_trim``). A no-op returning False where the C library has none (macOS,
    musl, Windows). Costs about a millisecond per hundred MiB of heap: call it after
    freeing something large (a spill buffer, a joined partition), not per row.

    Returns:
        True if memory was returned to the system.
    """
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
