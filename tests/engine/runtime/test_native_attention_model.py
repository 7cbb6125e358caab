"""Whole tiny models in the native form with ai.amber.Attention (float16 KV) against the same
native form with GroupQueryAttention (float32 KV, AMBER_NATIVE_ATTENTION=0: what native folders
converted before the op hold): graph and folder contents, logits, greedy tokens, chunking of long
prompts, and the older folders still loading and generating."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from engine.api import SamplingParams
from engine.convert import EXACT, FAST, convert_gguf
from engine.convert.native_attention import use_native_attention
from engine.generation.generate import Generator, collect
from engine.runtime import runner as runner_mod
from engine.runtime.model import load_model
from tests.support.reference_model import prompt
from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf

BASE = TinyConfig(seed=82, wtype="Q8_0", context_length=4096)
# gemma2: sliding window + attention softcap; qwen3: head_dim 128 with per-head Q/K norm; phi3 with
# head_dim 96 and longrope tables; a wide GQA group.
ARCHS = [BASE,
         TinyConfig(arch="gemma2", n_embd=128, n_head=2, n_head_kv=1, head_dim=64, n_ff=256, sliding_window=16,
                    attn_softcap=2.0, final_softcap=3.0, wtype="Q8_0", seed=41),
         TinyConfig(arch="qwen3", n_embd=64, n_head=4, n_head_kv=2, head_dim=128, n_ff=128, wtype="Q4_0", seed=43),
         TinyConfig(arch="phi3", n_embd=192, n_head=2, n_head_kv=2, head_dim=96, n_ff=256, tied=False, longrope=64,
                    wtype="Q8_0", seed=42),
         variant(BASE, n_head=8, n_head_kv=1, head_dim=16, seed=44)]
IDS = [c.name + ("-mqa" if c.n_head_kv == 1 and c.arch == "llama" else "") for c in ARCHS]
# Both forms run the same int8 matmuls; only the KV's float16 rounding (2^-11 relative) and the
# summation order differ, ~1e-3 on the attention outputs. The next matmul quantizes its input to
# int8 per 32 values (one step ~1 % of a block's range), so such a change can flip a few levels by
# one step: measured up to 0.08 on logits of std ~1 (relative norm up to 2.8 %, qwen3 Q4_0).
LOGIT_TOL, LOGIT_REL = 0.2, 0.06
# With float matmuls (the exact form's graph with its attention swapped for the op) only the
# float16 KV differs: measured <= 0.0019 (relative norm <= 6e-4).
EXACT_TOL, EXACT_REL = 0.006, 0.002


@pytest.fixture(scope="module")
def folders(tmp_path_factory, native_kernels):
    """folders(cfg) -> (TinyModel, amber folder, gqa folder)."""
    root = tmp_path_factory.mktemp("native_attention")
    made: dict[str, tuple] = {}

    def get(cfg: TinyConfig):
        if cfg.name not in made:
            src = root / f"{cfg.name}{len(made)}.gguf"
            model = write_tiny_gguf(src, cfg)
            amber = convert_gguf(src, root / f"{cfg.name}{len(made)}.amber", kernels="native", accuracy_level=FAST)
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("AMBER_NATIVE_ATTENTION", "0")
                gqa = convert_gguf(src, root / f"{cfg.name}{len(made)}.gqa", kernels="native", accuracy_level=FAST)
            made[cfg.name] = (model, amber, gqa)
        return made[cfg.name]
    return get


@pytest.fixture(scope="module")
def native_kernels():
    import engine.native as native
    from engine.native import build
    if build.find_compiler() is None and native.library_path() is None:
        pytest.skip("no C compiler (cc/gcc/clang) to build the native kernels")
    build.build()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_KERNELS", "native")
        mp.delenv("AMBER_NATIVE_ATTENTION", raising=False)
        yield


def _kv_types(folder: Path) -> set[int]:
    g = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    return {v.type.tensor_type.elem_type for v in list(g.input) + list(g.output)
            if v.name.startswith(("past_key_values.", "present."))}


def _ops(folder: Path) -> list[tuple[str, str]]:
    g = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    return [(n.domain, n.op_type) for n in g.node if "Attention" in n.op_type]


@pytest.mark.parametrize("cfg", ARCHS, ids=IDS)
def test_native_form_has_amber_attention_and_float16_kv(folders, cfg):
    _, amber, gqa = folders(cfg)
    assert _ops(amber) == [("ai.amber", "Attention")] * cfg.n_layers
    assert _kv_types(amber) == {TensorProto.FLOAT16}
    assert json.loads((amber / "amber_import.json").read_text())["attention"] == "amber"
    assert _ops(gqa) == [("com.microsoft", "GroupQueryAttention")] * cfg.n_layers
    assert _kv_types(gqa) == {TensorProto.FLOAT}
    assert json.loads((gqa / "amber_import.json").read_text())["attention"] == "gqa"
    m = load_model(amber, provider="cpu", threads=1)
    assert m.kv.dtype is np.float16 and m.kv.shared_buffer and m.amber_attention
    old = load_model(gqa, provider="cpu", threads=1)
    assert old.kv.dtype is np.float32 and old.kv.shared_buffer and not old.amber_attention


def _last_logits(folder: Path, ids: list[int], chunks: list[int]) -> np.ndarray:
    """The last position's logits after feeding `ids` in the given chunk sizes through one cache."""
    from engine.runtime.runner import Runner
    m = load_model(folder, provider="cpu", threads=1)
    runner = Runner(m)
    cache = runner.new_cache()
    at, out = 0, None
    for n in chunks:
        out = runner.forward(cache, ids[at:at + n])
        at += n
    assert at == len(ids) and out is not None
    return np.asarray(out, np.float64).reshape(-1)


