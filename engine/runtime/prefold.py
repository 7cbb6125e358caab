"""Forms an Amber graph's weight-preparation values in numpy, one tensor at a time, at load.

Amber's converted graphs keep weights compact on disk (float16 numbers, small integers, split
bit planes) and form the float32 scales, zero-point corrections and full-width level planes with
ordinary ONNX nodes fed only by initializers. ONNX Runtime's constant folding would compute them
itself, but keeps every intermediate array until its folding pass ends (measured: a 1.5B Q4_K_M
model peaked at 3.0 GiB against 2.0 GiB steady). Here the same nodes are evaluated in numpy
(engine/onnx/fold.py, the arithmetic the GPU variant uses), each intermediate freed as soon as
its last consumer ran, and the results are handed to ONNX Runtime with
`SessionOptions.add_external_initializers` in place of the removed nodes. The graph on disk stays
a plain ONNX model any ONNX Runtime can run as is (then with its own folding).
"""
from __future__ import annotations

import mmap
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from engine.base import paths
from engine.onnx.errors import ModelImportError
from engine.onnx.fold import LazyValues, fold_lazily
from engine.onnx.graph_scan import AMBER_PRODUCER
from engine.onnx.writer import ALIGN
from engine.runtime.host.malloc import fix_mmap_threshold, keep_heap, restore_trim_threshold, trim_heap

FOLDER_KEY = "session.model_external_initializers_file_folder_path"
PLACEHOLDER_FILE = "amber_prefolded.bin"   # named by the stand-ins; never opened (the values are injected)


def _placeholder(name: str, arr: np.ndarray) -> TensorProto:
    """An external initializer entry that `add_external_initializers` replaces before any read."""
    t = TensorProto()
    t.name = name
    t.data_type = helper.np_dtype_to_tensor_dtype(arr.dtype)
    t.dims.extend(arr.shape)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", PLACEHOLDER_FILE), ("offset", "0"), ("length", str(arr.nbytes))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


class _Spill:
    """The formed values, appended to an unlinked temporary file and read back through a memory
    map: ONNX Runtime references (does not copy) the arrays handed to it and drops the packed
    weights' arrays once it has re-packed them, so after the session is made the map's pages are
    released (madvise) and only those it still reads are faulted in again from the file."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="prefold-", suffix=".bin", dir=folder)
        os.unlink(name)                 # the space is freed when the map is closed (the session ends)
        self.file = os.fdopen(fd, "w+b")
        self.offset = 0
        self.items: list[tuple[int, tuple[int, ...], np.dtype]] = []
        self.map: np.memmap | None = None
        self.maps: list[Any] = []      # maps of the model's data files (released the same way)

    def add(self, arr: np.ndarray) -> int:
        pad = (-self.offset) % ALIGN
        if pad:
            self.file.write(b"\0" * pad)
            self.offset += pad
        self.file.write(np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data)
        self.items.append((self.offset, arr.shape, arr.dtype))
        self.offset += arr.nbytes
        return len(self.items) - 1

    def arrays(self) -> list[np.ndarray]:
        self.file.flush()
        if self.offset == 0:
            return [np.zeros(shape, dtype) for _, shape, dtype in self.items]
        self.map = np.memmap(self.file, dtype=np.uint8, mode="r", shape=(self.offset,))
        return [np.ndarray(shape, dtype, buffer=self.map, offset=off) for off, shape, dtype in self.items]

    def release_pages(self) -> None:
        for arr in [self.map, *self.maps]:
            m = getattr(arr, "_mmap", None)
            if m is not None and hasattr(m, "madvise"):
                try:
                    m.madvise(mmap.MADV_DONTNEED)
                except (OSError, ValueError):     # only the memory figure suffers
                    pass


def _release_until(spill: _Spill, done: threading.Event, every_s: float = 0.02) -> None:
    while not done.wait(every_s):
        spill.release_pages()


def _spill_folder() -> Path:
    """Amber's own scratch folder (never the model folder, which may be read-only)."""
    try:
        return paths.amber_home() / "tmp"
    except Exception:   # noqa: BLE001 - no usable data folder: the system's temporary folder
        return Path(tempfile.gettempdir())


