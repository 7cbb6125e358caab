"""One-node graphs of com.microsoft.GroupQueryAttention (float32 KV) and ai.amber.Attention
(float16 KV) with the same inputs, and random inputs for them (the attention tests)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import engine.native as native

F, H, I32 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32


@dataclass
class Case:
    """One attention call: shapes, attributes and the per-sequence valid lengths after it."""
    b: int = 1
    s: int = 1
    hq: int = 4
    hkv: int = 2
    d: int = 32
    cap: int = 64
    totals: list[int] = field(default_factory=lambda: [1])   # valid positions after the step
    packed: bool = False
    rotary: bool = True
    rot: int | None = None            # rotated dims (None: all)
    window: int = -1
    softcap: float = 0.0
    scale: float | None = None


def model(c: Case, amber: bool, attrs: dict[str, Any] | None = None, kv_type: int | None = None,
          input_types: dict[str, int] | None = None) -> bytes:
    """The one-node graph; `attrs` overrides/adds attributes (None values drop them)."""
    kvt = kv_type if kv_type is not None else (H if amber else F)
    types = {"query": F, "key": F, "value": F, "past_key": kvt, "past_value": kvt, "seqlens_k": I32,
             "total_sequence_length": I32, "cos_cache": F, "sin_cache": F, **(input_types or {})}
    names = ["query", "" if c.packed else "key", "" if c.packed else "value", "past_key", "past_value",
             "seqlens_k", "total_sequence_length", "cos_cache" if c.rotary else "", "sin_cache" if c.rotary else ""]
    inputs = [helper.make_tensor_value_info(n, types[n], None) for n in names if n]
    outputs = [helper.make_tensor_value_info("out", F, None),
               helper.make_tensor_value_info("present_key", kvt, None),
               helper.make_tensor_value_info("present_value", kvt, None)]
    kw: dict[str, Any] = {"num_heads": c.hq, "kv_num_heads": c.hkv, "do_rotary": int(c.rotary),
                          "rotary_interleaved": 0, "local_window_size": c.window,
                          "scale": float(c.scale if c.scale is not None else 1 / np.sqrt(c.d))}
    if c.softcap:
        kw["softcap"] = float(c.softcap)
    for k, v in (attrs or {}).items():
        if v is None:
            kw.pop(k, None)
        else:
            kw[k] = v
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node("Attention" if amber else "GroupQueryAttention", names,
                            ["out", "present_key", "present_value"],
                            domain=native.OP_DOMAIN if amber else "com.microsoft", **kw)
    graph = helper.make_graph([node], "attn", inputs, outputs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    if amber:
        opsets.append(helper.make_opsetid(native.OP_DOMAIN, 1))
    return helper.make_model(graph, opset_imports=opsets, ir_version=9).SerializeToString()


def session(data: bytes, threads: int = 1, amber: bool = True) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    if amber:
        assert native.register(so)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def feeds(c: Case, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs; the past holds random values (float16-exact) at every position."""
    q_width = (c.hq + 2 * c.hkv) * c.d if c.packed else c.hq * c.d
    f: dict[str, np.ndarray] = {"query": rng.standard_normal((c.b, c.s, q_width)).astype(np.float32)}
    if not c.packed:
        f["key"] = rng.standard_normal((c.b, c.s, c.hkv * c.d)).astype(np.float32)
        f["value"] = rng.standard_normal((c.b, c.s, c.hkv * c.d)).astype(np.float32)
    kv = (c.b, c.hkv, c.cap, c.d)
    f["past_key"] = rng.standard_normal(kv).astype(np.float16).astype(np.float32)
    f["past_value"] = rng.standard_normal(kv).astype(np.float16).astype(np.float32)
    f["seqlens_k"] = np.array([t - 1 for t in c.totals], np.int32)
    f["total_sequence_length"] = np.array([max(c.totals)], np.int32)
    if c.rotary:
        rot = c.rot or c.d
        inv = 1.0 / (10000 ** (np.arange(0, rot, 2) / rot))
        ang = np.outer(np.arange(c.cap + 8), inv)
        f["cos_cache"] = np.cos(ang).astype(np.float32)
        f["sin_cache"] = np.sin(ang).astype(np.float32)
    return f


def as_half(f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same feeds with float16 KV (for ai.amber.Attention)."""
    return {k: (v.astype(np.float16) if k.startswith("past_") else v) for k, v in f.items()}


def valid(c: Case, kv: np.ndarray) -> list[np.ndarray]:
    """Positions [0, total_b) of each sequence's KV (what both ops define)."""
    return [kv[i, :, :t] for i, t in enumerate(c.totals)]


def numpy_reference(c: Case, f: dict[str, np.ndarray]) -> list[np.ndarray]:
    """GroupQueryAttention's semantics in float64 numpy (for shapes ORT's kernel refuses, such as
    head sizes that are not a multiple of 16): out, present_key, present_value (float32 KV)."""
    d, g = c.d, c.hq // c.hkv
    q_all = f["query"].astype(np.float64)
    if c.packed:
        q, k, v = (q_all[..., :c.hq * d], q_all[..., c.hq * d:(c.hq + c.hkv) * d], q_all[..., (c.hq + c.hkv) * d:])
    else:
        q, k, v = q_all, f["key"].astype(np.float64), f["value"].astype(np.float64)
    cap = max(c.cap, int(f["total_sequence_length"][0]))
    pk = np.zeros((c.b, c.hkv, cap, d))
    pv = np.zeros((c.b, c.hkv, cap, d))
    out = np.zeros((c.b, c.s, c.hq * d))
    scale = c.scale if c.scale is not None else 1 / np.sqrt(d)

    def rope(x: np.ndarray, pos: int) -> np.ndarray:
        if not c.rotary:
            return x
        half = f["cos_cache"].shape[1]
        cos, sin = f["cos_cache"][pos].astype(np.float64), f["sin_cache"][pos].astype(np.float64)
        y = x.copy()
        y[:half] = x[:half] * cos - x[half:2 * half] * sin
        y[half:2 * half] = x[half:2 * half] * cos + x[:half] * sin
        return y

    for b, total in enumerate(c.totals):
        past = total - c.s
        pk[b, :, :past] = f["past_key"][b, :, :past]
        pv[b, :, :past] = f["past_value"][b, :, :past]
        for s in range(c.s):
            for h in range(c.hkv):
                pk[b, h, past + s] = rope(k[b, s, h * d:(h + 1) * d], past + s)
                pv[b, h, past + s] = v[b, s, h * d:(h + 1) * d]
        for s in range(c.s):
            p = past + s
            lo = max(0, p - c.window + 1) if c.window >= 0 else 0
            for hq in range(c.hq):
                qv = rope(q[b, s, hq * d:(hq + 1) * d], p)
                sc = pk[b, hq // g, lo:p + 1] @ qv * scale
                if c.softcap:
                    sc = c.softcap * np.tanh(sc / c.softcap)
                w = np.exp(sc - sc.max())
                out[b, s, hq * d:(hq + 1) * d] = (w / w.sum()) @ pv[b, hq // g, lo:p + 1]
    return [out.astype(np.float32), pk.astype(np.float32), pv.astype(np.float32)]
