"""Streams initializers into the external data file as the graph is built (bounded memory).

`onnx.save_model(..., save_as_external_data=True)` needs every weight in memory at once (in the
ModelProto, then copied again while saving). Here each initializer's bytes go to `model.onnx.data`
the moment the graph builder makes it, and the ModelProto only holds its location; the caller
drops the numpy arrays right after, so peak memory is a few times the largest tensor.
"""
from __future__ import annotations

import mmap
import os
from collections import defaultdict
from pathlib import Path
from typing import BinaryIO

import numpy as np
from onnx import TensorProto, helper, numpy_helper

ALIGN = 4096          # page-aligned offsets: ONNX Runtime can map them instead of copying
INLINE_BELOW = 1024   # small tensors stay inside the graph (as onnx.save_model's size_threshold)


class DataWriter:
    """Appends tensors to one external data file; tallies bytes per tag (the size report)."""

    def __init__(self, path: Path, location: str) -> None:
        self.path, self.location = Path(path), location
        self._f: BinaryIO | None = open(self.path, "wb")
        self.offset = 0
        self.bytes_by_tag: dict[str, int] = defaultdict(int)

    def tensor(self, name: str, arr: np.ndarray, tag: str = "other") -> TensorProto:
        arr = np.ascontiguousarray(arr)
        self.bytes_by_tag[tag] += arr.nbytes
        if arr.nbytes < INLINE_BELOW:
            return numpy_helper.from_array(arr, name)
        assert self._f is not None, "the data file is closed"
        pad = (-self.offset) % ALIGN
        if pad:
            self._f.write(b"\0" * pad)
            self.offset += pad
        self._f.write(np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data)
        t = TensorProto()
        t.name = name
        t.data_type = helper.np_dtype_to_tensor_dtype(arr.dtype)
        t.dims.extend(arr.shape)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", str(self.offset)), ("length", str(arr.nbytes))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        self.offset += arr.nbytes
        return t

    def close(self) -> None:
        """Flushes and fsyncs the data file."""
        if self._f is not None:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            self._f = None


def drop_pages(arr: np.ndarray, offset: int, length: int) -> None:
    """Lets the kernel drop a read-only memory map's pages for [offset, offset+length) from this
    process (they stay in the page cache and are read again if touched): a GGUF or data file read
    once from start to end would otherwise count whole in the converter's resident memory."""
    m = getattr(arr, "_mmap", None)
    if m is None or not hasattr(m, "madvise") or length <= 0:
        return
    start = offset - offset % mmap.PAGESIZE
    try:
        m.madvise(mmap.MADV_DONTNEED, start, min(offset + length, len(m)) - start)
    except (OSError, ValueError):   # not supported here: only the memory figure suffers
        pass
