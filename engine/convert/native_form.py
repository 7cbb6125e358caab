"""The native weight form: a GGUF matrix kept as the GGUF's own bytes, for Amber's GgufMatMul op.

With `kernels="native"` the converter keeps every 2-D tensor whose type Amber's kernels handle
(engine/native, the custom op `ai.amber.GgufMatMul`) as N rows of the GGUF's blocks, uint8
[N, row_bytes], a view of the memory-mapped GGUF until it is written: no decode, no requantizing,
the bytes llama.cpp's kernels read. Row permutations (llama's Q/K) permute whole rows, fused
Q|K|V and gate|up concatenate rows. The embedding's lookup keeps the ORT form (Gather); the
lm_head, tied included, reads the raw rows. Everything else in the graph is unchanged.

Which form a conversion uses (`choose_kernels`): AMBER_KERNELS=native|ort forces one; otherwise
DEFAULT_KERNELS decides, and "native" is only ever chosen when the library loads and the model
will run on the CPU (GPU users keep the ORT form their float16 variant is made from).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT  # noqa: N814 - short, like ggml's own type tags

import engine.native as native
from engine import config

from ..base.cuda_probe import cuda_device_count
from engine.onnx.errors import ModelImportError
from engine.onnx.weights import Weight

Kernels = Literal["native", "ort"]
KERNELS: tuple[str, ...] = ("native", "ort")
# The default form of new conversions when AMBER_KERNELS is unset: native, since it decodes faster
# in less memory at every measured shape (docs/BENCHMARKS.md); "ort" without the library or with a GPU.
DEFAULT_KERNELS: Kernels = "native"
ENV = native.ENV
OP_DOMAIN = native.OP_DOMAIN
OP_NAME = native.OP_NAME
# The types of the op contract (docs/INTERFACES.md, "GgufMatMul"): Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K.
CONTRACT_TYPES = frozenset({QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q4_K, QT.Q5_K, QT.Q6_K})


def library_available() -> bool:
    """The op library loads here (and AMBER_KERNELS is not "ort")."""
    try:
        return bool(native.available())
    except Exception:  # noqa: BLE001 - a broken build is "not available", never a failed conversion
        return False


def kernel_types() -> frozenset[QT]:
    """The GGUF types the native form keeps raw: those of the contract the kernels handle and are
    worth using here (engine.native.supports: none without the library, none on a scalar-only CPU
    unless AMBER_KERNELS=native)."""
    out = set()
    for t in CONTRACT_TYPES:
        try:
            if native.supports(int(t)):
                out.add(t)
        except Exception:  # noqa: BLE001 - treated as unsupported
            pass
    return frozenset(out)


def env_kernels() -> str:
    """AMBER_KERNELS as given ("" when unset); an unknown value counts as unset."""
    value = config.settings().kernels
    return value if value in KERNELS else ""


def choose_kernels(gpu: bool | None = None) -> Kernels:
    """The form a new conversion gets here: AMBER_KERNELS if set, else DEFAULT_KERNELS; "native"
    only when the library loads and (`gpu` False, or None: no GPU provider would be picked) the
    model runs on the CPU."""
    want = env_kernels() or DEFAULT_KERNELS
    if want != "native" or not library_available():
        return "ort"
    if env_kernels() == "native":
        return "native"      # forced: the user asked for it (a GPU session then explains its CPU fallback)
    if gpu is None:
        gpu = gpu_would_run()
    return "ort" if gpu else "native"


def gpu_would_run() -> bool:
    """True when loading with provider "auto" would try a GPU provider that runs Amber's float16
    variant (the rule of engine.runtime.providers.wanted_providers, which this layer cannot import)."""
    try:
        import onnxruntime as ort  # noqa: PLC0415 - only to look at the providers
        from pathlib import Path  # noqa: PLC0415
    except Exception:  # noqa: BLE001 - no usable onnxruntime: nothing runs on a GPU
        return False
    available = ort.get_available_providers()
    if "DmlExecutionProvider" in available:
        return True
    if "CUDAExecutionProvider" in available:
        # onnxruntime-gpu lists CUDA on CPU-only machines too: the driver says whether a device exists
        return (any((Path(ort.__file__).parent / "capi").glob("*onnxruntime_providers_cuda*"))
                and cuda_device_count() > 0)
    return False


def check_kernels(kernels: str) -> Kernels:
    if kernels not in KERNELS:
        raise ModelImportError(f"unknown kernels option '{kernels}' (choose from {', '.join(KERNELS)})")
    return "native" if kernels == "native" else "ort"


def row_bytes(qtype: QT, k: int) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    return k // block * size


def native_weight(name: str, qtype: QT, data: np.ndarray, n: int, k: int) -> Weight | None:
    """The GGUF matrix as raw rows (a view of `data`), or None when the native form cannot hold it
    (a type the kernels lack, K not a multiple of the type's block)."""
    if qtype not in kernel_types():
        return None
    block, _ = GGML_QUANT_SIZES[qtype]
    if k % block:
        return None
    rb = row_bytes(qtype, k)
    flat = np.asarray(data).reshape(-1).view(np.uint8)
    if flat.size != n * rb:
        raise ModelImportError(f"tensor {name}: {qtype.name} data has {flat.size} bytes, expected {n * rb} "
                               f"for {n} rows of {k}")
    return Weight("native", n, k, raw=flat.reshape(n, rb), ggml_type=int(qtype), qtype=qtype.name)


def uses_native(op_domains: set[str]) -> bool:
    return OP_DOMAIN in op_domains