@pytest.mark.parametrize("cfg", ARCHS, ids=IDS)
def test_logits_agree_with_the_float32_kv_form(folders, cfg):
    model, amber, gqa = folders(cfg)
    ids = list(map(int, prompt(model, 90, 3)))
    for chunks in ([90], [70, 1, 1, 18], [1] * 5 + [85]):   # prefill, decode steps, prefill after decode
        a, b = _last_logits(amber, ids, chunks), _last_logits(gqa, ids, chunks)
        assert float(np.abs(a - b).max()) <= LOGIT_TOL, chunks
        assert np.linalg.norm(a - b) / np.linalg.norm(a) <= LOGIT_REL, chunks


@pytest.mark.parametrize("cfg", [BASE, ARCHS[2], ARCHS[4]], ids=["llama", "qwen3", "llama-mqa"])
def test_a_prompt_has_the_same_logits_in_chunks_of_any_length(folders, cfg):
    """The native form (GgufMatMul tiles start at multiples of 16 rows; ai.amber.Attention splits
    a chunk's rows evenly among its tasks): a prompt prefilled in chunks of 160, 64, 48 or 16
    tokens gives the same logits bits, so the runner's chunk length is free to follow speed and
    memory."""
    model, amber, _ = folders(cfg)
    ids = list(map(int, prompt(model, 160, 7)))
    want = _last_logits(amber, ids, [160])
    for chunk in (64, 48, 16):
        got = _last_logits(amber, ids, [min(chunk, 160 - at) for at in range(0, 160, chunk)])
        np.testing.assert_array_equal(got, want, err_msg=f"chunks of {chunk}")


@pytest.mark.parametrize("cfg", ARCHS, ids=IDS)
def test_op_in_an_exact_graph_matches_float32_gqa_closely(tmp_path, native_kernels, cfg):
    """The exact form (float matmuls, no int8 activations) with its GroupQueryAttention nodes
    swapped for the op by the converter's own pass: only the float16 KV differs."""
    model, ref, amber = _exact_pair(tmp_path, cfg)
    ids = list(map(int, prompt(model, 90, 3)))
    for chunks in ([90], [70, 1, 1, 18], [1] * 5 + [85]):
        a, b = _last_logits(amber, ids, chunks), _last_logits(ref, ids, chunks)
        assert float(np.abs(a - b).max()) <= EXACT_TOL, chunks
        assert np.linalg.norm(a - b) / np.linalg.norm(a) <= EXACT_REL, chunks


def _exact_pair(tmp_path: Path, cfg: TinyConfig):
    """(model, exact-form folder with GQA, the same graph with the op): only the float16 KV differs."""
    src = tmp_path / "m.gguf"
    model = write_tiny_gguf(src, cfg)
    ref = convert_gguf(src, tmp_path / "ref", kernels="ort", accuracy_level=EXACT, gpu_variant=False)
    amber = tmp_path / "amber"
    shutil.copytree(ref, amber)
    m = onnx.load(str(amber / "model.onnx"), load_external_data=False)
    m.opset_import.append(onnx.helper.make_opsetid("ai.amber", 1))
    assert use_native_attention(m, cfg.head_dim)
    onnx.save(m, str(amber / "model.onnx"))
    return model, ref, amber


def test_greedy_tokens_equal_the_float32_kv_form(tmp_path, native_kernels):
    """24 greedy tokens after a 300-token prompt (more than one 64-key block, several query
    blocks), float matmuls (the exact form): the op's tokens are the float32-KV GQA's. (With int8
    activations a near tie can flip: test_logits_agree_with_the_float32_kv_form bounds the logits.)"""
    model, ref, amber = _exact_pair(tmp_path, BASE)
    ids = list(map(int, prompt(model, 300, 5)))
    sampling = SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=24)
    got = []
    for folder in (amber, ref):
        gen = Generator(load_model(folder, provider="cpu", threads=2))
        got.append(collect(gen.stream(gen.new_cache(), ids, sampling)).token_ids)
    assert len(got[0]) == 24 and got[0] == got[1]


def test_long_prompts_are_not_cut_for_attention_scores(folders):
    """runner.chunk_len: the scores bound (ORT's GQA holds head x chunk x positions floats) does
    not apply to ai.amber.Attention; the activation bound still does."""
    from engine.runtime.runner import Runner
    _, amber, gqa = folders(BASE)
    big = type("Cache", (), {"capacity": 4096, "__len__": lambda self: 2000})()   # what chunk_len reads
    r_amber = Runner(load_model(amber, provider="cpu", threads=1))
    r_gqa = Runner(load_model(gqa, provider="cpu", threads=1))
    assert r_gqa.chunk_len(big, 2000) < runner_mod.PREFILL_CHUNK
    assert r_amber.chunk_len(big, 2000) == runner_mod.PREFILL_CHUNK
    r_amber._token_bytes = runner_mod.ACTIVATION_SCRATCH_BYTES // 100   # the activation bound: 64
    assert r_amber.chunk_len(big, 2000) == runner_mod.MIN_CHUNK
