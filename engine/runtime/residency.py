"""Giving back the pages of a model's memory-mapped weights that the session no longer reads (Linux).

ONNX Runtime 1.31 memory-maps each external initializer of a CPU session (one private mapping per
tensor of `model.onnx.data`). The MatMulNBits / MatMul weights are then prepacked into ORT's own
buffers and their mappings dropped, but what stays mapped (the token-embedding table the `Gather`
reads, a few small tensors) stays resident as it was read while the session was made: 45 MiB for
the default model, of which a decode step touches a few pages (one embedding row per token).

`release_mapped_weights` tells the kernel (madvise MADV_DONTNEED) that those pages can leave the
process: they stay in the page cache and come back on the next read as minor faults, with the
same bytes, because a clean private file mapping is refilled from the file. Only mappings that
were never written (no dirty or anonymous pages, checked in /proc/self/smaps) of files in the
model's own folder are touched, so nothing that ORT computed is lost. Elsewhere it does nothing.

`trim_heap` hands the heap's free pages back after the session is made: the graph optimiser's and
the prepacking's temporaries were freed into malloc's heap, which keeps them (66 MiB at the 0.5B
shape with glibc's default thresholds). glibc only; elsewhere nothing.

"""
from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

MADV_DONTNEED = 4
SMAPS = Path("/proc/self/smaps")
MAPS = Path("/proc/self/maps")
_clean_folders: set[str] = set()     # folders whose mappings were all clean once the session was made
# The small mapped initializers (norm weights, biases, scales: 60-110 of them, at most 2.5 MiB in
# all at 135M-1.5B) are read whole by every step. Dropping them after each prefill chunk made the
# next step fault each one back (40-110 minor faults on the first decode step after every
# prompt, and again in every chunk) to save almost nothing; only the tables a prompt reads row by
# row (the embedding and its scales, megabytes) are worth dropping.
KEEP_MAX_BYTES = 1 << 20


@dataclass
class Mapping:
    start: int
    end: int
    path: str
    rss_kib: int = 0
    dirty_kib: int = 0       # Private_Dirty + Shared_Dirty: written pages (never released)
    anon_kib: int = 0        # copy-on-write pages of a private mapping (never released)


def parse_smaps(text: str) -> list[Mapping]:
    """The file-backed mappings in a /proc/<pid>/smaps text, with their resident and dirty sizes."""
    out: list[Mapping] = []
    cur: Mapping | None = None
    for line in text.splitlines():
        head = line.split(None, 5)
        if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            lo, _, hi = head[0].partition("-")
            try:
                cur = Mapping(int(lo, 16), int(hi, 16), head[5].strip() if len(head) > 5 else "")
            except ValueError:
                cur = None
                continue
            if cur.path.startswith("/"):
                out.append(cur)
            continue
        if cur is None or len(head) < 2 or not head[1].isdigit():
            continue
        key, kib = head[0], int(head[1])
        if key == "Rss:":
            cur.rss_kib = kib
        elif key in ("Private_Dirty:", "Shared_Dirty:"):
            cur.dirty_kib += kib
        elif key == "Anonymous:":
            cur.anon_kib = kib
    return out


def model_mappings(folder: Path, smaps_text: str) -> list[Mapping]:
    """This process's mappings of files directly in `folder` other than ONNX graphs themselves."""
    root = os.path.realpath(folder)
    return [m for m in parse_smaps(smaps_text)
            if os.path.dirname(m.path) == root and not m.path.endswith(".onnx")]


def release_mapped_weights(folder: Path) -> int:
    """Drops the resident pages of the clean mappings of `folder`'s files; returns the bytes that
    were resident in them (0 where this is not Linux or nothing was mapped). Never raises."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        maps = model_mappings(folder, SMAPS.read_text())
        root = os.path.realpath(folder)
        if maps and all(not m.dirty_kib and not m.anon_kib for m in maps):
            _clean_folders.add(root)
        else:
            _clean_folders.discard(root)
        clean = [m for m in maps if m.rss_kib and not m.dirty_kib and not m.anon_kib]
        if not clean:
            return 0
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise.restype = ctypes.c_int
        released = 0
        for m in clean:
            if libc.madvise(m.start, m.end - m.start, MADV_DONTNEED) == 0:
                released += m.rss_kib * 1024
        return released
    except Exception as exc:   # noqa: BLE001 - an optimisation only: the session works either way
        log.debug("mapped weights not released: %s", exc)
        return 0


def drop_mapped_pages(folder: Path) -> int:
    """Between prefill chunks: the embedding rows a chunk read (and the kernel's fault-around
    neighbours, 64 KiB a row) leave again, so a long prompt does not map the table back in
    (23 MiB of 27 at 2048 tokens on the default model). Reads /proc/self/maps (~1 ms; smaps walks
    page tables: ~30 ms), so only for a folder whose mappings `release_mapped_weights` found
    clean: ONNX Runtime never writes its constant initializers. Mappings of at most
    KEEP_MAX_BYTES stay: see there. Returns the mappings advised."""
    root = os.path.realpath(folder)
    if root not in _clean_folders:
        return 0
    try:
        maps = [m for m in parse_smaps(MAPS.read_text())
                if os.path.dirname(m.path) == root and not m.path.endswith(".onnx")
                and m.end - m.start > KEEP_MAX_BYTES]
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise.restype = ctypes.c_int
        return sum(1 for m in maps if libc.madvise(m.start, m.end - m.start, MADV_DONTNEED) == 0)
    except Exception as exc:   # noqa: BLE001 - an optimisation only
        log.debug("mapped pages not dropped: %s", exc)
        return 0


class PageDropper:
    """Around one prefill chunk's run: a thread drops the model's mapped pages (`drop_mapped_pages`)
    a few times while ONNX Runtime runs, at DROP_DELAYS_S after the start and then every
    DROP_EVERY_S. Only the graph's first nodes (the embedding `Gather`) read those pages, so the
    rows a chunk read, with the kernel's fault-around neighbours, leave before the chunk's
    activation peak instead of adding to it (33 MiB for 64 tokens at the 1.5B shape). Dropping is
    always safe for these clean private file mappings: a page read again is refilled from the file
    with the same bytes. Does nothing for a folder `release_mapped_weights` did not find clean."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.drops = 0          # how many times the thread dropped (tests)

    def _run(self) -> None:
        delays = iter(DROP_DELAYS_S)
        while not self._stop.wait(next(delays, DROP_EVERY_S)):
            drop_mapped_pages(self.folder)
            self.drops += 1

    def __enter__(self) -> PageDropper:
        if os.path.realpath(self.folder) in _clean_folders:
            self._thread = threading.Thread(target=self._run, name="amber-page-dropper", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# The embedding Gather runs within milliseconds of the start; later drops catch a slow start under load.
DROP_DELAYS_S = (0.005, 0.02, 0.1, 0.3)
DROP_EVERY_S = 1.0


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