def prefold(model_path: Path, spill: _Spill,
            stored: list[np.ndarray]) -> tuple[bytes, list[str]] | None:
    """The graph without its weight-preparation nodes (serialized) and the names of the values
    handed in: those they formed (appended to `spill` in that order), then stored ones (appended
    to `stored`); None when the graph is not Amber's or has nothing to fold."""
    proto = onnx.load(str(model_path), load_external_data=False)
    if proto.producer_name != AMBER_PRODUCER:   # their weight-prep nodes use fold.py's ops
        return None
    values = LazyValues(proto, Path(model_path).parent)
    order = [n for n in proto.graph.node]
    fold_lazily(proto, values)
    if not values.recipes:
        return None
    g = proto.graph
    kept_inputs = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    needed = {name for name in values.recipes if name in kept_inputs}
    # Reference counts over the recipes that lead to a needed value, so each intermediate is
    # dropped right after its last use.
    recipes = [n for n in order if n.output and n.output[0] in values.recipes]
    live = set(needed)
    for n in reversed(recipes):
        if n.output[0] in live:
            live.update(i for i in n.input if i in values.recipes)
    recipes = [n for n in recipes if n.output[0] in live]
    uses: dict[str, int] = {name: 1 for name in needed}
    for n in recipes:
        for i in n.input:
            if i in values.recipes:
                uses[i] = uses.get(i, 0) + 1
    cache: dict[str, np.ndarray] = {}
    names: list[str] = []
    placeholders: list[TensorProto] = []
    for n in recipes:
        out = n.output[0]
        values.overrides = cache                     # inputs already formed are read from the cache
        arr = values.get(out)
        for i in n.input:
            if i in cache:
                uses[i] -= 1
                if uses[i] == 0:
                    del cache[i]
        if out in needed:
            names.append(out)
            spill.add(arr)
            placeholders.append(_placeholder(out, arr))
            uses[out] -= 1
        if uses.get(out, 0) > 0:
            cache[out] = arr
    values.overrides = {}
    inits = [t for t in g.initializer if t.name in kept_inputs]
    del g.initializer[:]
    g.initializer.extend(inits + placeholders)
    # Stored weights that only MatMulNBits reads (it re-packs them): handed in as views into this
    # process's map of the data file too, so their pages are released once re-packed. (ONNX Runtime
    # would read them into its own buffers and free those only when the whole session is made.)
    readers: dict[str, set[str]] = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, set()).add(n.op_type)
    for t in inits:
        if t.data_location == TensorProto.EXTERNAL and readers.get(t.name) == {"MatMulNBits"}:
            names.append(t.name)
            stored.append(_stored_view(t, values))
    return proto.SerializeToString(), names


def _stored_view(t: TensorProto, values: LazyValues) -> np.ndarray:
    """An external initializer as a view into the (read-only) map of its data file."""
    info = {e.key: e.value for e in t.external_data}
    m = values.get_map(info["location"], t.name)
    off, length = int(info.get("offset", 0)), int(info["length"])
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
    shape = tuple(int(d) for d in t.dims)
    if off < 0 or off + length > m.size or length != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        raise ModelImportError(f"initializer {t.name}: its external data is truncated")
    return np.ndarray(shape, dtype, buffer=m, offset=off)


def cpu_session(model_path: str, options: ort.SessionOptions, providers: list[str]) -> ort.InferenceSession:
    """An InferenceSession of `model_path` whose weight preparation ran in numpy (see above).
    Where the temporary file cannot be made or written (no writable folder, disk full), ONNX
    Runtime folds the graph itself: more memory at load, the same model."""
    try:
        spill = _Spill(_spill_folder())
    except OSError:
        return ort.InferenceSession(model_path, options, providers=providers)
    try:
        stored: list[np.ndarray] = []
        try:
            keep_heap()
            folded = prefold(Path(model_path), spill, stored)
        except OSError:
            folded = None
        finally:
            restore_trim_threshold()
        if folded is None:
            spill.file.close()
            return ort.InferenceSession(model_path, options, providers=providers)
        data, names = folded
        # The freed intermediates' memory goes back: glibc raised its mmap threshold after the
        # first large frees, so the heap kept them (+128 MiB resident after a 0.5B load without it).
        trim_heap()
        fix_mmap_threshold()
        arrays = spill.arrays() + stored
        spill.maps = list({id(v.base): v.base for v in stored}.values())
        options.add_session_config_entry(FOLDER_KEY, os.path.dirname(os.path.abspath(model_path)))
        options.add_external_initializers(names, [ort.OrtValue.ortvalue_from_numpy(a) for a in arrays])
        # While ONNX Runtime re-packs the weights, the pages it has read are released every few
        # milliseconds (it reads a page again from the file if it needs it): the map never holds
        # all the formed values at once, so the load peaks near the session's steady size.
        done = threading.Event()
        releaser = threading.Thread(target=_release_until, args=(spill, done), daemon=True)
        releaser.start()
        try:
            session = ort.InferenceSession(data, options, providers=providers)
        finally:
            done.set()
            releaser.join()
    except BaseException:
        spill.file.close()
        raise
    spill.release_pages()
    trim_heap()
    # ONNX Runtime reads these buffers for as long as the session lives: keep them mapped with it.
    session.amber_prefolded = (spill, arrays)
    return session
