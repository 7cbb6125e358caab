"""Native form: gate|up GgufMatMul + Split + SiLU + Mul fused into one GgufMatMul (epilogue=1).

graph.py emits, per SwiGLU layer whose gate and up share a GGUF type, `gu = GgufMatMul(x, W)`
(W: the gate's F rows then the up's F rows), `gate, up = Split(gu, [F, F], axis=-1)` and
`Mul(Mul(gate, Sigmoid(gate)), up)` (graph_blocks.activation). The op's SwiGLU epilogue
(engine/native/src/ort/ort_op.c) computes silu(x Wg) * (x Wu) per output tile, so the chunk x 2F
product, the Split and the three elementwise passes never exist in memory; its bits are the split
graph's under ONNX Runtime (MLAS's own SiLU kernel, engine/native/src/generic/swiglu.c). GeGLU and anything that
does not match exactly is left alone. AMBER_NATIVE_SWIGLU=0 keeps the unfused graph in new
conversions (A/B benches).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

from engine.native import OP_DOMAIN, OP_NAME
from engine import config

ENV = config.NATIVE_SWIGLU
ATTR = "epilogue"
SWIGLU = 1   # ort_op.c's EPILOGUE_SWIGLU


def env_enabled() -> bool:
    """AMBER_NATIVE_SWIGLU is not "0"."""
    return config.settings().native_swiglu


def form(library: bool) -> str:
    """The MLP form new native conversions get: "fused" (the epilogue) or "split"."""
    return "fused" if library and env_enabled() else "split"


def uses_swiglu(proto: onnx.ModelProto) -> bool:
    """The top-level graph has a GgufMatMul with the SwiGLU epilogue."""
    return any(_is_matmul(n) and _int_attr(n, ATTR) == SWIGLU for n in proto.graph.node)


def _is_matmul(node: onnx.NodeProto) -> bool:
    return node.op_type == OP_NAME and node.domain == OP_DOMAIN


def _int_attr(node: onnx.NodeProto, name: str) -> int | None:
    for a in node.attribute:
        if a.name == name and a.type == onnx.AttributeProto.INT:
            return int(a.i)
    return None


def _split_sizes(model: onnx.ModelProto, name: str) -> list[int] | None:
    for init in model.graph.initializer:
        if init.name == name:
            if init.data_location == onnx.TensorProto.EXTERNAL:
                return None
            return [int(v) for v in np.asarray(numpy_helper.to_array(init)).reshape(-1)]
    return None


def _other(node: onnx.NodeProto, name: str) -> str | None:
    """The Mul's input that is not `name` (None unless the node is a 2-input Mul using it once)."""
    if node.op_type != "Mul" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    a, b = str(node.input[0]), str(node.input[1])
    if a == name and b != name:
        return b
    if b == name and a != name:
        return a
    return None


def use_native_swiglu(model: onnx.ModelProto) -> int:
    """Rewrites `model` in place; returns how many layers were fused (0 when disabled)."""
    if not env_enabled():
        return 0
    nodes = list(model.graph.node)
    producer = {o: n for n in nodes for o in n.output}
    users: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for n in nodes:
        for i in set(n.input):
            users[i].append(n)
    graph_outputs = {o.name for o in model.graph.output}
    drop: set[int] = set()
    sizes: set[str] = set()
    fused = 0
    for split in nodes:
        if split.op_type != "Split" or split.domain not in ("", "ai.onnx") or len(split.input) != 2 \
                or len(split.output) != 2 or {a.name for a in split.attribute} - {"axis"}:
            continue
        axis = _int_attr(split, "axis")
        mm = producer.get(split.input[0])
        if axis != -1 or mm is None or not _is_matmul(mm) or len(mm.output) != 1 \
                or _int_attr(mm, ATTR) not in (None, 0) or len(users[mm.output[0]]) != 1:
            continue
        n = _int_attr(mm, "N")
        if n is None or n % 2 or _split_sizes(model, split.input[1]) != [n // 2, n // 2]:
            continue
        gate, up = split.output
        gate_users, up_users = users[gate], users[up]
        sig = next((u for u in gate_users if u.op_type == "Sigmoid" and u.domain in ("", "ai.onnx")), None)
        if sig is None or len(gate_users) != 2 or len(up_users) != 1:
            continue
        gmul = next(u for u in gate_users if u is not sig)
        if _other(gmul, gate) != sig.output[0] or len(users[sig.output[0]]) != 1:
            continue
        silu = gmul.output[0]
        if len(users[silu]) != 1:
            continue
        out_mul = users[silu][0]
        if out_mul is not up_users[0] or _other(out_mul, silu) != up:
            continue
        inner = {mm.output[0], gate, up, sig.output[0], silu}
        if inner & graph_outputs:
            continue
        mm.attribute.append(helper.make_attribute(ATTR, SWIGLU))
        mm.output[0] = out_mul.output[0]
        drop.update(id(x) for x in (split, sig, gmul, out_mul))
        sizes.add(split.input[1])
        fused += 1
    if fused:
        keep = [n for n in nodes if id(n) not in drop]
        used = {i for n in keep for i in n.input}
        del model.graph.node[:]
        model.graph.node.extend(keep)
        # the Split sizes are no longer read: drop those initializers when nothing else reads them
        dead = [i for i in model.graph.initializer if i.name in sizes and i.name not in used]
        for d in dead:
            model.graph.initializer.remove(d)
    return fused
