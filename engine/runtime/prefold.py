"""Forms an Amber graph's weight-preparation values in numpy, one tensor at a time, at load.

Amber's converted graphs keep weights compact on disk (float16 numbers, small integers, split
bit planes) and form the float32 scales, zero-point corrections and full-width level planes with
ordinary ONNX nodes fed only by initializers. ONNX Runtime's constant folding would compute them
itself, but keeps every intermediate array until its folding pass ends (measured: a 1.5B Q4_K_M
model peaked at 3.0 GiB against 2.0 GiB steady). Here the same nodes are evaluated in numpy
(engine/convert/fold.py, the arithmetic the GPU variant uses), each intermediate freed as soon as
its last consumer ran, and the results are handed to ONNX Runtime with
`SessionOptions.add_external_initializers` in place of the removed nodes. The graph on disk stays
a plain ONNX model any ONNX Runtime can run as is (then with its own folding).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from engine.convert.fold import LazyValues, fold_lazily

PRODUCER = "amber"         # only graphs Amber wrote: their weight-prep nodes use fold.py's ops
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


def prefold(model_path: Path) -> tuple[bytes, list[str], list[Any]] | None:
    """The graph without its weight-preparation nodes (serialized), and the values they formed
    (names, OrtValues); None when the graph is not Amber's or has nothing to fold."""
    proto = onnx.load(str(model_path), load_external_data=False)
    if proto.producer_name != PRODUCER:
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
    out_values: list[Any] = []
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
            arr = np.ascontiguousarray(arr)
            names.append(out)
            out_values.append(ort.OrtValue.ortvalue_from_numpy(arr))
            placeholders.append(_placeholder(out, arr))
            uses[out] -= 1
        if uses.get(out, 0) > 0:
            cache[out] = arr
    values.overrides = {}
    inits = [t for t in g.initializer if t.name in kept_inputs]
    del g.initializer[:]
    g.initializer.extend(inits + placeholders)
    return proto.SerializeToString(), names, out_values


def cpu_session(model_path: str, options: ort.SessionOptions, providers: list[str]) -> ort.InferenceSession:
    """An InferenceSession of `model_path` whose weight preparation ran in numpy (see above)."""
    folded = prefold(Path(model_path))
    if folded is None:
        return ort.InferenceSession(model_path, options, providers=providers)
    data, names, vals = folded
    options.add_session_config_entry(FOLDER_KEY, os.path.dirname(os.path.abspath(model_path)))
    options.add_external_initializers(names, vals)
    return ort.InferenceSession(data, options, providers=providers)
