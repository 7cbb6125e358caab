"""A small builder over onnx.helper: unique node and value names, initializers streamed to disk."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from .writer import DataWriter


class GraphBuilder:
    """Collects nodes and initializers; with a `writer`, initializers go to its data file as they come."""

    def __init__(self, writer: DataWriter | None = None) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.writer = writer
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def init(self, name: str, arr: np.ndarray, tag: str = "other") -> str:
        if self.writer is not None:
            self.inits.append(self.writer.tensor(name, arr, tag))
        else:
            self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def const(self, arr: Any, dtype: Any = np.int64) -> str:
        return self.init(self.name("const"), np.asarray(arr, dtype=dtype))

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, outputs: list[str] | None = None,
           domain: str = "", **attrs: Any) -> list[str]:
        outs = outputs or [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(onnx.helper.make_node(op_type, inputs, outs, name=self.name(op_type),
                                                domain=domain, **attrs))
        return outs

    def op1(self, op_type: str, inputs: list[str], **kw: Any) -> str:
        return self.op(op_type, inputs, **kw)[0]
