"""Measured limits for the real-size comparison bench: the machine's memory bandwidth (numpy copies) and the
weight bytes one decode step reads, from Amber's ONNX graph and from a GGUF."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def _best_rate(work: Any, n: int, threads: int, nbytes: int, runs: int) -> float:
    """Best of runs of `nbytes` / wall time for work(lo, hi) over [0, n) cut into one slice a thread."""
    import threading

    import numpy as np
    bounds = [(int(p[0]), int(p[-1]) + 1) for p in np.array_split(np.arange(n), threads)]
    best = 0.0
    for _ in range(runs):
        ths = [threading.Thread(target=work, args=b) for b in bounds]
        start = time.perf_counter()
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        best = max(best, nbytes / (time.perf_counter() - start))
    return best


def worker_bandwidth(mib: int = 1024, runs: int = 5, threads: int = 2) -> dict[str, Any]:
    """Memory bandwidth from large numpy copies (read + write bytes per second, as STREAM's copy
    counts them), with 1 and `threads` threads (numpy releases the GIL while copying); best of runs.
    Also read only (a decode step only reads its weights): float64 sums of the same array, numpy's
    fastest plain reduction here (bitwise-or and max read slower)."""
    import numpy as np
    n = (mib << 20) // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)           # fault both in
    out: dict[str, Any] = {"bytes_per_copy": 2 * src.nbytes}
    counts = sorted({1, max(1, threads)})

    def copy(lo: int, hi: int) -> None:
        np.copyto(dst[lo:hi], src[lo:hi])

    def read(lo: int, hi: int) -> None:
        float(src[lo:hi].sum())

    for t in counts:
        out[f"copy_{t}t_bytes_per_s"] = _best_rate(copy, n, t, 2 * src.nbytes, runs)
    out["bytes_per_s"] = max(v for k, v in out.items() if k.startswith("copy_"))
    for t in counts:
        out[f"read_{t}t_bytes_per_s"] = _best_rate(read, n, t, src.nbytes, runs)
    return out


def onnx_decode_bytes(folder: str) -> dict[str, int]:
    """Initializer bytes one decode step reads: every initializer in full, except tables read only
    by Gather ops (the embedding lookup), which count one row."""
    import math
    from collections import defaultdict

    import onnx
    from onnx import helper
    m = onnx.load(str(Path(folder) / "model.onnx"), load_external_data=False)
    consumers: dict[str, list[str]] = defaultdict(list)
    for node in m.graph.node:
        for name in node.input:
            consumers[name].append(node.op_type)
    total = full = 0
    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            n = int({e.key: e.value for e in t.external_data}.get("length", 0))
        else:
            n = len(t.raw_data) or math.prod(t.dims) * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        full += n
        ops = consumers.get(t.name, [])
        if ops and t.dims and all(op.startswith("Gather") for op in ops):
            n //= max(1, int(t.dims[0]))
        total += n
    return {"decode_bytes": total, "initializer_bytes": full}


def onnx_kernel_bytes(folder: str) -> dict[str, Any]:
    """Bytes one decode step reads in the forms the kernels take, which are made at load: what
    `onnx_decode_bytes` counts is the file's compact storage (Q6_K as 6-bit levels and int8
    sub-scales), while MatMulNBits reads the 8-bit plane and float32 scales formed from it, and
    the zero-point corrections are float32 matrices made from per-block numbers.

    Every tensor computed from initializers alone (folded at load) that a node depending on the
    graph's inputs reads counts once, at its inferred size; a table such a node only gathers from
    counts one row (so do GroupQueryAttention's rotary tables). `by_op` splits the total by the
    op type that reads a tensor whole (zero entries dropped). Prepacking may add to this
    (MLAS's int8 path keeps per-block sums next to the packed levels), so it is a lower bound."""
    import math
    from collections import defaultdict

    import onnx
    from onnx import helper
    m = onnx.load(str(Path(folder) / "model.onnx"), load_external_data=False)
    inferred = onnx.shape_inference.infer_shapes(m)
    shapes: dict[str, tuple[list[int], int]] = {}
    for t in m.graph.initializer:
        shapes[t.name] = (list(t.dims), t.data_type)
    for v in inferred.graph.value_info:
        tt = v.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes[v.name] = ([d.dim_value for d in tt.shape.dim], tt.elem_type)
    dynamic = {i.name for i in m.graph.input}
    for node in m.graph.node:       # graph order is topological
        if any(i in dynamic for i in node.input if i):
            dynamic.update(node.output)
    readers: dict[str, list[str]] = defaultdict(list)
    for node in m.graph.node:
        if not any(i in dynamic for i in node.input if i):
            continue
        for j, i in enumerate(node.input):
            if i and i not in dynamic:
                # GroupQueryAttention's rotary tables (inputs 7, 8) are read a row per position.
                rows = node.op_type in ("GroupQueryAttention", "Attention") and j in (7, 8)   # ai.amber's too
                readers[i].append("Gather:" + node.op_type if rows else node.op_type)
    total, unknown = 0, 0
    by_op: dict[str, int] = defaultdict(int)
    for name, ops in readers.items():
        if name not in shapes:
            unknown += 1
            continue
        dims, dtype = shapes[name]
        n = math.prod(dims) * helper.tensor_dtype_to_np_dtype(dtype).itemsize
        if dims and all(op.startswith("Gather") for op in ops):
            n //= max(1, dims[0])
        total += n
        by_op[next((op for op in ops if not op.startswith("Gather")), ops[0]).split(":")[-1]] += n
    return {"kernel_bytes": total, "by_op": {k: v for k, v in by_op.items() if v},
            "unknown_tensors": unknown}


def gguf_decode_bytes(path: str) -> dict[str, int]:
    """Tensor bytes one llama.cpp decode step reads: all tensors, except that token_embd counts
    one row when the model has its own output.weight (tied models read it whole, as the output)."""
    from gguf import GGUFReader
    tensors = {t.name: t for t in GGUFReader(path, "r").tensors}
    full = sum(int(t.n_bytes) for t in tensors.values())
    total = full
    emb = tensors.get("token_embd.weight")
    if emb is not None and "output.weight" in tensors:
        total -= int(emb.n_bytes) - int(emb.n_bytes) // int(emb.shape[-1])
    return {"decode_bytes": total, "tensor_bytes": full}
