"""Graphs with Amber's own op (`ai.amber.GgufMatMul`, engine/native): registering its library on
a session, and a one-line reason when it cannot run here.

A model converted with the native kernels (engine/convert/native_form.py) needs the op library in
every session that runs it; without it ONNX Runtime would fail on the first node with a message
about an unknown domain. The loader asks `unavailable_reason` first and, where the op cannot run,
loads the folder's ORT form instead (engine/onnx/ort_form.py, re-formed on first use).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import engine.native as native
from engine.onnx.graph_scan import op_domains, read_graph

DOMAIN = native.OP_DOMAIN
ENV = native.ENV


def is_native(proto: Any) -> bool:
    """True when the graph has nodes of Amber's op domain."""
    return DOMAIN in op_domains(proto)


def graph_is_native(graph: Path) -> bool:
    """The same for a graph file (False for a file protobuf cannot read: ONNX Runtime says why)."""
    try:
        return is_native(read_graph(graph))
    except (OSError, ValueError):
        return False


def unavailable_reason() -> str | None:
    """Why Amber's kernels cannot run here, or None when they can."""
    if native.mode() == "ort":
        return f"{ENV}=ort turns them off"
    try:
        if native.library_path() is None:
            return "their library is not built here (python -m engine.native.build)"
        if not native.available():
            return "their library does not load here"
    except Exception as exc:  # noqa: BLE001 - the loader's own failure, reported as the reason
        return f"their library does not load here ({type(exc).__name__})"
    return None


def unavailable_message(graph: Path, reason: str) -> str:
    """The loader's one line for a native graph that cannot run here."""
    return (f"{graph}: this model was converted for Amber's native CPU kernels (ai.amber.GgufMatMul), but "
            f"{reason}; convert the GGUF again with AMBER_KERNELS=ort (or `--kernels ort`)")


def register(so: Any) -> bool:
    """Registers the op library on an onnxruntime.SessionOptions; False when it is unavailable."""
    if unavailable_reason() is not None:
        return False
    return bool(native.register(so))
