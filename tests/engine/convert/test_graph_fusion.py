"""Fusions of the decoder graph: Q|K|V and gate|up stay one set of MatMulNBits when their
GGUF types differ but their kernel form is the same (Q4_K_M's Q5_0 Q/K with a Q8_0 V: one 8-bit
plane each in fast mode, two 4-bit planes in exact mode), the file keeps each part's own form, and
the fused graph still equals the numpy reference (and its float16 variant the float32 graph)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from engine.convert import EXACT, FAST, convert_gguf
from tests.support.reference_model import Runner, prompt, reference_logits
from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf

MIXED = variant(TinyConfig(), wtype="Q5_0", seed=51, bias=True,
                overrides=(("attn_v.weight", "Q8_0"), ("ffn_up.weight", "Q8_0")))
# Fast mode against exact on these random tiny models: see test_convert_forms.py.
FAST_TOL, FAST_REL = 0.4, 0.1


def _graph(folder) -> onnx.ModelProto:
    return onnx.load(str(folder / "model.onnx"), load_external_data=False)


def _matmul_widths(folder) -> list[int]:
    return [next(a.i for a in n.attribute if a.name == "N") for n in _graph(folder).graph.node
            if n.op_type == "MatMulNBits"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("fusion")
    model = write_tiny_gguf(root / "mixed.gguf", MIXED)
    return model, {level: convert_gguf(root / "mixed.gguf", root / f"out{level}", accuracy_level=level, kernels="ort")
                   for level in (EXACT, FAST)}


def test_mixed_qkv_and_gate_up_fuse_in_fast_mode(mixed):
    _, folders = mixed
    c = MIXED
    qkv, gate_up = (c.n_head + 2 * c.n_head_kv) * c.head_dim, 2 * c.n_ff
    widths = _matmul_widths(folders[FAST])
    assert widths.count(qkv) == c.n_layers and widths.count(gate_up) == c.n_layers, widths
    assert len(widths) == 4 * c.n_layers + 1, widths        # Q|K|V, O, gate|up, down; the lm_head
    # What is stored is each part's own form (the planes are concatenated when the model loads).
    stored = {i.name for i in _graph(folders[FAST]).graph.initializer}
    for i in range(c.n_layers):
        for part in ("self_attn.q_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            assert any(name.startswith(f"model.layers.{i}.{part}.") for name in stored), (i, part)


def test_mixed_qkv_and_gate_up_fuse_in_exact_mode(mixed):
    """Exact mode runs 5/6/8-bit levels as two 4-bit planes: each plane fused across the parts,
    with the zero points of the types that have none written out as their defaults."""
    _, folders = mixed
    c = MIXED
    qkv, gate_up = (c.n_head + 2 * c.n_head_kv) * c.head_dim, 2 * c.n_ff
    widths = _matmul_widths(folders[EXACT])
    assert widths.count(c.n_head_kv * c.head_dim) == 0, widths
    assert len(widths) == 2 * 4 * c.n_layers + 2, widths         # two planes for every linear
    assert widths.count(qkv) >= 2 * c.n_layers and widths.count(gate_up) == 2 * c.n_layers, widths


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


@pytest.mark.parametrize("level", [EXACT, FAST])
def test_gpu_variant_of_the_fused_mixed_graph(mixed, level):
    """The float16 variant folds the concatenated planes as it folds any weight preparation."""
    from pathlib import Path

    from engine.onnx.variants import KERNELS, unplaceable_nodes, variant_graph
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
