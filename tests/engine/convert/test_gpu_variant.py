"""The float16 GPU variant (engine/onnx/variants.py) and the provider logic that picks it.

Everything here runs on the CPU provider: the variant's numerics against the float32 graph, its
KV in float16 through sessions, and the strict-GPU-session fallback with what onnxruntime-gpu
really does on a machine where CUDA cannot run.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.support.tiny_gguf import TinyConfig, variant as cfg_variant, write_tiny_gguf

BASE = TinyConfig()
Q4K = dict(n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512)
CONFIGS = [
    cfg_variant(BASE, seed=1),                                               # F32, tied (Gemm lm_head)
    cfg_variant(BASE, wtype="F16", tied=False, seed=2),
    cfg_variant(BASE, wtype="Q4_1", pre="smollm", seed=3),                   # SmolLM2's layout
    cfg_variant(BASE, wtype="Q4_0", arch="qwen2", bias=True, tied=False, seed=4),
    cfg_variant(BASE, wtype="Q4_K", seed=5, **Q4K),
    cfg_variant(BASE, wtype="Q8_0", arch="qwen2", bias=True, n_head_kv=4, seed=6),
    # Architectures beyond llama/qwen2: per-head Q/K norms, GeGLU, post-norms, soft-caps, sliding
    # windows with local/global rotary, fused Q|K|V and gate|up, long-context RoPE.
    cfg_variant(BASE, arch="qwen3", wtype="Q4_K", seed=7, **Q4K),
    cfg_variant(BASE, arch="gemma2", wtype="Q4_0", sliding_window=16, attn_softcap=2.0, final_softcap=3.0, seed=8),
    cfg_variant(BASE, arch="gemma3", n_layers=6, sliding_window=16, rope_theta=1e6, rope_linear=8.0, seed=9),
    cfg_variant(BASE, arch="phi3", wtype="Q4_1", tied=False, longrope=32, seed=10),
]
IDS = [c.name for c in CONFIGS]
# float16 rounding of activations, scales, zero points and KV on these random-weight models (the
# float32 side converted EXACT, accuracy level 0): the largest logit difference measured over all
# CONFIGS was 0.020 (Q4_K; logits up to ~4.4); the bound leaves 3x.
TINY_MAX_DLOGIT = 0.06


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """cfg -> converted folder (the importer writes gpu/ itself)."""
    from engine.convert import convert_gguf
    made: dict[str, Path] = {}

    def get(cfg: TinyConfig) -> Path:
        if cfg.name not in made:
            root = tmp_path_factory.mktemp(cfg.name)
            src = write_tiny_gguf(root / "m.gguf", cfg)
            made[cfg.name] = convert_gguf(src.path, root / "model")
        return made[cfg.name]
    return get


def _checkable(path: Path) -> onnx.ModelProto:
    """The graph as onnx.checker can judge it: ORT registers SimplifiedLayerNormalization in the
    default domain, which the ONNX checker does not know; moved to com.microsoft (whose ops the
    checker does not validate) every other node is checked against its schema."""
    m = onnx.load(str(path))
    for n in m.graph.node:
        if n.op_type == "SimplifiedLayerNormalization":
            n.domain = "com.microsoft"
    return m


def _feed(sess: ort.InferenceSession, ids: list[int], past: list[np.ndarray] | None, dtype: type) -> dict:
    n_past = 0 if past is None else past[0].shape[2]
    feed = {"input_ids": np.asarray([ids], np.int64),
            "attention_mask": np.ones((1, n_past + len(ids)), np.int64),
            "position_ids": np.arange(n_past, n_past + len(ids), dtype=np.int64)[None]}
    names = [i for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
    for j, inp in enumerate(names):
        feed[inp.name] = past[j] if past is not None else np.zeros((1, inp.shape[1], 0, inp.shape[3]), dtype)
    return feed


def _decode_logits(path: Path, ids: list[int], steps: list[int], dtype: type) -> np.ndarray:
    """Logits after a prefill of `ids` and after each token of `steps` (plain session.run, no binding)."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out = sess.run(None, _feed(sess, ids, None, dtype))
    rows = [out[0][0, -1]]
    for tok in steps:
        out = sess.run(None, _feed(sess, [tok], out[1:], dtype))
        rows.append(out[0][0, -1])
    return np.stack(rows).astype(np.float32)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_variant_graph_is_valid_and_gpu_placeable(folders, cfg):
    from engine.onnx.variants import KERNELS, MARKER, unplaceable_nodes, variant_graph
    folder = folders(cfg)
    graph = variant_graph(folder)
    assert graph.is_file() and (graph.parent / "model.onnx.data").is_file()
    assert json.loads((graph.parent / MARKER).read_text())["variant"] == "fp16"
    model = _checkable(graph)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 10
    types = {v.name: v.type.tensor_type.elem_type for v in list(model.graph.input) + list(model.graph.output)}
    kv = [n for n in types if n.startswith(("past_key_values.", "present."))]
    assert kv and all(types[n] == onnx.TensorProto.FLOAT16 for n in kv)
    assert types["logits"] == onnx.TensorProto.FLOAT
    ops = {n.op_type for n in model.graph.node}
    assert not ops & {"BitwiseAnd", "BitShift", "Shape"}     # no CUDA kernel / CPU-placed shape math
    floats = [i for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT]
    assert not floats, [i.name for i in floats][:3]
    for provider in KERNELS:
        assert unplaceable_nodes(model, provider) == [], provider
    # The float32 CPU graph is what the strict CUDA session would refuse: its attention and nibble
    # unpacking are named.
    cpu = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    named = unplaceable_nodes(cpu, "CUDAExecutionProvider")
    assert any("GroupQueryAttention float)" in n for n in named)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_variant_keeps_the_exact_block_mapping(folders, cfg):
    """The packed 4-/8-bit levels are the CPU graph's bytes; scales are the same numbers in float16."""
    from engine.onnx.variants import variant_graph
    folder = folders(cfg)
    cpu = {i.name: i for i in onnx.load(str(folder / "model.onnx")).graph.initializer}
    gpu = {i.name: i for i in onnx.load(str(variant_graph(folder))).graph.initializer}
    packed = [n for n in cpu if "qweight" in n]
    if cfg.wtype.startswith("Q"):
        assert packed
    for name in packed:
        assert gpu[name].raw_data == cpu[name].raw_data if cpu[name].raw_data else \
            np.array_equal(onnx.numpy_helper.to_array(gpu[name]), onnx.numpy_helper.to_array(cpu[name]))
    # The CPU graph stores scales compactly (float16, or float16 times small integers) and lets the
    # session fold them to float32; folded the same way, the variant holds those numbers in float16
    # (constant blocks, scale 0, become scale 1 with the constant as zero point).
    from engine.onnx.fold import fold_constants
    folded = onnx.load(str(folder / "model.onnx"))
    fold_constants(folded)
    cpu = {i.name: i for i in folded.graph.initializer}
    scales = [n for n in cpu if n.endswith(".scales")]
    if cfg.wtype.startswith("Q"):
        assert scales
    for name in scales:
        a, b = onnx.numpy_helper.to_array(cpu[name]), onnx.numpy_helper.to_array(gpu[name])
        live = a != 0
        assert b.dtype == np.float16 and np.array_equal(b[live], a[live].astype(np.float16))


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_variant_matches_float32_within_float16_tolerance(folders, cfg):
    from engine.onnx.variants import variant_graph
    folder = folders(cfg)
    rng = np.random.default_rng(cfg.seed)
    ids = [int(t) for t in rng.integers(3, 400, 40)]
    steps = [int(t) for t in rng.integers(3, 400, 12)]
    a = _decode_logits(folder / "model.onnx", ids, steps, np.float32)
    b = _decode_logits(variant_graph(folder), ids, steps, np.float16)
    assert np.isfinite(b).all()
    delta = float(np.abs(a - b).max())
    assert delta < TINY_MAX_DLOGIT, delta
    # Where float32's best token leads by more than twice the bound, float16 picks it too.
    top2 = np.sort(a, axis=-1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 2 * TINY_MAX_DLOGIT
    assert np.array_equal(a.argmax(-1)[clear], b.argmax(-1)[clear])


# ---- the real default model (slow) ------------------------------------------------------------------
# Measured with `python -m bench.suites.gpu_check --cpu-part` (docs/BENCHMARKS.md, "GPU variant (float16) on
# the CPU provider"): against the exact float32 graph, greedy tokens identical on every prompt and
# max |Δlogit| 0.103 over 4 prompts x 48 tokens (teacher-forced; logits of magnitude ~20); the
# bound leaves ~2.4x.
DEFAULT_MAX_DLOGIT = 0.25


def _scratch_copy(model_dir: Path, dest: Path) -> Path:
    """The default model in a scratch folder (onnx refuses linked external data): its gpu/ must not
    go into the shared prepared model."""
    import shutil
    return Path(shutil.copytree(model_dir, dest, ignore=shutil.ignore_patterns("gpu", "amber_fingerprint.json")))


@pytest.mark.slow
def test_default_model_fp16_variant_agrees_with_float32(default_model_ort_dir, tmp_path):
    from bench.suites.gpu_check import PROMPTS, chat_prompts, compare, exact_copy
    from engine.runtime.model import load_model
    folder = _scratch_copy(default_model_ort_dir, tmp_path / default_model_ort_dir.name)
    fp16 = load_model(folder, provider="cpu", variant="fp16")
    assert fp16.variant == "fp16" and fp16.kv.dtype == np.float16
    exact = load_model(exact_copy(folder, tmp_path / "exact"), provider="cpu", variant="fp32")
    res = compare(exact, fp16, chat_prompts(exact, PROMPTS[:2]), 16)
    assert res["identical"] == res["prompts"] == 2, res
    assert res["top1_agree"] == 1.0 and res["max_dlogit"] < DEFAULT_MAX_DLOGIT, res
