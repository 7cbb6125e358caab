"""Builds an optimum-style decoder with plain attention (no GroupQueryAttention) for the tests.

The graph is what `optimum` exports for Llama/Qwen2 without fused attention kernels: standard
ONNX ops only (Gather, MatMul, Softmax, Concat, ...), the past KV concatenated with the new
keys/values, and logits for every position:

  inputs   input_ids [b, s] int64, attention_mask [b, past + s] int64, position_ids [b, s] int64,
           past_key_values.{i}.key|value [b, kv_heads, past, head_dim] float32
  outputs  logits [b, s, vocab] float32, present.{i}.key|value [b, kv_heads, past + s, head_dim]

It is built from the Hugging Face-order float weights that `tiny_gguf.write_tiny_gguf` returns
(rotary: HF rotate-half, angles from position_ids), so it shares no code with the importer.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .tiny_gguf import TinyModel

IR_VERSION = 10          # onnx 1.23 writes IR 14 by default, which ORT 1.31 rejects
OPSET = 21
# the converted folder's files that describe the model rather than its graph (its chat template too:
# a model without one is a base model, and refuses chat)
COPIED_FILES = ("config.json", "tokenizer.json", "generation_config.json", "tokenizer_config.json",
                "chat_template.jinja")


class _Graph:
    """A tiny helper over onnx.helper: unique names, initializers, nodes."""

    def __init__(self, prefix: str = "") -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0
        self.prefix = prefix      # If branches: names unique across the whole model

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{self.prefix}{hint}_{self._n}"

    def const(self, value: np.ndarray | float | int | list, hint: str = "c", dtype=None) -> str:
        arr = np.asarray(value, dtype=dtype)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, *inputs: str, hint: str | None = None, n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.name(hint or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def linear(self, x: str, w: np.ndarray, b: np.ndarray | None = None, hint: str = "proj") -> str:
        y = self.op("MatMul", x, self.const(np.ascontiguousarray(w.T), hint + "_w"), hint=hint)
        return self.op("Add", y, self.const(b, hint + "_b"), hint=hint) if b is not None else y

    def rms_norm(self, x: str, g: np.ndarray, eps: float) -> str:
        sq = self.op("Mul", x, x)
        ms = self.op("ReduceMean", sq, self.const([-1], "axes", np.int64), keepdims=1)
        inv = self.op("Reciprocal", self.op("Sqrt", self.op("Add", ms, self.const(np.float32(eps), "eps"))))
        return self.op("Mul", self.op("Mul", x, inv), self.const(g, "norm_w"), hint="norm")


def _decoder(model: TinyModel, with_past: bool = True, prefix: str = "") -> _Graph:
    """The decoder's nodes; outputs `{prefix}logits` and `{prefix}present.{i}.key|value`.
    Without past (the merged decoder's first-step branch) the past inputs are not read."""
    c, W = model.config, model.weights
    if "rope_factors" in W or c.rope_linear:
        raise NotImplementedError("plain_onnx: rope scaling is not built (not needed by the tests)")
    _D, H, KV, hd, L = c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_layers
    group = H // KV
    g = _Graph(prefix)

    # Rotary tables from position_ids: [b, 1, s, hd] (HF: emb = cat(freqs, freqs)).
    inv_freq = 1.0 / (c.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    pos = g.op("Cast", "position_ids", to=TensorProto.FLOAT)
    pos = g.op("Unsqueeze", pos, g.const([2], "ax", np.int64))                       # [b, s, 1]
    ang = g.op("Mul", pos, g.const(inv_freq.astype(np.float32), "inv_freq"))          # [b, s, hd/2]
    emb = g.op("Concat", ang, ang, axis=-1)                                           # [b, s, hd]
    emb = g.op("Unsqueeze", emb, g.const([1], "ax", np.int64))                       # [b, 1, s, hd]
    cos, sin = g.op("Cos", emb, hint="cos"), g.op("Sin", emb, hint="sin")

    # Mask [b, 1, s, total]: key j is visible to query i when j <= position_ids[i] and mask[j] == 1.
    total = g.op("Gather", g.op("Shape", "attention_mask"), g.const(np.int64(1), "i1"), axis=0)
    key_pos = g.op("Range", g.const(np.int64(0), "zero"), total, g.const(np.int64(1), "one"))  # [total]
    q_pos = g.op("Unsqueeze", "position_ids", g.const([1, 3], "ax", np.int64))       # [b, 1, s, 1]
    causal = g.op("LessOrEqual", key_pos, q_pos)                                     # [b, 1, s, total]
    pad = g.op("Cast", g.op("Unsqueeze", "attention_mask", g.const([1, 2], "ax", np.int64)), to=TensorProto.BOOL)
    visible = g.op("And", causal, pad, hint="visible")
    very_negative = g.const(np.float32(np.finfo(np.float32).min), "neg")

    half = hd // 2
    starts0, starts1 = g.const([0], "s", np.int64), g.const([half], "s", np.int64)
    ends1, ends2 = g.const([half], "e", np.int64), g.const([hd], "e", np.int64)
    last_axis = g.const([-1], "ax", np.int64)

    def rotary(x: str) -> str:
        x1 = g.op("Slice", x, starts0, ends1, last_axis)
        x2 = g.op("Slice", x, starts1, ends2, last_axis)
        rot = g.op("Concat", g.op("Neg", x2), x1, axis=-1)
        return g.op("Add", g.op("Mul", x, cos), g.op("Mul", rot, sin), hint="rope")

    def heads(x: str, n: int) -> str:   # [b, s, n*hd] -> [b, n, s, hd]
        r = g.op("Reshape", x, g.const([0, 0, n, hd], "shape", np.int64))
        return g.op("Transpose", r, perm=[0, 2, 1, 3])

    def repeat_kv(x: str) -> str:       # [b, KV, t, hd] -> [b, H, t, hd], head h uses kv h // group
        if group == 1:
            return x
        u = g.op("Unsqueeze", x, g.const([2], "ax", np.int64))
        u = g.op("Concat", *([u] * group), axis=2)
        return g.op("Reshape", u, g.const([0, H, -1, hd], "shape", np.int64))

    x = g.op("Gather", g.const(W["embed"], "embed"), "input_ids", axis=0, hint="embeds")
    scale = g.const(np.float32(1.0 / np.sqrt(hd)), "scale")
    for i in range(L):
        p = f"layers.{i}."
        h = g.rms_norm(x, W[p + "attn_norm"], c.rms_eps)
        q = rotary(heads(g.linear(h, W[p + "q"], W.get(p + "q_bias"), f"q{i}"), H))
        k = rotary(heads(g.linear(h, W[p + "k"], W.get(p + "k_bias"), f"k{i}"), KV))
        v = heads(g.linear(h, W[p + "v"], W.get(p + "v_bias"), f"v{i}"), KV)
        for kind, new in (("key", k), ("value", v)):
            if with_past:
                g.nodes.append(helper.make_node("Concat", [f"past_key_values.{i}.{kind}", new],
                                                [f"{prefix}present.{i}.{kind}"], axis=2))
            else:
                g.nodes.append(helper.make_node("Identity", [new], [f"{prefix}present.{i}.{kind}"]))
        keys, values = repeat_kv(f"{prefix}present.{i}.key"), repeat_kv(f"{prefix}present.{i}.value")
        scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", keys, perm=[0, 1, 3, 2])), scale)
        scores = g.op("Where", visible, scores, very_negative)
        attn = g.op("MatMul", g.op("Softmax", scores, axis=-1), values)              # [b, H, s, hd]
        attn = g.op("Reshape", g.op("Transpose", attn, perm=[0, 2, 1, 3]),
                    g.const([0, 0, H * hd], "shape", np.int64))
        x = g.op("Add", x, g.linear(attn, W[p + "o"], hint=f"o{i}"), hint="resid")
        h = g.rms_norm(x, W[p + "ffn_norm"], c.rms_eps)
        gate = g.linear(h, W[p + "gate"], hint=f"gate{i}")
        act = g.op("Mul", gate, g.op("Sigmoid", gate))
        up = g.linear(h, W[p + "up"], hint=f"up{i}")
        x = g.op("Add", x, g.linear(g.op("Mul", act, up), W[p + "down"], hint=f"down{i}"), hint="resid")
    x = g.rms_norm(x, W["final_norm"], c.rms_eps)
    g.nodes.append(helper.make_node("MatMul", [x, g.const(np.ascontiguousarray(W.get("lm_head", W["embed"]).T),
                                                             "lm_head")], [f"{prefix}logits"]))
    return g


def _io(model: TinyModel) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]]:
    c = model.config
    KV, hd, L, V = c.n_head_kv, c.head_dim, c.n_layers, model.weights["embed"].shape[0]

    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    inputs = [helper.make_tensor_value_info("input_ids", i64, ["batch", "seq"]),
              helper.make_tensor_value_info("attention_mask", i64, ["batch", "total"]),
              helper.make_tensor_value_info("position_ids", i64, ["batch", "seq"])]
    outputs = [helper.make_tensor_value_info("logits", f32, ["batch", "seq", V])]
    for i in range(L):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", f32,
                                                        ["batch", KV, "past", hd]))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", f32, ["batch", KV, "total", hd]))
    return inputs, outputs


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="amber-tests-plain-onnx")
    proto.ir_version = IR_VERSION
    onnx.checker.check_model(proto, full_check=True)
    return proto


