"""Native form: Amber's ai.amber.Attention (float16 KV) in place of GroupQueryAttention.

Run on a finished graph that already imports the ai.amber domain (some matrix is a GgufMatMul):
every GroupQueryAttention node the op supports becomes ai.amber.Attention and the KV inputs and
outputs become float16. All or nothing: if one layer's node is not supported, the graph keeps
GroupQueryAttention everywhere (the KV cache has one dtype for every layer).
"""
from __future__ import annotations

import onnx
from onnx import TensorProto

import engine.native.attention as attention
from engine.native import OP_DOMAIN

KV_PREFIXES = ("past_key_values.", "present.")


def use_native_attention(model: onnx.ModelProto, head_dim: int) -> bool:
    """Rewrites `model` in place when the op is enabled and supports every attention node; True
    when it did."""
    if not attention.enabled() or not any(o.domain == OP_DOMAIN for o in model.opset_import):
        return False
    nodes = [n for n in model.graph.node if n.op_type == attention.GQA and n.domain == attention.MS_DOMAIN]
    if not nodes or not all(attention.node_supported(n, head_dim) for n in nodes):
        return False
    for n in nodes:
        n.op_type = attention.OP_NAME
        n.domain = OP_DOMAIN
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.name.startswith(KV_PREFIXES):
            vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    return True
