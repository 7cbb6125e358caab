"""ai.amber.Attention (engine/native/src: generic/attn.c, x86/ and arm/ attn_*.c, ort/attn_op.c): GQA over float16 KV.

Native-form conversions (engine/convert/native_form.py) emit it in place of ONNX Runtime's
com.microsoft.GroupQueryAttention when the library is available and the layer's attributes are
ones the op implements; AMBER_NATIVE_ATTENTION=0 keeps GroupQueryAttention (float32 KV) in new
conversions (A/B benches). A graph with the op has float16 past/present tensors; the runtime binds
past and present to one buffer, as for GroupQueryAttention (engine/runtime/kvcache.py).
"""
from __future__ import annotations

from typing import Any

import engine.native as native
from engine import config

OP_NAME = "Attention"
GQA = "GroupQueryAttention"
MS_DOMAIN = "com.microsoft"
ENV = config.NATIVE_ATTENTION
MAX_HEAD_DIM = 1024      # attn_op.c's bound
# GroupQueryAttention attributes the op implements (with the values it takes, where restricted).
SUPPORTED_ATTRS = {"num_heads", "kv_num_heads", "do_rotary", "rotary_interleaved", "scale",
                   "local_window_size", "softcap"}


def env_enabled() -> bool:
    """AMBER_NATIVE_ATTENTION is not "0"."""
    return config.settings().native_attention


def form(library: bool) -> str:
    """The attention form new native conversions get: "amber" (this op) or "gqa"."""
    return "amber" if library and env_enabled() else "gqa"


def enabled() -> bool:
    """New native-form conversions use the op: the library loads and AMBER_NATIVE_ATTENTION != 0."""
    if not env_enabled():
        return False
    try:
        return bool(native.available())
    except Exception:  # noqa: BLE001 - a broken build is "not available"
        return False


def is_attention(node: Any) -> bool:
    """The node is ai.amber.Attention (an onnx NodeProto or anything with op_type and domain)."""
    return bool(node.op_type == OP_NAME and node.domain == native.OP_DOMAIN)


def uses_attention(proto: Any) -> bool:
    """The top-level graph has an ai.amber.Attention node."""
    return any(is_attention(n) for n in proto.graph.node)


def node_supported(node: Any, head_dim: int) -> bool:
    """A GroupQueryAttention node the op can replace: only the attributes above, no interleaved
    rotary, a head size within the op's bound, and Amber's 9 inputs at most."""
    attrs = {a.name: a for a in node.attribute}
    if not set(attrs) <= SUPPORTED_ATTRS or len(node.input) > 9 or not 0 < head_dim <= MAX_HEAD_DIM:
        return False
    inter = attrs.get("rotary_interleaved")
    return inter is None or int(inter.i) == 0
