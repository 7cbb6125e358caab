"""Builds the ONNX decoder graph (optimum / onnx-community I/O layout) from a `ModelSpec`.

Per layer: RMSNorm (fused with the residual add), one MatMulNBits for Q|K|V where their forms
match, `com.microsoft.GroupQueryAttention` with rotary inside, output projection, RMSNorm, one
MatMulNBits for gate|up, SiLU, down projection. Only the last position's logits are computed.
What other architectures add or change (Q/K norms, post-norms, GeGLU, soft-caps, sliding windows,
per-layer rotary) comes from graph_blocks.py, driven by the table in arch.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import graph_blocks as blocks
from .gguf_source import ModelSpec
from .weights import BLOCK, Weight, concat_rows, pack_nibbles

MS = "com.microsoft"
OPSET = 21
IR_VERSION = 10   # onnx 1.23 writes IR 14 by default, which ONNX Runtime 1.31/1.32 rejects
INT64_MAX = np.iinfo(np.int64).max


@dataclass
class LayerWeights:
    attn_norm: np.ndarray
    ffn_norm: np.ndarray
    q: Weight
    k: Weight
    v: Weight
    o: Weight
    gate: Weight
    up: Weight
    down: Weight
    q_bias: np.ndarray | None = None
    k_bias: np.ndarray | None = None
    v_bias: np.ndarray | None = None
    q_norm: np.ndarray | None = None          # per-head Q/K RMSNorm (qwen3, gemma3)
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None  # gemma's norms of the attention / MLP outputs
    post_ffn_norm: np.ndarray | None = None


@dataclass
class ModelWeights:
    embedding: Weight
    output: Weight | None          # None: tied to the embedding
    final_norm: np.ndarray
    layers: list[LayerWeights] = field(default_factory=list)
    rope_factors: np.ndarray | None = None   # llama3 frequency factors (rope_freqs.weight)
    rope_long: np.ndarray | None = None      # phi3 long-context factors (rope_factors_long/short.weight)
    rope_short: np.ndarray | None = None


@dataclass
class QInits:
    """Initializer names of one quantized weight."""
    packed: list[str]               # one MatMulNBits B input, or two (hi, lo nibbles of 8-bit)
    scales: str
    zero_points: str | None = None  # float, only for gathered (embedding) rows


def pack_nibbles_pairs(levels: np.ndarray) -> np.ndarray:
    """uint8 levels [N, 2m] -> [N * m] bytes, low nibble first (MatMulNBits' zero points)."""
    return (levels[:, 0::2] | (levels[:, 1::2] << 4)).astype(np.uint8).reshape(-1)


class _Graph:
    """A tiny helper around onnx.helper that names things uniquely."""

    def __init__(self, accuracy_level: int) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.accuracy_level = accuracy_level
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def init(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def const(self, arr: Any, dtype: Any = np.int64) -> str:
        return self.init(self.name("const"), np.asarray(arr, dtype=dtype))

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, outputs: list[str] | None = None,
           domain: str = "", **attrs: Any) -> list[str]:
        outs = outputs or [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type),
                                           domain=domain, **attrs))
        return outs

    def op1(self, op_type: str, inputs: list[str], **kw: Any) -> str:
        return self.op(op_type, inputs, **kw)[0]

    # ---- building blocks -------------------------------------------------------------------
    def quant_inits(self, prefix: str, w: Weight, with_zero_points: bool = False) -> QInits:
        """Initializers for a quantized weight (float zero points only where rows are gathered)."""
        assert w.values is not None and w.scales is not None
        scales = self.init(f"{prefix}.scales", w.scales.reshape(-1).astype(np.float32))
        zps = None
        if with_zero_points and w.zero_points is not None:
            zps = self.init(f"{prefix}.zero_points", w.zero_points.reshape(-1).astype(np.float32))
        if w.kind == "q8" and self.accuracy_level == 0:
            # Exact 8-bit: q = 16*hi + lo, each nibble a 4-bit MatMulNBits (ORT's 8-bit CPU kernel
            # either dequantizes every call or quantizes the activations).
            hi = self.init(f"{prefix}.qweight_hi", pack_nibbles(w.values >> 4))
            lo = self.init(f"{prefix}.qweight_lo", pack_nibbles(w.values & 0x0F))
            return QInits([hi, lo], scales, zps)
        return QInits([self.init(f"{prefix}.qweight", w.packed())], scales, zps)

    def _block_sums(self, x: str, w: Weight) -> str:
        blocks = self.op1("Reshape", [x, self.const([0, 0, w.k // BLOCK, BLOCK])])
        return self.op1("ReduceSum", [blocks, self.const([-1])], keepdims=0)      # [B, S, nb]

    def _matmul_nbits(self, x: str, packed: str, scales: str, w: Weight, bits: int, level: int) -> str:
        return self.op1("MatMulNBits", [x, packed, scales], domain=MS, K=w.k, N=w.n, bits=bits,
                        block_size=BLOCK, accuracy_level=level)

    def linear(self, x: str, w: Weight, prefix: str, bias: np.ndarray | None = None,
               params: QInits | None = None) -> str:
        if w.kind == "dense":
            assert w.dense is not None
            wt = self.init(f"{prefix}.weight", np.ascontiguousarray(w.dense.T))
            if w.dense.dtype == np.float16:
                wt = self.op1("Cast", [wt], to=TensorProto.FLOAT)
            y = self.op1("MatMul", [x, wt])
        else:
            assert w.scales is not None
            q = params or self.quant_inits(prefix, w)
            nb = w.k // BLOCK
            # Per block, sum_i (q_i - z) s x_i. The matmuls run with ORT's default integer zero
            # point z0 (float zero points put its CPU kernel on a ~10x slower path); the
            # difference is added back exactly: sum_b blocksum(x)_b * (z0 - z_b) s_b.
            correction = np.zeros((w.n, nb), np.float32)
            zp_input: list[str] = []
            if w.zero_points is not None and self.accuracy_level == 4 and w.bits == 4:
                # With int8 activations the correction should stay small: use the nearest integer
                # zero point in the kernel and correct only the remainder.
                zint = np.clip(np.rint(w.zero_points), 0, 15).astype(np.uint8)
                if nb % 2:
                    zint = np.concatenate([zint, np.zeros((w.n, 1), np.uint8)], axis=1)
                zp_input = [self.init(f"{prefix}.zero_points_u4", pack_nibbles_pairs(zint))]
                correction += (np.clip(np.rint(w.zero_points), 0, 15) - w.zero_points) * w.scales
            elif w.zero_points is not None:
                correction += (2.0 ** (w.bits - 1) - w.zero_points) * w.scales
            if len(q.packed) == 2:
                # 8-bit as two nibbles: s(q - 128) = 16s(hi - 8) + s(lo - 8) + 8s.
                hi_scales = self.op1("Mul", [q.scales, self.const(16.0, np.float32)])
                y = self.op1("Add", [self._matmul_nbits(x, q.packed[0], hi_scales, w, 4, 0),
                                     self._matmul_nbits(x, q.packed[1], q.scales, w, 4, 0)])
                correction += 8.0 * w.scales
            else:
                y = self.op1("MatMulNBits", [x, q.packed[0], q.scales] + zp_input, domain=MS, K=w.k, N=w.n,
                             bits=w.bits, block_size=BLOCK, accuracy_level=self.accuracy_level)
            if np.any(correction):
                corr = self.init(f"{prefix}.zp_correction", np.ascontiguousarray(correction.T))
                y = self.op1("Add", [y, self.op1("MatMul", [self._block_sums(x, w), corr])])
        if bias is not None:
            y = self.op1("Add", [y, self.init(f"{prefix}.bias", bias.astype(np.float32))])
        return y

    def _levels(self, packed: str, ids: str, nb: int) -> str:
        """Gathers packed 4-bit rows and unpacks them: uint8 levels [B, S, nb, 32]."""
        rows = self.op1("Gather", [packed, ids])                                # [B, S, nb, 16]
        lo = self.op1("BitwiseAnd", [rows, self.const(15, np.uint8)])
        hi = self.op1("BitShift", [rows, self.const(4, np.uint8)], direction="RIGHT")
        pair = self.op1("Concat", [self.op1("Unsqueeze", [lo, self.const([-1])]),
                                   self.op1("Unsqueeze", [hi, self.const([-1])])], axis=-1)
        return self.op1("Reshape", [pair, self.const([0, 0, nb, BLOCK])])

    def embedding(self, ids: str, w: Weight, params: QInits | None) -> str:
        """Gathers rows and dequantizes only those (the table stays quantized in memory)."""
        if w.kind == "dense":
            assert w.dense is not None
            table = self.init("model.embed_tokens.weight", w.dense)
            rows = self.op1("Gather", [table, ids])
            return self.op1("Cast", [rows], to=TensorProto.FLOAT) if w.dense.dtype == np.float16 else rows
        assert params is not None
        nb = w.k // BLOCK
        if w.kind == "q4":
            levels = self.op1("Cast", [self._levels(params.packed[0], ids, nb)], to=TensorProto.FLOAT)
        elif len(params.packed) == 2:
            hi = self.op1("Cast", [self._levels(params.packed[0], ids, nb)], to=TensorProto.FLOAT)
            lo = self.op1("Cast", [self._levels(params.packed[1], ids, nb)], to=TensorProto.FLOAT)
            levels = self.op1("Add", [self.op1("Mul", [hi, self.const(16.0, np.float32)]), lo])
        else:
            levels = self.op1("Cast", [self.op1("Gather", [params.packed[0], ids])], to=TensorProto.FLOAT)
        scale2d = self.op1("Reshape", [params.scales, self.const([w.n, nb, 1])])
        if params.zero_points is not None:
            zp2d = self.op1("Reshape", [params.zero_points, self.const([w.n, nb, 1])])
            levels = self.op1("Sub", [levels, self.op1("Gather", [zp2d, ids])])
        else:
            levels = self.op1("Sub", [levels, self.const(2.0 ** (w.bits - 1), np.float32)])
        values = self.op1("Mul", [levels, self.op1("Gather", [scale2d, ids])])
        return self.op1("Reshape", [values, self.const([0, 0, w.k])])

    def lm_head(self, x: str, w: Weight, params: QInits | None, tied: bool) -> str:
        if w.kind == "dense" and tied:
            # The embedding table is [V, K]: multiply by its transpose without a second copy.
            flat = self.op1("Reshape", [x, self.const([-1, w.k])])
            table = "model.embed_tokens.weight"
            if w.dense is not None and w.dense.dtype == np.float16:
                table = self.op1("Cast", [table], to=TensorProto.FLOAT)
            y = self.op1("Gemm", [flat, table], transB=1)
            shape = self.op1("Concat", [self.op1("Slice", [self.op1("Shape", [x]), self.const([0]), self.const([2])]),
                                        self.const([w.n])], axis=0)
            return self.op1("Reshape", [y, shape], outputs=["logits"])
        out = self.linear(x, w, "lm_head", params=params)
        return self.op1("Identity", [out], outputs=["logits"])


def build_graph(spec: ModelSpec, weights: ModelWeights, accuracy_level: int = 0,
                progress: Callable[[int, int], None] | None = None) -> onnx.ModelProto:
    """The whole decoder as an ONNX model (weights inline; the caller saves them externally)."""
    g = _Graph(accuracy_level)
    hd, nh, nkv = spec.head_dim, spec.n_head, spec.n_head_kv
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", 1, spec.vocab_size])]
    kv_shape_in = ["batch_size", nkv, "past_sequence_length", hd]
    kv_shape_out = ["batch_size", nkv, "present_sequence_length", hd]
    for i in range(spec.n_layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT, kv_shape_in))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", TensorProto.FLOAT, kv_shape_out))

    # GroupQueryAttention takes lengths instead of a mask: seqlens_k = valid tokens - 1.
    seqlens = g.op1("ReduceSum", ["attention_mask", g.const([1])], keepdims=0)
    seqlens_k = g.op1("Cast", [g.op1("Sub", [seqlens, g.const(1)])], to=TensorProto.INT32)
    total_len = g.op1("Cast", [g.op1("Gather", [g.op1("Shape", ["attention_mask"]), g.const(1)])], to=TensorProto.INT32)
    ropes = blocks.rope_inputs(g, spec, weights, total_len)   # (cos, sin) per layer

    emb = weights.embedding
    emb_params = None if emb.kind == "dense" else g.quant_inits("model.embed_tokens", emb, with_zero_points=True)
    h = blocks.scale_embedding(g, spec, g.embedding("input_ids", emb, emb_params))
    x = g.op1("SimplifiedLayerNormalization", [h, g.init("model.layers.0.input_layernorm.weight",
                                                           weights.layers[0].attn_norm)],
              axis=-1, epsilon=spec.rms_eps)
    n_layers = len(weights.layers)
    for i, lw in enumerate(weights.layers):
        p = f"model.layers.{i}"
        # Attention: fuse Q|K|V into one matmul when their storage forms agree.
        qkv_w = concat_rows([lw.q, lw.k, lw.v])
        if qkv_w is not None:
            bias = None
            if lw.q_bias is not None:
                bias = np.concatenate([lw.q_bias, lw.k_bias, lw.v_bias])  # type: ignore[list-item]
            qkv = g.linear(x, qkv_w, f"{p}.self_attn.qkv_proj", bias)
            qkv_inputs = [qkv, "", ""]
        else:
            qkv_inputs = [g.linear(x, lw.q, f"{p}.self_attn.q_proj", lw.q_bias),
                          g.linear(x, lw.k, f"{p}.self_attn.k_proj", lw.k_bias),
                          g.linear(x, lw.v, f"{p}.self_attn.v_proj", lw.v_bias)]
        qkv_inputs = blocks.qk_norm(g, spec, lw, p, qkv_inputs)
        attn = g.op("GroupQueryAttention",
                    qkv_inputs + [f"past_key_values.{i}.key", f"past_key_values.{i}.value",
                                  seqlens_k, total_len, *ropes[i]],
                    outputs=[g.name("attn"), f"present.{i}.key", f"present.{i}.value"], domain=MS,
                    num_heads=nh, kv_num_heads=nkv, do_rotary=1, rotary_interleaved=0,
                    **blocks.gqa_attrs(spec, i))[0]
        if i == n_layers - 1:
            # Only the last position feeds the logits: the last layer's tail runs on one token.
            last = [g.const([-1]), g.const([INT64_MAX]), g.const([1])]
            attn = g.op1("Slice", [attn] + last)
            h = g.op1("Slice", [h] + last)
        o = g.linear(attn, lw.o, f"{p}.self_attn.o_proj")
        o = blocks.post_norm(g, spec, o, lw.post_attn_norm, f"{p}.post_attention_norm.weight")
        x, _, _, h = g.op("SkipSimplifiedLayerNormalization",
                          [o, h, g.init(f"{p}.post_attention_layernorm.weight", lw.ffn_norm)],
                          outputs=[g.name("x"), "", "", g.name("h")], domain=MS, epsilon=spec.rms_eps)
        gu_w = concat_rows([lw.gate, lw.up])
        if gu_w is not None:
            gu = g.linear(x, gu_w, f"{p}.mlp.gate_up_proj")
            gate, up = g.op("Split", [gu, g.const([lw.gate.n, lw.up.n])], n_out=2, axis=-1)
        else:
            gate = g.linear(x, lw.gate, f"{p}.mlp.gate_proj")
            up = g.linear(x, lw.up, f"{p}.mlp.up_proj")
        act = blocks.activation(g, spec, gate, up)
        down = g.linear(act, lw.down, f"{p}.mlp.down_proj")
        down = blocks.post_norm(g, spec, down, lw.post_ffn_norm, f"{p}.post_feedforward_layernorm.weight")
        gamma = (weights.layers[i + 1].attn_norm if i + 1 < n_layers else weights.final_norm)
        gname = f"model.layers.{i + 1}.input_layernorm.weight" if i + 1 < n_layers else "model.norm.weight"
        x, _, _, h = g.op("SkipSimplifiedLayerNormalization", [down, h, g.init(gname, gamma)],
                          outputs=[g.name("x"), "", "", g.name("h")], domain=MS, epsilon=spec.rms_eps)
        if progress:
            progress(i + 1, n_layers)

    if weights.output is None:
        g.lm_head(x, emb, emb_params, tied=True)
    else:
        g.lm_head(x, weights.output, None, tied=False)
    blocks.final_softcap(g, spec)

    graph = helper.make_graph(g.nodes, "amber_decoder", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1)],
                              producer_name="amber", ir_version=IR_VERSION)
    return model