def build_plain_graph(model: TinyModel) -> onnx.ModelProto:
    g = _decoder(model)
    inputs, outputs = _io(model)
    return _model(helper.make_graph(g.nodes, "plain_decoder", inputs, outputs, initializer=g.inits))


def build_merged_graph(model: TinyModel) -> onnx.ModelProto:
    """The older optimum "merged" decoder (decoder_model_merged.onnx): one graph whose `If` on the
    `use_cache_branch` input runs either the with-past decoder or the first-step one (which
    ignores the past inputs), each branch holding its own copy of the weights."""
    inputs, outputs = _io(model)
    names = [o.name for o in outputs]

    def branch(with_past: bool, prefix: str) -> onnx.GraphProto:
        g = _decoder(model, with_past, prefix)
        outs = [helper.make_tensor_value_info(prefix + n, o.type.tensor_type.elem_type, None)
                for n, o in zip(names, outputs, strict=False)]
        return helper.make_graph(g.nodes, prefix + "branch", [], outs, initializer=g.inits)

    node = helper.make_node("If", ["use_cache_branch"], names, name="optimum::if",
                            then_branch=branch(True, "with_past/"), else_branch=branch(False, "no_past/"))
    inputs.append(helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1]))
    return _model(helper.make_graph([node], "merged_decoder", inputs, outputs))


def _copy_model_files(src: Path, dest: Path) -> None:
    for name in COPIED_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, dest / name)


def write_plain_model(model: TinyModel, gqa_dir: Path | str, dest: Path | str) -> Path:
    """Writes `dest/model.onnx` (plain attention) with config/tokenizer/generation_config copied
    from the converted (GroupQueryAttention) folder of the same weights."""
    gqa_dir, dest = Path(gqa_dir), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    onnx.save_model(build_plain_graph(model), str(dest / "model.onnx"))
    _copy_model_files(gqa_dir, dest)
    return dest


def write_merged_model(model: TinyModel, gqa_dir: Path | str, dest: Path | str) -> Path:
    """An optimum folder of the older merged layout: `onnx/decoder_model_merged.onnx` only."""
    gqa_dir, dest = Path(gqa_dir), Path(dest)
    (dest / "onnx").mkdir(parents=True, exist_ok=True)
    onnx.save_model(build_merged_graph(model), str(dest / "onnx" / "decoder_model_merged.onnx"))
    _copy_model_files(gqa_dir, dest)
    return dest
