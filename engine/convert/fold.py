"""Evaluates a graph's weight-preparation nodes (those fed only by initializers) in numpy.

The CPU graph keeps weights compact on disk (float16 numbers, small integers, split bit planes)
and lets ONNX Runtime's constant folding form the float32 values when a session is made. The GPU
variant (variants.py) needs those values as initializers before it rewrites the graph to float16,
so it folds them here with the same float32 arithmetic.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import ModelImportError


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _eval(node: onnx.NodeProto, args: list[np.ndarray]) -> np.ndarray:
    op = node.op_type
    if op == "Cast":
        return args[0].astype(helper.tensor_dtype_to_np_dtype(int(_attr(node, "to"))))  # type: ignore[arg-type]
    if op == "Reshape":
        shape = [int(d) for d in args[1]]
        shape = [args[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
        return args[0].reshape(shape)
    if op in ("Mul", "Add", "Sub"):
        fn = {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract}[op]
        return fn(args[0], args[1]).astype(np.result_type(args[0], args[1]))
    if op == "Transpose":
        return np.ascontiguousarray(np.transpose(args[0], _attr(node, "perm")))  # type: ignore[arg-type]
    if op == "BitShift":
        left = _attr(node, "direction") == b"LEFT" or _attr(node, "direction") == "LEFT"
        return (args[0] << args[1]) if left else (args[0] >> args[1])
    if op == "BitwiseAnd":
        return args[0] & args[1]
    if op == "BitwiseOr":
        return args[0] | args[1]
    if op == "Unsqueeze":
        out = args[0]
        for ax in sorted(int(a) for a in args[1]):
            out = np.expand_dims(out, ax if ax >= 0 else out.ndim + 1 + ax)
        return out
    if op == "Concat":
        return np.concatenate(args, axis=int(_attr(node, "axis")))  # type: ignore[arg-type]
    raise KeyError(op)


FOLDABLE = {"Cast", "Reshape", "Mul", "Add", "Sub", "Transpose", "BitShift", "BitwiseAnd", "BitwiseOr",
            "Unsqueeze", "Concat"}


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
            except Exception as exc:
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
