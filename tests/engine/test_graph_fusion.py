"""Fusions of the decoder graph (issue 18): Q|K|V and gate|up stay one MatMulNBits when their GGUF
types differ but their stored form is the same (Q4_K_M's Q5_0 Q/K with a Q8_0 V), and the fused
graph still equals the numpy reference."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from engine.convert import EXACT, FAST, convert_gguf
from engine.convert.graph import as_common_8bit
from engine.convert.weights import Scale, Weight
from test_convert import Runner, prompt, reference_logits
from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf

MIXED = variant(TinyConfig(), wtype="Q5_0", seed=51, bias=True,
                overrides=(("attn_v.weight", "Q8_0"), ("ffn_up.weight", "Q8_0")))
# Fast mode against exact on these random tiny models: see test_convert_forms.py.
FAST_TOL, FAST_REL = 0.4, 0.1


def _matmul_names(folder) -> list[str]:
    g = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    return [n.input[1] for n in g.graph.node if n.op_type == "MatMulNBits"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("fusion")
    model = write_tiny_gguf(root / "mixed.gguf", MIXED)
    return model, {level: convert_gguf(root / "mixed.gguf", root / f"out{level}", accuracy_level=level)
                   for level in (EXACT, FAST)}


def test_mixed_qkv_and_gate_up_fuse(mixed):
    _, folders = mixed
    for level, folder in folders.items():
        names = _matmul_names(folder)
        for i in range(MIXED.n_layers):
            p = f"model.layers.{i}"
            assert any(f"{p}.self_attn.qkv_proj" in n for n in names), (level, names)
            assert any(f"{p}.mlp.gate_up_proj" in n for n in names), (level, names)
            assert not any(f"{p}.self_attn.{x}_proj" in n for n in names for x in "qkv"), (level, names)
            assert not any(f"{p}.mlp.{x}_proj" in n for n in names for x in ("gate", "up")), (level, names)


def test_fused_mixed_graph_equals_reference(mixed):
    model, folders = mixed
    ids = prompt(model, 19)
    ref = reference_logits(model, ids)
    exact, _ = Runner(folders[EXACT]).run(ids)
    assert np.abs(exact - ref).max() <= 1e-3
    fast, _ = Runner(folders[FAST]).run(ids)
    d = float(np.abs(exact - fast).max())
    assert 0 < d <= FAST_TOL, d
    assert np.linalg.norm(exact - fast) / np.linalg.norm(exact) <= FAST_REL


def test_fused_decode_steps_equal_one_shot(mixed):
    model, folders = mixed
    ids = prompt(model, 12)
    r = Runner(folders[EXACT])
    one_shot, _ = r.run(ids)
    logits, past = r.run(ids[:5])
    for t in ids[5:]:
        logits, past = r.run([t], past)
    assert np.abs(logits - one_shot).max() <= 1e-4


def _weight(rng: np.random.Generator, qbits: int, center: int, n: int, k: int = 64) -> Weight:
    levels = rng.integers(0, 1 << qbits, (n, k // 32, 32)).astype(np.uint8)
    scale = Scale(rng.uniform(0.01, 0.1, (n, k // 32)).astype(np.float16))
    return Weight("quant", n, k, levels=levels, qbits=qbits, scale=scale, center=center, qtype=f"q{qbits}")


def test_common_8bit_keeps_every_value():
    rng = np.random.default_rng(0)
    parts = [_weight(rng, 5, 16, 8), _weight(rng, 8, 128, 4), _weight(rng, 6, 32, 4)]
    out = as_common_8bit(parts)
    assert {w.qbits for w in out} == {8} and {w.center for w in out} == {128}
    for a, b in zip(parts, out, strict=True):
        assert np.array_equal(a.dequantized(), b.dequantized())
    same = [_weight(rng, 5, 16, 8), _weight(rng, 5, 16, 4)]
    assert as_common_8bit(same) == same                      # nothing to unify: unchanged
    four = [_weight(rng, 4, 8, 8), _weight(rng, 8, 128, 4)]
    assert as_common_8bit(four) == four                      # 4-bit parts keep their own form


@pytest.mark.parametrize("level", [EXACT, FAST])
def test_gpu_variant_of_the_fused_mixed_graph(mixed, level):
    """The float16 variant takes the re-centred 8-bit levels as it takes Q8_0's."""
    from pathlib import Path

    from engine.convert.variants import KERNELS, unplaceable_nodes, variant_graph
    from test_gpu_variant import TINY_MAX_DLOGIT, _decode_logits
    _, folders = mixed
    graph = variant_graph(folders[level])
    model = onnx.load(str(graph))
    for provider in KERNELS:
        assert unplaceable_nodes(model, provider) == [], provider
    rng = np.random.default_rng(7)
    ids = [int(t) for t in rng.integers(3, 400, 30)]
    steps = [int(t) for t in rng.integers(3, 400, 6)]
    a = _decode_logits(Path(folders[EXACT]) / "model.onnx", ids, steps, np.float32)
    b = _decode_logits(graph, ids, steps, np.float16)
    assert np.isfinite(b).all() and float(np.abs(a - b).max()) < TINY_MAX_DLOGIT
