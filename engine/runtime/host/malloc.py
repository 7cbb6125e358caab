"""glibc's process-wide malloc settings that loading a model changes, and the heap trim (Linux).

Loading an Amber graph forms its weights in numpy (engine/runtime/prefold.py): while it does, freed
intermediates stay in the heap (`keep_heap`); afterwards the trim threshold is restored, the free
heap pages are handed back (`trim_heap`) and large blocks get their own mappings again
(`fix_mmap_threshold`). `trim_heap` also runs after a session is made: the graph optimiser's and
the prepacking's temporaries were freed into malloc's heap, which keeps them (66 MiB at the 0.5B
shape with glibc's default thresholds). glibc only; elsewhere each call does nothing.
"""
from __future__ import annotations

import ctypes
import sys

M_MMAP_THRESHOLD = -3        # glibc mallopt parameter
MMAP_THRESHOLD = 1 << 20


def mallopt(param: int, value: int) -> None:
    """glibc's mallopt; elsewhere nothing (only the speed and memory figures suffer)."""
    try:
        ctypes.CDLL(None).mallopt(param, value)
    except (OSError, AttributeError):   # not glibc
        pass


def fix_mmap_threshold() -> None:
    """Blocks of 1 MiB and more get their own mappings, returned to the system when freed. glibc
    raises the threshold after the first large frees (numpy's intermediates here), so ONNX
    Runtime's re-packing buffers would come from the heap, which it keeps: measured +130 MiB
    peak loading a 0.5B model. Set once the numpy work is done (fresh mappings for every
    intermediate made it 2x slower); process-wide, as glibc's MALLOC_MMAP_THRESHOLD_."""
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


M_TRIM_THRESHOLD = -1       # glibc mallopt parameters
KEEP_HEAP = 1 << 30          # while numpy forms the values: freed memory stays for the next tensor
HEAP_BLOCK = 32 << 20        # glibc's largest mmap threshold: intermediates up to 32 MiB from the heap
TRIM_DEFAULT = 128 << 10     # glibc's default trim threshold, restored afterwards


def keep_heap() -> None:
    """While numpy forms the values, freed intermediates stay in the heap and are reused by the
    next tensor's rather than returned and faulted in again page by page (~100,000
    page faults loading a 1.5B model); `trim_heap` returns them once the numpy work is done."""
    mallopt(M_MMAP_THRESHOLD, HEAP_BLOCK)
    mallopt(M_TRIM_THRESHOLD, KEEP_HEAP)


def restore_trim_threshold() -> None:
    """glibc's default trim threshold again, once the numpy work is done."""
    mallopt(M_TRIM_THRESHOLD, TRIM_DEFAULT)


def trim_heap() -> bool:
    """glibc's malloc_trim(0): free heap pages go back to the system. True when it gave some."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):    # not glibc
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))
