"""engine.onnx.fold.LazyValues: external initializers are read with one pread into a
fresh array, not copied out of a memory map: the same bytes as ONNX's own loader, writable arrays
of their own, a one-line error for a truncated data file, and the files closed afterwards."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.onnx.errors import ModelImportError
from engine.onnx.fold import LazyValues


def _model(folder: Path) -> Path:
    """A graph whose initializers live in an external data file (several dtypes, an empty one)."""
    rng = np.random.default_rng(7)
    arrays = {
        "u8": rng.integers(0, 256, (33, 17), dtype=np.uint8),
        "f16": rng.standard_normal((5, 40)).astype(np.float16),
        "f32": rng.standard_normal((3, 3, 7)).astype(np.float32),
        "i64": np.array([1, -2, 3], dtype=np.int64),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    inits = [numpy_helper.from_array(a, name) for name, a in arrays.items()]
    nodes = [helper.make_node("Identity", [name], [name + "_out"]) for name in arrays]
    outs = [helper.make_tensor_value_info(name + "_out", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for name, a in arrays.items()]
    m = helper.make_model(helper.make_graph(nodes, "g", [], outs, inits),
                          opset_imports=[helper.make_opsetid("", 21)])
    path = folder / "model.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)
    return path


def test_reads_the_same_bytes_as_onnx(tmp_path):
    path = _model(tmp_path)
    expected = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    proto = onnx.load(str(path), load_external_data=False)
    assert all(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer)
    values = LazyValues(proto, tmp_path)
    for name, want in expected.items():
        got = values.get(name)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want)
        assert got.flags.writeable and got.flags.owndata or got.base is not None and got.base.flags.owndata
        got[...] = 0      # an array of its own: the file and a second read are untouched
        assert np.array_equal(values.get(name), want)
    assert values._fds
    fds = list(values._fds.values())
    values.close()
    assert values._fds == {}
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_truncated_data_file_is_one_line_error(tmp_path):
    path = _model(tmp_path)
    data = tmp_path / "model.onnx.data"
    size = data.stat().st_size
    with open(data, "r+b") as f:
        f.truncate(size - 8)
    proto = onnx.load(str(path), load_external_data=False)
    values = LazyValues(proto, tmp_path)
    last = max(proto.graph.initializer,
               key=lambda t: int({e.key: e.value for e in t.external_data}.get("offset", 0)))
    with pytest.raises(ModelImportError, match=f"initializer {last.name}: its external data is truncated"):
        values.get(last.name)
    values.close()


def test_length_not_matching_the_shape_is_rejected(tmp_path):
    path = _model(tmp_path)
    proto = onnx.load(str(path), load_external_data=False)
    t = next(t for t in proto.graph.initializer if t.name == "f32")
    for e in t.external_data:
        if e.key == "length":
            e.value = str(int(e.value) - 2)      # not a whole number of float32s
    values = LazyValues(proto, tmp_path)
    with pytest.raises(ModelImportError, match="initializer f32"):
        values.get("f32")
    values.close()
