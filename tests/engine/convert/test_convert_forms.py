"""engine.convert's compact forms and streaming writer: the fast mode of every exact
type against the exact mode, ONNX Runtime folding the compact weights at load, output size by
tensor type, the refusal of types `--exact` cannot keep exact, the data file's layout, and the GPU
variant of the new forms. The exact mode of every type is checked against the numpy reference in
test_convert.py."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gguf import GGMLQuantizationType as QT  # noqa: N814 - short, like ggml's own type tags

from engine.convert import EXACT, FAST, ModelImportError, convert_gguf
from engine.onnx.weights import convert_tensor
from tests.support.reference_model import Q4K, Runner, prompt, reference_logits
from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf

BASE = TinyConfig()
Q4_K_M = variant(BASE, wtype="Q4_K", tied=False, seed=40, **Q4K,
                 overrides=(("attn_v.weight", "Q6_K"), ("ffn_down.weight", "Q6_K"), ("output.weight", "Q6_K"),
                            ("token_embd.weight", "Q5_0")))
FORMS = [variant(BASE, wtype="Q5_0", seed=41), variant(BASE, wtype="Q5_1", tied=False, seed=42),
         variant(BASE, wtype="Q5_K", seed=43, **Q4K), variant(BASE, wtype="Q6_K", seed=44, **Q4K),
         variant(BASE, wtype="Q8_0", seed=45), variant(BASE, wtype="Q4_1", seed=46), Q4_K_M]
IDS = [c.name for c in FORMS]
# Fast mode (int8 activations per block of 32, as llama.cpp) vs exact on these random models
# (logits std ~1): measured max |Δ| 0.03-0.1; relative L2 below 0.03.
FAST_TOL, FAST_REL = 0.4, 0.1


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("forms")
    made: dict[tuple[str, int], tuple] = {}

    def get(cfg: TinyConfig, level: int):
        key = (cfg.name, level)
        if key not in made:
            src = root / f"{cfg.name}.gguf"
            model = write_tiny_gguf(src, cfg) if not src.exists() else made[(cfg.name, EXACT if level else FAST)][0]
            made[key] = (model, convert_gguf(src, root / f"{cfg.name}.{level}", accuracy_level=level,
                                                  kernels="ort"))   # the ORT form these tests are about
        return made[key]
    return get


@pytest.mark.parametrize("cfg", FORMS, ids=IDS)
def test_fast_mode_stays_close_to_exact(converted, cfg):
    model, exact = converted(cfg, EXACT)
    _, fast = converted(cfg, FAST)
    ids = prompt(model, 21)
    a, _ = Runner(exact).run(ids)
    b, _ = Runner(fast).run(ids)
    assert np.abs(a - reference_logits(model, ids)).max() <= 1e-3
    d = float(np.abs(a - b).max())
    assert 0 < d <= FAST_TOL, d          # > 0: the fast mode really quantizes the activations
    assert np.linalg.norm(a - b) / np.linalg.norm(a) <= FAST_REL


@pytest.mark.parametrize("level", [EXACT, FAST])
def test_onnxruntime_folds_the_compact_weights_at_load(converted, level, tmp_path):
    """The scale products, corrections and rebuilt 8-bit levels are computed once when the session
    is made: the optimized graph has no node left that reads only initializers."""
    _, folder = converted(Q4_K_M, level)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(str(folder / "model.onnx"), so, providers=["CPUExecutionProvider"])
    opt = onnx.load(str(tmp_path / "opt.onnx"), load_external_data=False)
    inits = {i.name for i in opt.graph.initializer}
    constant_nodes = [n.name for n in opt.graph.node if n.input and all(i in inits for i in n.input if i)]
    assert constant_nodes == []
    stored = {i.name for i in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.initializer}
    assert any(n.endswith(".scale_values_factor") for n in stored)     # d * sc kept as the GGUF has it
    assert any(n.endswith(".qweight_hi") for n in stored)                # Q6_K/Q5_0: low + high planes
    # Zero points are formed at load, never stored.
    assert not [n for n in stored if ".zero_points" in n]


# Bytes written per GGUF byte, by type (amber_import.json "sizes"), as the forms work out, in both
# modes: the file holds the GGUF's information only. Levels of more than 4 bits are a 4-bit low
# plane and a (bits-4)-bit high plane (exactly the GGUF's bits); the kernels' 8-bit planes, widened
# 4-bit high planes and integer zero points are formed at load. Q4_K/Q5_K keep their 6-bit scales
# and mins as one byte each (4.625 bits/weight vs 4.5; 5.625 vs 5.5).
SIZE_BOUNDS = {level: {"Q4_K": 1.028, "Q6_K": 1.0, "Q5_0": 1.0, "Q5_1": 1.0, "Q5_K": 1.023, "Q8_0": 1.0,
                       "Q4_1": 1.0} for level in (EXACT, FAST)}


@pytest.mark.parametrize("level", [EXACT, FAST])
@pytest.mark.parametrize("cfg", FORMS, ids=IDS)
def test_output_size_by_type(converted, cfg, level):
    _, folder = converted(cfg, level)
    sizes = json.loads((folder / "amber_import.json").read_text())["sizes"]
    kinds = [k for k in sizes if k != "other"]
    assert kinds and {cfg.wtype} <= set(kinds)
    for kind in kinds:
        ratio = sizes[kind]["onnx"] / sizes[kind]["gguf"]
        assert ratio <= SIZE_BOUNDS[level][kind] + 1e-9, (kind, ratio)
    data = (folder / "model.onnx.data").stat().st_size
    assert sum(v["onnx"] for v in sizes.values()) <= data + 64 * 1024 + (folder / "model.onnx").stat().st_size


def test_data_file_is_written_tensor_by_tensor(converted):
    """Every large initializer lives in model.onnx.data at a page-aligned offset; the graph file
    holds only structure."""
    _, folder = converted(Q4_K_M, FAST)
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    data_size = (folder / "model.onnx.data").stat().st_size
    ext = [i for i in graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL]
    assert ext
    spans = []
    for t in ext:
        info = {e.key: e.value for e in t.external_data}
        off, length = int(info["offset"]), int(info["length"])
        assert info["location"] == "model.onnx.data" and off % 4096 == 0 and off + length <= data_size
        spans.append((off, off + length))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))      # no overlaps
    assert (folder / "model.onnx").stat().st_size < 200 * 1024


def test_exact_refuses_types_it_cannot_keep_exact():
    raw = np.random.default_rng(0).integers(0, 256, (64, 2 * 110), dtype=np.uint8)    # Q3_K: 110 bytes / 256
    with pytest.raises(ModelImportError, match="Q3_K has no exact form"):
        convert_tensor("blk.0.ffn_up.weight", QT.Q3_K, raw, 64, 512, exact=True)
    w = convert_tensor("blk.0.ffn_up.weight", QT.Q3_K, raw, 64, 512)           # fast: 8-bit requantized
    assert w.kind == "quant" and w.qbits == 8


@pytest.mark.parametrize("level", [EXACT, FAST])
@pytest.mark.parametrize("cfg", [Q4_K_M, FORMS[0], FORMS[1]], ids=[Q4_K_M.name, IDS[0], IDS[1]])
def test_gpu_variant_of_the_new_forms(converted, cfg, level):
    from engine.onnx.variants import KERNELS, unplaceable_nodes, variant_graph
    from test_gpu_variant import TINY_MAX_DLOGIT, _decode_logits
    _, folder = converted(cfg, level)
    graph = variant_graph(folder)
    model = onnx.load(str(graph))
    assert not [i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT]
    for provider in KERNELS:
        assert unplaceable_nodes(model, provider) == [], provider
    rng = np.random.default_rng(cfg.seed)
    ids = [int(t) for t in rng.integers(3, 400, 30)]
    steps = [int(t) for t in rng.integers(3, 400, 6)]
    # Against the exact float32 graph (the fast one differs by its int8 activations).
    _, exact = converted(cfg, EXACT)
    a = _decode_logits(Path(exact) / "model.onnx", ids, steps, np.float32)
    b = _decode_logits(graph, ids, steps, np.float16)
    assert np.isfinite(b).all() and float(np.abs(a - b).max()) < TINY_MAX_DLOGIT


def test_cli_report_prints_size_by_type(tmp_path):
    from test_convert import _cli
    m = write_tiny_gguf(tmp_path / "m.gguf", Q4_K_M)
    r = _cli(str(m.path), str(tmp_path / "out"), "--report")
    assert r.returncode == 0, r.stderr
    lines = {line.split()[0]: line.split() for line in r.stderr.splitlines() if line.strip()}
    for kind in ("Q4_K", "Q6_K", "Q5_0", "total"):
        assert kind in lines, r.stderr
    sizes = json.loads((tmp_path / "out" / "amber_import.json").read_text())["sizes"]
    assert float(lines["Q6_K"][3]) == pytest.approx(sizes["Q6_K"]["onnx"] / sizes["Q6_K"]["gguf"], abs=1e-3)
    assert r.stdout.strip() == str(tmp_path / "out")


@pytest.mark.parametrize("level", [EXACT, FAST])
def test_large_weights_run_as_row_pieces(converted, level, tmp_path, monkeypatch):
    """A MatMulNBits over a very large weight (the lm_head at real sizes) is split by rows into
    pieces whose outputs are concatenated: the same logits as one matmul."""
    from engine.onnx import linear as graph
    model, whole = converted(Q4_K_M, level)
    monkeypatch.setattr(graph, "SPLIT_ABOVE", 4096)     # every weight of the tiny model above it
    monkeypatch.setattr(graph, "SPLIT_WEIGHTS", 3000)
    split = convert_gguf(model.path, tmp_path / "split", accuracy_level=level, gpu_variant=False, kernels="ort")
    nodes = onnx.load(str(split / "model.onnx"), load_external_data=False).graph.node
    whole_nodes = onnx.load(str(whole / "model.onnx"), load_external_data=False).graph.node
    count = sum(n.op_type == "MatMulNBits" for n in nodes)
    assert count > sum(n.op_type == "MatMulNBits" for n in whole_nodes)
    ids = prompt(model, 13)
    a, _ = Runner(whole).run(ids)
    b, _ = Runner(split).run(ids)
    assert np.abs(a - b).max() <= 1e-5
    if level == EXACT:
        assert np.abs(b - reference_logits(model, ids)).max() <= 1e-3


def test_fused_weights_are_split_and_joined_without_copies():
    """phi3's attn_qkv / ffn_up: the parts are views of the fused weight, and joining them in order
    gives the fused weight itself back (no second copy during import)."""
    from engine.convert.arch_weights import split_rows
    from engine.onnx.weights import concat_rows, from_q4_k
    rng = np.random.default_rng(3)
    n, k = 48, 512
    raw = rng.integers(0, 256, (n, k // 256 * 144), dtype=np.uint8)
    raw.reshape(n, k // 256, 144)[..., 0:4] = np.frombuffer(np.array([0.01, 0.002], np.float16).tobytes(), np.uint8)
    fused = from_q4_k(raw, n, k)
    q, kk, v = split_rows(fused, [32, 8, 8], "blk.0.attn_qkv.weight")
    assert np.shares_memory(q.levels, fused.levels) and np.shares_memory(v.scale.factor, fused.scale.factor)
    assert np.array_equal(np.concatenate([q.dequantized(), kk.dequantized(), v.dequantized()]), fused.dequantized())
    assert concat_rows([q, kk, v]) is fused
    # Out of order, or a part rewritten (e.g. a row permutation): joined as copies, still right.
    joined = concat_rows([kk, q, v])
    assert joined is not fused and joined is not None
    assert np.array_equal(joined.dequantized()[:8], kk.dequantized())
    permuted = q.rows(np.arange(32)[::-1])
    again = concat_rows([permuted, kk, v])
    assert again is not fused and np.array_equal(again.dequantized()[:32], q.dequantized()[::-1])
