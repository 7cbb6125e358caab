"""Evaluates a graph's weight-preparation nodes (those fed only by initializers) in numpy.

The CPU graph keeps weights compact on disk (float16 numbers, small integers, split bit planes)
and lets ONNX Runtime's constant folding form the float32 values when a session is made. The GPU
variant (variants.py) needs those values as initializers before it rewrites the graph to float16,
so it folds them here with the same float32 arithmetic.
"""
from __future__ import annotations

import os
from pathlib import Path

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import ModelImportError
from .graph_scan import FOLDABLE


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _eval(node: onnx.NodeProto, args: list[np.ndarray]) -> np.ndarray:
    op = node.op_type
    if op == "Cast":
        return args[0].astype(helper.tensor_dtype_to_np_dtype(int(_attr(node, "to"))))
    if op == "Reshape":
        shape = [int(d) for d in args[1]]
        shape = [args[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
        return args[0].reshape(shape)
    if op in ("Mul", "Add", "Sub"):
        fn = {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract}[op]
        out: np.ndarray = fn(args[0], args[1]).astype(np.result_type(args[0], args[1]))
        return out
    if op == "Transpose":
        return np.ascontiguousarray(np.transpose(args[0], _attr(node, "perm")))
    if op == "BitShift":
        left = _attr(node, "direction") == b"LEFT" or _attr(node, "direction") == "LEFT"
        shifted: np.ndarray = (args[0] << args[1]) if left else (args[0] >> args[1])
        return shifted
    if op == "BitwiseAnd":
        anded: np.ndarray = args[0] & args[1]
        return anded
    if op == "BitwiseOr":
        ored: np.ndarray = args[0] | args[1]
        return ored
    if op == "Unsqueeze":
        out = args[0]
        for ax in sorted(int(a) for a in args[1]):
            out = np.expand_dims(out, ax if ax >= 0 else out.ndim + 1 + ax)
        return out
    if op == "Concat":
        return np.concatenate(args, axis=int(_attr(node, "axis")))
    return _eval_more(node, op, args)


def _eval_more(node: onnx.NodeProto, op: str, args: list[np.ndarray]) -> np.ndarray:
    """The ops of the compact weight forms (zero points formed at load, constant planes)."""
    if op == "Gather":
        axis = int(_attr(node, "axis", 0))
        if args[1].ndim == 0:       # one index: a plain slice (np.take on an inner axis is ~10x slower)
            axis = axis % args[0].ndim
            return np.ascontiguousarray(args[0][(slice(None),) * axis + (int(args[1]),)])
        return np.take(args[0], args[1], axis=axis)
    if op == "Expand":
        shape = np.broadcast_shapes(args[0].shape, tuple(int(d) for d in args[1]))
        return np.ascontiguousarray(np.broadcast_to(args[0], shape))
    if op == "Div":
        a, b = args
        if np.issubdtype(a.dtype, np.integer):   # ONNX truncates toward zero (numpy floors)
            q: np.ndarray = ((np.abs(a) // np.abs(b)) * (np.sign(a) * np.sign(b))).astype(np.result_type(a, b))
            return q
        out: np.ndarray = np.divide(a, b).astype(np.result_type(a, b))
        return out
    if op == "Slice":
        steps = [int(v) for v in args[4]] if len(args) > 4 else [1] * len(args[1])
        axes = [int(v) for v in args[3]] if len(args) > 3 else list(range(len(args[1])))
        index = [slice(None)] * args[0].ndim
        for axis, lo, hi, st in zip(axes, args[1], args[2], steps, strict=True):
            index[axis] = slice(_bound(lo), _bound(hi), st)
        return np.ascontiguousarray(args[0][tuple(index)])
    if op == "Round":
        rounded: np.ndarray = np.rint(args[0])     # half to even, as ONNX's Round
        return rounded
    if op == "Clip":
        lo = args[1] if len(args) > 1 and args[1].size else None
        hi = args[2] if len(args) > 2 and args[2].size else None
        clipped: np.ndarray = np.clip(args[0], lo, hi).astype(args[0].dtype)
        return clipped
    if op == "Equal":
        equal: np.ndarray = np.equal(args[0], args[1])
        return equal
    if op == "Where":
        return np.where(args[0], args[1], args[2]).astype(np.result_type(args[1], args[2]))
    raise KeyError(op)


def _bound(v: Any) -> int:
    """A Slice start/end as a Python slice bound (INT64_MAX/MIN: to the end)."""
    return int(max(min(int(v), INT64_SAFE), -INT64_SAFE))


INT64_SAFE = 1 << 62       # Slice's "to the end" (INT64_MAX) as a Python slice bound


def fold_constants(model: onnx.ModelProto) -> None:
    """Replaces every foldable node whose inputs are all initializers by initializers (in place)."""
    g = model.graph
    values = {i.name: i for i in g.initializer}
    cache: dict[str, np.ndarray] = {}

    def array(name: str) -> np.ndarray:
        if name not in cache:      # an initializer (folded outputs are always cached)
            cache[name] = numpy_helper.to_array(values[name])
        return cache[name]

    consumers: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            consumers[i] = consumers.get(i, 0) + 1
    kept: list[onnx.NodeProto] = []
    folded: set[str] = set()
    for n in g.node:     # topological order: a folded output is available to later nodes
        if n.op_type in FOLDABLE and n.input and all(i in values or i in folded for i in n.input if i):
            try:
                out = _eval(n, [array(i) for i in n.input])
            except Exception as exc:  # noqa: BLE001 - numpy raises many kinds on a bad graph; one line
                raise ModelImportError(f"cannot fold node {n.name} ({n.op_type}): {exc}") from None
            cache[n.output[0]] = out
            folded.add(n.output[0])
            for i in n.input:       # free intermediate arrays no other node needs
                consumers[i] -= 1
                if consumers[i] == 0 and i in folded:
                    cache.pop(i, None)
            continue
        kept.append(n)
    used = {i for n in kept for i in n.input} | {o.name for o in g.output}
    del g.node[:]
    g.node.extend(kept)
    inits = [values[name] for name in values if name in used]
    inits += [numpy_helper.from_array(np.ascontiguousarray(cache[name]), name) for name in folded if name in used]
    del g.initializer[:]
    g.initializer.extend(inits)


class LazyValues:
    """The graph's constant values, computed one at a time when asked (the GPU variant's streaming
    build): initializers are read from the external data file through a memory map, folded values
    are evaluated from their recipe each time (nothing is kept, so memory stays about one tensor's)."""

    def __init__(self, model: onnx.ModelProto, base_dir: Path) -> None:
        self.inits = {i.name: i for i in model.graph.initializer}
        self.recipes: dict[str, onnx.NodeProto] = {}
        self.overrides: dict[str, np.ndarray] = {}
        self.base_dir = Path(base_dir)
        self._maps: dict[str, np.memmap] = {}
        self._fds: dict[str, int] = {}
        self._paths: dict[str, Path] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.overrides or name in self.recipes or name in self.inits

    def get_map(self, location: str, name: str) -> np.memmap:
        """The read-only map of the data file `location` (inside the model folder only)."""
        if location not in self._maps:
            path = (self.base_dir / location).resolve()
            if path.parent != self.base_dir.resolve():
                raise ModelImportError(f"initializer {name}: external data outside the model folder")
            self._maps[location] = np.memmap(path, dtype=np.uint8, mode="r")
            self._paths[location] = path
        return self._maps[location]

    def get(self, name: str) -> np.ndarray:
        if name in self.overrides:
            return self.overrides[name]
        if name in self.recipes:
            n = self.recipes[name]
            try:
                return _eval(n, [self.get(i) for i in n.input])
            except Exception as exc:  # noqa: BLE001 - numpy raises many kinds on a bad graph; one line
                raise ModelImportError(f"cannot fold node {n.name} ({n.op_type}): {exc}") from None
        t = self.inits[name]
        if t.data_location != onnx.TensorProto.EXTERNAL:
            return numpy_helper.to_array(t)
        info = {e.key: e.value for e in t.external_data}
        location = info["location"]
        self.get_map(location, name)
        off, length = int(info.get("offset", 0)), int(info["length"])
        dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
        m = self._maps[location]
        if off < 0 or off + length > m.size:
            raise ModelImportError(f"initializer {name}: its external data is truncated")
        # Read with one pread into a fresh array rather than copied out of the map:
        # fewer page faults and no pages to release (the copy was 0.46 of 1.57 s in cProfile at
        # 0.5B; no wall-clock difference measurable on the loaded 2-core bench machine).
        shape = tuple(int(d) for d in t.dims)
        out = np.empty(shape, dtype=dtype)
        if out.nbytes != length:
            raise ModelImportError(f"initializer {name}: its external data's length does not match its shape")
        if length and self._read_into(location, out.reshape(-1).view(np.uint8), off) != length:
            raise ModelImportError(f"initializer {name}: its external data is truncated")
        return out

    def _read_into(self, location: str, buf: np.ndarray, offset: int) -> int:
        """Reads len(buf) bytes of the data file `location` at `offset` (the count read)."""
        fd = self._fds.get(location)
        if fd is None:
            fd = self._fds[location] = os.open(self._paths[location], os.O_RDONLY)
        view, done = buf.data.cast("B"), 0
        while done < len(view):
            n = os.preadv(fd, [view[done:]], offset + done)
            if n <= 0:
                break
            done += n
        return done

    def close(self) -> None:
        """Closes the data files opened for reading (the maps stay valid while referenced)."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self) -> None:
        self.close()


def fold_lazily(model: onnx.ModelProto, values: LazyValues) -> None:
    """Moves every foldable node fed only by constants into `values.recipes` (nothing is computed)."""
    g = model.graph
    kept: list[onnx.NodeProto] = []
    for n in g.node:
        if n.op_type in FOLDABLE and n.input and all(i in values for i in n.input if i):
            values.recipes[n.output[0]] = n
            continue
        kept.append(n)
    del g.node[:]
    g.node.extend(kept)
