"""Graphs with Amber's own op (`ai.amber.GgufMatMul`, engine/native): registering its library on
a session, and a one-line reason when it cannot run here.

A model converted with the native kernels (engine/convert/native_form.py) needs the op library in
every session that runs it; without it ONNX Runtime would fail on the first node with a message
about an unknown domain. The loader asks `unavailable_reason` first and tells the user what to do.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engine.runtime.graph_scan import op_domains, read_graph

DOMAIN = "ai.amber"
ENV = "AMBER_KERNELS"


def _native() -> Any:
    try:
        import engine.native as native  # noqa: PLC0415 - only for graphs that use the op
    except Exception:  # noqa: BLE001 - a broken build counts as "not available"
        return None
    return native


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
    if os.environ.get(ENV, "").strip().lower() == "ort":
        return f"{ENV}=ort turns them off"
    native = _native()
    path_fn, avail_fn = getattr(native, "library_path", None), getattr(native, "available", None)
    try:
        if path_fn is None or path_fn() is None:
            return "their library is not built here (python -m engine.native.build)"
        if avail_fn is None or not avail_fn():
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
    native = _native()
    fn = getattr(native, "register", None)
    if fn is None or unavailable_reason() is not None:
        return False
    return bool(fn(so))
