"""What the loader reads from an ONNX graph before ONNX Runtime opens it, without the `onnx` package.

Importing `onnx` (with `ml_dtypes`) and the converter it sits in costs a generating process about
15-25 MiB that it never uses again, for a few facts: the op types of the graph's nodes, the
external-data entries of its initializers, and which nodes prepare weights at load (where they
widen whole tables, the runtime's prefold imports `onnx` to form them in numpy). They are read
here with protobuf itself (which ONNX Runtime imports anyway), through messages that declare only
those fields, under the same field numbers as onnx.proto: protobuf's own parser then applies its
rules (merged repeated messages, last value wins, unknown fields skipped), as ONNX Runtime's C++
parser does, so the checks see what ONNX Runtime will see.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # type: ignore[import-untyped]

_PACKAGE = "amber.graphscan"      # not "onnx": no clash with onnx's own registration of onnx.proto
EXTERNAL = 1                      # TensorProto.DataLocation.EXTERNAL

_F = descriptor_pb2.FieldDescriptorProto
# message -> [(field name, number, type, message type or None, repeated)], numbers from onnx.proto
_FIELDS: dict[str, list[tuple[str, int, int, str | None, bool]]] = {
    "StringStringEntryProto": [("key", 1, _F.TYPE_STRING, None, False), ("value", 2, _F.TYPE_STRING, None, False)],
    "TensorProto": [("name", 8, _F.TYPE_STRING, None, False),
                    ("external_data", 13, _F.TYPE_MESSAGE, "StringStringEntryProto", True),
                    ("data_location", 14, _F.TYPE_INT32, None, False)],
    "NodeProto": [("input", 1, _F.TYPE_STRING, None, True), ("output", 2, _F.TYPE_STRING, None, True),
                  ("op_type", 4, _F.TYPE_STRING, None, False),
                  ("domain", 7, _F.TYPE_STRING, None, False)],
    "GraphProto": [("node", 1, _F.TYPE_MESSAGE, "NodeProto", True),
                   ("initializer", 5, _F.TYPE_MESSAGE, "TensorProto", True)],
    "ModelProto": [("producer_name", 2, _F.TYPE_STRING, None, False),
                   ("graph", 7, _F.TYPE_MESSAGE, "GraphProto", False)],
}
AMBER_PRODUCER = "amber"    # the producer_name of the graphs Amber's importer writes
# The ops of the weight-preparation nodes Amber's graphs carry (engine/onnx/fold.py evaluates them).
FOLDABLE = frozenset({"Cast", "Reshape", "Mul", "Add", "Sub", "Transpose", "BitShift", "BitwiseAnd",
                      "BitwiseOr", "Unsqueeze", "Concat", "Gather", "Expand", "Div", "Round", "Clip",
                      "Equal", "Where", "Slice"})
_model_class: Any = None


def _build() -> Any:
    fd = descriptor_pb2.FileDescriptorProto(name="amber_graphscan.proto", package=_PACKAGE, syntax="proto2")
    for msg, fields in _FIELDS.items():
        m = fd.message_type.add(name=msg)
        for name, number, ftype, mtype, repeated in fields:
            f = m.field.add(name=name, number=number, type=ftype,
                            label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
            if mtype:
                f.type_name = f".{_PACKAGE}.{mtype}"
    pool = descriptor_pool.DescriptorPool()     # private pool: nothing registered globally
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.ModelProto"))


def read_graph(path: Path) -> Any:
    """The graph's ModelProto with only `producer_name`, `graph.node[].input/output/op_type/domain` and
    `graph.initializer[].name/external_data/data_location`; raises ValueError on bytes protobuf
    cannot parse."""
    global _model_class
    if _model_class is None:
        _model_class = _build()
    proto = _model_class()
    try:
        proto.ParseFromString(Path(path).read_bytes())
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, or a message it built from hostile bytes
        raise ValueError(f"not an ONNX graph ({type(exc).__name__})") from None
    return proto


def op_types(proto: Any) -> set[str]:
    """The op types of the top-level graph's nodes."""
    return {n.op_type for n in proto.graph.node}


def op_domains(proto: Any) -> set[str]:
    """The domains of the top-level graph's nodes ("" for the default one)."""
    return {n.domain for n in proto.graph.node}


def weight_preparation(proto: Any) -> list[Any]:
    """The weight-preparation nodes of an Amber-written graph, in graph order (none for other
    graphs): FOLDABLE ops fed only by initializers and such nodes' outputs, the nodes
    `fold.fold_lazily` takes."""
    if proto.producer_name != AMBER_PRODUCER:
        return []
    known = {t.name for t in proto.graph.initializer}
    nodes = []
    for n in proto.graph.node:
        if n.op_type in FOLDABLE and n.input and all(i in known for i in n.input if i):
            nodes.append(n)
            known.update(n.output[:1])
    return nodes


def external_bytes(proto: Any, names: set[str]) -> int:
    """The bytes the named initializers keep in external data files (their `length` entries)."""
    total = 0
    for t in proto.graph.initializer:
        if t.name in names and t.data_location == EXTERNAL:
            length = next((e.value for e in t.external_data if e.key == "length"), "0")
            total += int(length) if length.isdigit() else 0
    return total
