"""Whole tiny models in the native form with GgufMatMul's SwiGLU epilogue (engine/convert/native_swiglu.py)
against the same native form with gate|up + Split + SiLU + Mul (AMBER_NATIVE_SWIGLU=0: what native
folders converted before the epilogue hold): graph contents and marker, logits, greedy tokens, GeGLU
left alone, and the pass refusing near-miss patterns."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.convert import FAST, convert_gguf
from engine.convert.native_swiglu import use_native_swiglu, uses_swiglu
from tests.support.reference_model import Q4K, prompt
from test_native_convert import _greedy_ids, _logits
from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf

BASE = TinyConfig(seed=90, wtype="Q8_0")
CFGS = [BASE, variant(BASE, wtype="Q4_0", seed=91), variant(BASE, wtype="Q4_K", seed=92, **Q4K),
        variant(BASE, wtype="Q4_1", arch="qwen2", bias=True, seed=93)]
IDS = [f"{c.arch}-{c.wtype}" for c in CFGS]
# Both forms run the same int8 dot products and the op's silu is ONNX Runtime's own (MLAS's SiLU
# kernel, engine/native/src/generic/swiglu.c): the logits are equal bit for bit.


@pytest.fixture(scope="module")
def native_kernels():
    import engine.native as native
    from engine.native import build
    if build.find_compiler() is None and native.library_path() is None:
        pytest.skip("no C compiler (cc/gcc/clang) to build the native kernels")
    build.build()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_KERNELS", "native")
        mp.delenv("AMBER_NATIVE_SWIGLU", raising=False)
        yield


@pytest.fixture(scope="module")
def folders(tmp_path_factory, native_kernels):
    """folders(cfg) -> (TinyModel, fused folder, split folder)."""
    root = tmp_path_factory.mktemp("native_swiglu")
    made: dict[str, tuple] = {}

    def get(cfg: TinyConfig):
        key = f"{cfg.arch}-{cfg.wtype}-{cfg.seed}"
        if key not in made:
            src = root / f"{key}.gguf"
            model = write_tiny_gguf(src, cfg)
            fused = convert_gguf(src, root / f"{key}.fused", kernels="native", accuracy_level=FAST)
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("AMBER_NATIVE_SWIGLU", "0")
                split = convert_gguf(src, root / f"{key}.split", kernels="native", accuracy_level=FAST)
            made[key] = (model, fused, split)
        return made[key]
    return get


def _graph(folder: Path) -> onnx.GraphProto:
    return onnx.load(str(folder / "model.onnx"), load_external_data=False).graph


def _ops(folder: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in _graph(folder).node:
        out[n.op_type] = out.get(n.op_type, 0) + 1
    return out


def _epilogues(folder: Path) -> int:
    return sum(1 for n in _graph(folder).node if n.op_type == "GgufMatMul"
               and any(a.name == "epilogue" and a.i == 1 for a in n.attribute))


@pytest.mark.parametrize("cfg", CFGS, ids=IDS)
def test_fused_graph_and_marker(folders, cfg):
    _, fused, split = folders(cfg)
    layers = json.loads((fused / "config.json").read_text())["num_hidden_layers"]
    assert _epilogues(fused) == layers and _epilogues(split) == 0
    a, b = _ops(fused), _ops(split)
    assert a.get("Split", 0) == b.get("Split", 0) - layers
    assert a.get("Sigmoid", 0) == b.get("Sigmoid", 0) - layers
    assert a.get("Mul", 0) == b.get("Mul", 0) - 2 * layers
    assert a["GgufMatMul"] == b["GgufMatMul"]
    assert json.loads((fused / "amber_import.json").read_text())["swiglu"] == "fused"
    assert json.loads((split / "amber_import.json").read_text())["swiglu"] == "split"


@pytest.mark.parametrize("cfg", CFGS, ids=IDS)
def test_fused_logits_equal_the_split_forms_bits(folders, cfg):
    model, fused, split = folders(cfg)
    for seed in range(3):
        ids = prompt(model, 21, seed)
        a, b = _logits(split, ids), _logits(fused, ids)
        assert np.abs(a).max() > 0.1
        assert np.array_equal(a, b), float(np.abs(a - b).max())


def test_fused_greedy_tokens_equal_the_split_form(folders):
    model, fused, split = folders(BASE)
    ids = list(map(int, prompt(model, 12, 5)))
    want = _greedy_ids(split, ids, 8)
    assert len(want) == 8
    assert _greedy_ids(fused, ids, 8) == want


def test_geglu_is_left_alone(folders):
    cfg = TinyConfig(arch="gemma2", n_embd=128, n_head=2, n_head_kv=1, head_dim=64, n_ff=256, sliding_window=16,
                     attn_softcap=2.0, final_softcap=3.0, wtype="Q8_0", seed=41)
    model, fused, _ = folders(cfg)
    assert _epilogues(fused) == 0
    assert json.loads((fused / "amber_import.json").read_text())["swiglu"] == "split"
    assert np.isfinite(_logits(fused, prompt(model, 9, 1))).all()


# ---- the pass on hand-made graphs ----

def _pattern(*, extra_gate_user: bool = False, sizes: tuple[int, int] = (8, 8), axis: int = -1,
             up_first: bool = False) -> onnx.ModelProto:
    n = 16
    nodes = [helper.make_node("GgufMatMul", ["x", "w"], ["gu"], domain="ai.amber", ggml_type=8, K=32, N=n),
             helper.make_node("Split", ["gu", "sizes"], ["gate", "up"], axis=axis),
             helper.make_node("Sigmoid", ["gate"], ["sig"]),
             helper.make_node("Mul", ["sig", "gate"] if up_first else ["gate", "sig"], ["silu"]),
             helper.make_node("Mul", ["up", "silu"] if up_first else ["silu", "up"], ["act"]),
             helper.make_node("Identity", ["act"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_gate_user:
        nodes.append(helper.make_node("Identity", ["gate"], ["g2"]))
        outputs.append(helper.make_tensor_value_info("g2", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", 32])], outputs,
                              [numpy_helper.from_array(np.zeros((n, 34), np.uint8), "w"),
                               numpy_helper.from_array(np.array(sizes, np.int64), "sizes")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.amber", 1)])


def test_pass_fuses_the_exact_pattern_in_either_operand_order(monkeypatch):
    monkeypatch.delenv("AMBER_NATIVE_SWIGLU", raising=False)
    for up_first in (False, True):
        m = _pattern(up_first=up_first)
        assert use_native_swiglu(m) == 1 and uses_swiglu(m)
        assert [n.op_type for n in m.graph.node] == ["GgufMatMul", "Identity"]
        assert m.graph.node[0].output[0] == "act"
        assert "sizes" not in {i.name for i in m.graph.initializer}


def test_pass_refuses_near_misses(monkeypatch):
    monkeypatch.delenv("AMBER_NATIVE_SWIGLU", raising=False)
    for bad in (_pattern(extra_gate_user=True), _pattern(sizes=(4, 12)), _pattern(axis=0)):
        before = bad.SerializeToString()
        assert use_native_swiglu(bad) == 0 and not uses_swiglu(bad)
        assert bad.SerializeToString() == before
    monkeypatch.setenv("AMBER_NATIVE_SWIGLU", "0")
    assert use_native_swiglu(_pattern()) == 0
