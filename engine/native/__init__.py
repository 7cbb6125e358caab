"""Amber's native kernels: matmuls over GGUF's own quantized blocks, as an ONNX Runtime custom op.

The C sources are in src/ (generic/amber_kernels.h is the kernels' API; ort/ort_op.c the ONNX Runtime op
ai.amber.GgufMatMul); `python -m engine.native.build` compiles them into _build/. Everything here
degrades to "not available" when the library is missing or fails to load: Amber then uses ONNX
Runtime's own ops. AMBER_KERNELS picks: "ort" (never the native op), "native" (the op for every
type the kernels handle, even on a CPU with only the scalar path), "auto" (default: the op where
the kernels have a SIMD path).
"""
from __future__ import annotations

import ctypes
import functools
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from engine import config

if TYPE_CHECKING:
    import onnxruntime

log = logging.getLogger(__name__)

OP_DOMAIN = "ai.amber"
OP_NAME = "GgufMatMul"
ENV = config.KERNELS
MODES = config.KERNEL_MODES
# GGML type ids the op may take (the kernels report which of them they handle).
GGML_TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}


def mode() -> str:
    """AMBER_KERNELS: "auto" (unset or unknown), "native" or "ort"."""
    return config.settings().kernels


def library_path(build_dir: Path | None = None) -> Path | None:
    """The built library for this platform and these sources, if present. A bundle without the
    sources (the packaged app) uses the one library it ships."""
    # Imported here, not at the top: `python -m engine.native.build` must find it not yet imported.
    from engine.native import build as _build  # noqa: PLC0415 - see above

    folder = build_dir or _build.BUILD_DIR
    try:
        if _build.SRC_DIR.is_dir() and _build.sources():
            path = folder / _build.library_name()
            return path if path.is_file() else None
        shipped = sorted(folder.glob(f"{_build.LIB_STEM}-*{_build.lib_suffix()}"))
        return shipped[0] if len(shipped) == 1 else None
    except OSError as exc:
        log.warning("native kernels: cannot look for the library: %s", exc)
        return None


def _declare(lib: ctypes.CDLL) -> None:
    i64, p = ctypes.c_int64, ctypes.c_void_p
    lib.amber_row_bytes.argtypes = [ctypes.c_int, i64]
    lib.amber_row_bytes.restype = i64
    lib.amber_act_bytes.argtypes = [ctypes.c_int, i64]
    lib.amber_act_bytes.restype = i64
    lib.amber_quantize_act.argtypes = [ctypes.c_int, p, i64, p]
    lib.amber_quantize_act.restype = ctypes.c_int
    lib.amber_gemm_rows.argtypes = [ctypes.c_int, p, i64, p, i64, i64, i64, p, i64]
    lib.amber_gemm_rows.restype = ctypes.c_int
    lib.amber_isa.argtypes = []
    lib.amber_isa.restype = ctypes.c_char_p
    lib.amber_set_isa.argtypes = [ctypes.c_char_p]
    lib.amber_set_isa.restype = ctypes.c_int
    lib.amber_silu_mul.argtypes = [p, p, p, i64]
    lib.amber_silu_mul.restype = None
    lib.amber_silu_path.argtypes = []
    lib.amber_silu_path.restype = ctypes.c_char_p
    lib.amber_set_silu_path.argtypes = [ctypes.c_char_p]
    lib.amber_set_silu_path.restype = ctypes.c_int


def open_library(path: Path) -> ctypes.CDLL:
    """The library at `path` with the amber_kernels.h functions declared (the one ctypes binding
    the engine, the tests and the benches share); OSError when it does not load."""
    lib = ctypes.CDLL(str(path))
    _declare(lib)
    return lib


def build_and_open(out_dir: Path) -> ctypes.CDLL | None:
    """Compiles the current sources into out_dir as `python -m engine.native.build` does and opens
    the result; None without a C compiler (BuildError when the sources do not compile)."""
    from engine.native import build as _build  # noqa: PLC0415 - as in library_path

    path = _build.build(out_dir)
    return open_library(Path(path)) if path is not None else None


@functools.lru_cache(maxsize=4)
def _load(path: Path) -> ctypes.CDLL | None:
    try:
        lib = open_library(path)
        lib.amber_isa()
        if not hasattr(lib, "RegisterCustomOps"):
            raise OSError("no RegisterCustomOps entry point")
        return lib
    except (OSError, AttributeError) as exc:
        log.warning("native kernels: %s does not load: %s", path, exc)
        return None


def kernels() -> ctypes.CDLL | None:
    """The loaded library (ctypes, with the amber_kernels.h functions declared), whatever
    AMBER_KERNELS says (tests and the bench call the kernels directly); None when absent."""
    path = library_path()
    return _load(path) if path is not None else None


def available() -> bool:
    """The library loads and AMBER_KERNELS is not "ort"."""
    return mode() != "ort" and kernels() is not None


def isa() -> str:
    """The instruction set the kernels use: "avx512vnni", "avxvnni", "avx2" or "scalar" ("" when
    the library is absent)."""
    lib = kernels()
    if lib is None:
        return ""
    name = lib.amber_isa()
    return name.decode() if isinstance(name, bytes) else ""


def handles(ggml_type: int) -> bool:
    """The kernels implement this GGML type (any ISA)."""
    lib = kernels()
    return lib is not None and int(lib.amber_row_bytes(int(ggml_type), 256)) > 0


def supports(ggml_type: int) -> bool:
    """Amber should use the native op for this type: available, the kernels handle it, and (in
    auto mode) they have a SIMD path here, so a scalar-only CPU keeps ONNX Runtime's forms."""
    if not available() or not handles(ggml_type):
        return False
    return mode() == "native" or isa() != "scalar"


def register(so: onnxruntime.SessionOptions) -> bool:
    """Registers the op library on `so`; False (and nothing registered) when unavailable."""
    if not available():
        return False
    path = library_path()
    if path is None:
        return False
    try:
        so.register_custom_ops_library(str(path))
    except Exception as exc:  # noqa: BLE001 - any ORT failure means: use ORT's own ops
        log.warning("native kernels: ONNX Runtime refused %s: %s", path, exc)
        return False
    return True


def describe() -> str:
    """One line for logs and `--version`-style output."""
    if mode() == "ort":
        return f"native kernels off ({ENV}=ort)"
    if kernels() is None:
        return "native kernels not built (python -m engine.native.build)"
    return f"native kernels: {isa()} ({sys.platform})"
