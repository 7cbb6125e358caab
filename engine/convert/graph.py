"""Builds the ONNX decoder graph (optimum / onnx-community I/O layout) from a `ModelSpec`.

Per layer: RMSNorm (fused with the residual add), one MatMulNBits for Q|K|V where their forms
match, `com.microsoft.GroupQueryAttention` with rotary inside, output projection, RMSNorm, one
MatMulNBits for gate|up, SiLU, down projection. Only the last position's logits are computed.
What other architectures add or change (Q/K norms, post-norms, GeGLU, soft-caps, sliding windows,
per-layer rotary) comes from graph_blocks.py, driven by the table in arch.py.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from . import graph_blocks as blocks
from .gguf_source import ModelSpec
from .model_weights import LayerWeights, ModelWeights
from .native_form import OP_DOMAIN as NATIVE_DOMAIN
from .native_attention import use_native_attention
from .native_swiglu import use_native_swiglu
from engine.onnx.graph_scan import AMBER_PRODUCER
from engine.onnx.linear import MS, ModelGraph
from engine.onnx.weights import concat_rows
from engine.onnx.writer import DataWriter

OPSET = 21
IR_VERSION = 10   # onnx 1.23 writes IR 14 by default, which ONNX Runtime 1.31/1.32 rejects
INT64_MAX = np.iinfo(np.int64).max


def build_graph(spec: ModelSpec, weights: ModelWeights, accuracy_level: int = 0,
                progress: Callable[[int, int], None] | None = None, writer: DataWriter | None = None,
                layer: Callable[[int], LayerWeights] | None = None) -> onnx.ModelProto:
    """The whole decoder as an ONNX model.

    With `writer` the initializers stream into its data file as they are made; with `layer` the
    layers are loaded one at a time (weights.layers may then be empty), so only about one layer's
    arrays are in memory at once. Without them, the weights are inline (small tests)."""
    g = ModelGraph(accuracy_level, writer)
    get_layer = layer or (lambda i: weights.layers[i])
    n_layers = spec.n_layers if layer is not None else len(weights.layers)
    hd, nh, nkv = spec.head_dim, spec.n_head, spec.n_head_kv
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", 1, spec.vocab_size])]
    kv_shape_in: list[str | int | None] = ["batch_size", nkv, "past_sequence_length", hd]
    kv_shape_out: list[str | int | None] = ["batch_size", nkv, "present_sequence_length", hd]
    for i in range(n_layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT, kv_shape_in))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", TensorProto.FLOAT, kv_shape_out))

    # GroupQueryAttention takes lengths instead of a mask: seqlens_k = valid tokens - 1.
    seqlens = g.op1("ReduceSum", ["attention_mask", g.const([1])], keepdims=0)
    seqlens_k = g.op1("Cast", [g.op1("Sub", [seqlens, g.const(1)])], to=TensorProto.INT32)
    total_len = g.op1("Cast", [g.op1("Gather", [g.op1("Shape", ["attention_mask"]), g.const(1)])], to=TensorProto.INT32)
    ropes = blocks.rope_inputs(g, spec, weights, total_len)   # (cos, sin) per layer

    emb = weights.embedding
    emb_dense16 = emb.kind == "dense" and emb.dense is not None and emb.dense.dtype == np.float16
    emb_params = None if emb.kind == "dense" else g.quant_inits("model.embed_tokens", emb)
    h = blocks.scale_embedding(g, spec, g.embedding("input_ids", emb, emb_params))
    lw = get_layer(0)
    x = g.op1("SimplifiedLayerNormalization", [h, g.init("model.layers.0.input_layernorm.weight", lw.attn_norm)],
              axis=-1, epsilon=spec.rms_eps)
    for i in range(n_layers):
        p = f"model.layers.{i}"
        # Attention: fuse Q|K|V into one matmul when their storage forms agree.
        qkv_w = concat_rows([lw.q, lw.k, lw.v])
        if qkv_w is not None:
            bias = None
            if lw.q_bias is not None:
                bias = np.concatenate([lw.q_bias, lw.k_bias, lw.v_bias])
            for part in (lw.q, lw.k, lw.v):
                part.release()
            qkv = g.linear(x, qkv_w, f"{p}.self_attn.qkv_proj", bias)
            qkv_inputs = [qkv, "", ""]
        else:
            # Different GGUF types (Q4_K_M's Q5_0 Q/K with a Q8_0 V) can still share one kernel form.
            parts = g.linear_group(x, [lw.q, lw.k, lw.v], [f"{p}.self_attn.{n}_proj" for n in "qkv"],
                                   [lw.q_bias, lw.k_bias, lw.v_bias])
            qkv_inputs = parts if len(parts) == 3 else [parts[0], "", ""]
        del qkv_w
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
            n_gate, n_up = lw.gate.n, lw.up.n
            lw.gate.release()
            lw.up.release()
            gu = g.linear(x, gu_w, f"{p}.mlp.gate_up_proj")
            gate, up = g.op("Split", [gu, g.const([n_gate, n_up])], n_out=2, axis=-1)
        else:
            n_gate, n_up = lw.gate.n, lw.up.n
            parts = g.linear_group(x, [lw.gate, lw.up], [f"{p}.mlp.gate_proj", f"{p}.mlp.up_proj"], [None, None])
            gate, up = parts if len(parts) == 2 else g.op("Split", [parts[0], g.const([n_gate, n_up])],
                                                          n_out=2, axis=-1)
        del gu_w
        act = blocks.activation(g, spec, gate, up)
        down = g.linear(act, lw.down, f"{p}.mlp.down_proj")
        down = blocks.post_norm(g, spec, down, lw.post_ffn_norm, f"{p}.post_feedforward_layernorm.weight")
        if i + 1 < n_layers:
            lw = get_layer(i + 1)
            gamma, gname = lw.attn_norm, f"model.layers.{i + 1}.input_layernorm.weight"
        else:
            gamma, gname = weights.final_norm, "model.norm.weight"
        x, _, _, h = g.op("SkipSimplifiedLayerNormalization", [down, h, g.init(gname, gamma)],
                          outputs=[g.name("x"), "", "", g.name("h")], domain=MS, epsilon=spec.rms_eps)
        if progress:
            progress(i + 1, n_layers)

    output = weights.output_fn() if weights.output_fn is not None else weights.output
    if output is None:
        g.lm_head(x, emb, emb_params, tied=True, dense16=emb_dense16)
    else:
        g.lm_head(x, output, None, tied=False)
    blocks.final_softcap(g, spec)

    graph = helper.make_graph(g.nodes, "amber_decoder", inputs, outputs, g.inits)
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1)]
    if g.native:
        opsets.append(helper.make_opsetid(NATIVE_DOMAIN, 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name=AMBER_PRODUCER, ir_version=IR_VERSION)
    if g.native:   # ai.amber.Attention over float16 KV where the op supports every layer
        use_native_attention(model, hd)
        use_native_swiglu(model)   # gate|up + SiLU + Mul as one GgufMatMul (its SwiGLU epilogue)
    return model
