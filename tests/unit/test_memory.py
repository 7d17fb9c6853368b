"""mmirage_beam.transforms.memory: freed heap pages go back to the OS (glibc's malloc_trim)."""

import ctypes.util
import sys

import pytest

from mmirage_beam.transforms.memory import release_free_memory


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or "musl" in (ctypes.util.find_library("c") or ""),
    reason="malloc_trim is glibc's",
)
def test_memory_freed_between_live_objects_is_returned():
    # 200 MB of 2 KB strings (the C allocator's, not pymalloc's), every tenth kept: the
    # freed 18 KB runs sit between live blocks, where only malloc_trim can return them.
    blocks = [("x" * 2000) + str(i) for i in range(100_000)]
    kept = blocks[::10]
    del blocks
    before = _rss_kib()
    assert release_free_memory() is True
    after = _rss_kib()
    assert before - after > 100_000, (before, after)  # at least 100 of the ~180 MB freed
    assert len(kept) == 10_000


def test_without_a_c_library_trim_it_is_a_no_op(monkeypatch):
    from mmirage_beam.transforms import memory

    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)
    assert memory.release_free_memory() is False
