"""engine.convert for qwen3, gemma2, gemma3 and phi3 (arch.py, graph_blocks.py, arch_weights.py).

test_convert.py checks their logits and the 200+100 == 300 KV cache against the numpy reference
(its CONFIGS include them). Here: step-by-step decoding and long prompts (sliding windows, phi3's
short/long rotary), that each architectural feature moves the logits far beyond the tolerance (so
the reference checks would catch an importer that ignored it), config.json, chat templates and
end-of-turn tokens, the engine generating from a converted folder, and bad input.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tests.support.reference_model import CACHE_TOL, CONFIGS, LOGIT_TOL, Runner, max_delta, prompt, reference_logits

from engine.convert import ModelImportError, convert_gguf
from tests.support.tiny_gguf import ARCH_CHAT, TinyConfig, TinyModel, write_tiny_gguf

REPO = Path(__file__).resolve().parents[3]
ARCH_CONFIGS = [c for c in CONFIGS if c.arch in ("qwen3", "gemma2", "gemma3", "phi3")]
ARCH_IDS = [c.name for c in ARCH_CONFIGS]
HF_CLASS = {"qwen3": "Qwen3ForCausalLM", "gemma2": "Gemma2ForCausalLM", "gemma3": "Gemma3ForCausalLM",
            "phi3": "Phi3ForCausalLM"}


def _first(arch: str, **want) -> TinyConfig:
    return next(c for c in ARCH_CONFIGS if c.arch == arch and all(getattr(c, k) == v for k, v in want.items()))


class _Built:
    def __init__(self, model: TinyModel, folder: Path) -> None:
        self.model, self.folder = model, folder
        self.runner = Runner(folder)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("arch")
    cache: dict[TinyConfig, _Built] = {}

    def get(cfg: TinyConfig) -> _Built:
        if cfg not in cache:
            m = write_tiny_gguf(root / f"{cfg.name}.gguf", cfg)
            cache[cfg] = _Built(m, convert_gguf(m.path, root / cfg.name))
        return cache[cfg]
    return get


# ---- decoding ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", ARCH_CONFIGS, ids=ARCH_IDS)
def test_step_by_step_decode_equals_one_shot(built, cfg):
    """Token-by-token decoding through the cache crosses the sliding windows (16-32 tokens)."""
    b = built(cfg)
    ids = prompt(b.model, 40, seed=2)
    logits, past = b.runner.run(ids[:10])
    for t in range(10, len(ids)):
        logits, past = b.runner.run(ids[t:t + 1], past)
        assert max_delta(logits, b.runner.run(ids[:t + 1])[0]) <= CACHE_TOL, f"step {t}"
    assert past["0.key"].shape[2] == len(ids)
    assert max_delta(logits, reference_logits(b.model, ids)) <= LOGIT_TOL


@pytest.mark.parametrize("cfg", ARCH_CONFIGS, ids=ARCH_IDS)
def test_long_prompt_matches_reference(built, cfg):
    """300 tokens: many windows long, and past phi3's original context (its long factors)."""
    b = built(cfg)
    ids = prompt(b.model, 300, seed=3)
    got, _ = b.runner.run(ids)
    assert max_delta(got, reference_logits(b.model, ids)) <= LOGIT_TOL


# ---- each feature matters (guards the guard) --------------------------------------------------
def _without(model: TinyModel, cfg: TinyConfig | None = None, drop: tuple[str, ...] = (),
             swap: tuple[str, str] | None = None) -> TinyModel:
    w = {k: v for k, v in model.weights.items() if not k.endswith(drop)} if drop else dict(model.weights)
    if swap:
        w[swap[0]], w[swap[1]] = model.weights[swap[1]], model.weights[swap[0]]
    return TinyModel(model.path, cfg or model.config, w, model.tokenizer, model.tokens)


FEATURES = {
    "qwen3 q/k norms": (lambda: _first("qwen3", wtype="F32"), lambda m: _without(m, drop=("q_norm", "k_norm")), 21),
    "gemma2 attention softcap": (lambda: _first("gemma2", wtype="F32"),
                                 lambda m: _without(m, replace(m.config, attn_softcap=0.0)), 21),
    "gemma2 final softcap": (lambda: _first("gemma2", wtype="F32"),
                             lambda m: _without(m, replace(m.config, final_softcap=0.0)), 21),
    "gemma2 sliding window": (lambda: _first("gemma2", wtype="F32"),
                              lambda m: _without(m, replace(m.config, sliding_window=0)), 40),
    "gemma3 local rotary + window": (lambda: _first("gemma3", wtype="F32"),
                                     lambda m: _without(m, replace(m.config, sliding_window=0)), 12),
    "gemma3 q/k norms": (lambda: _first("gemma3", wtype="F32"), lambda m: _without(m, drop=("q_norm", "k_norm")), 21),
    "phi3 short factors": (lambda: _first("phi3", wtype="F32"),
                           lambda m: _without(m, swap=("rope_long", "rope_short")), 21),
    "phi3 long factors": (lambda: _first("phi3", wtype="F32"),
                          lambda m: _without(m, swap=("rope_long", "rope_short")), 300),
    "phi3 sliding window": (lambda: _first("phi3", wtype="Q8_0"),
                            lambda m: _without(m, replace(m.config, sliding_window=0)), 60),
}


@pytest.mark.parametrize("feature", list(FEATURES))
def test_each_feature_moves_the_logits(built, feature):
    make_cfg, without, n = FEATURES[feature]
    b = built(make_cfg())
    ids = prompt(b.model, n, seed=4)
    got, _ = b.runner.run(ids)
    assert max_delta(got, reference_logits(b.model, ids)) <= LOGIT_TOL
    assert max_delta(got, reference_logits(without(b.model), ids)) > 30 * LOGIT_TOL


# ---- the output folder ------------------------------------------------------------------------
@pytest.mark.parametrize("cfg", [_first(a) for a in HF_CLASS], ids=list(HF_CLASS))
def test_config_json(built, cfg):
    config = json.loads((built(cfg).folder / "config.json").read_text())
    assert config["model_type"] == cfg.arch and config["architectures"] == [HF_CLASS[cfg.arch]]
    assert config["num_hidden_layers"] == cfg.n_layers and config["head_dim"] == cfg.head_dim
    if cfg.sliding_window:
        assert config["sliding_window"] == cfg.sliding_window
    if cfg.attn_softcap:
        assert config["attn_logit_softcapping"] == pytest.approx(cfg.attn_softcap)
        assert config["final_logit_softcapping"] == pytest.approx(cfg.final_softcap)
    if cfg.longrope:
        assert config["rope_scaling"]["rope_type"] == "longrope"
        assert config["original_max_position_embeddings"] == cfg.longrope
    if cfg.arch.startswith("gemma"):
        assert config["hidden_activation"] == "gelu_pytorch_tanh"


EXPECTED_PROMPT = {
    "qwen3": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "gemma2": "<|im_start|><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "gemma3": "<|im_start|><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "phi3": "<|user|>\nhi<|end|>\n<|assistant|>\n",
}


@pytest.mark.parametrize("arch", list(HF_CLASS))
def test_chat_template_and_end_of_turn(built, arch):
    """The GGUF's template is the folder's; its end-of-turn token is one token and stops generation."""
    from tokenizers import Tokenizer

    from engine.text.chat_template import load_chat_template
    b = built(_first(arch))
    template, _, end_of_turn = ARCH_CHAT[arch]
    assert (b.folder / "chat_template.jinja").read_text() == template
    ct = load_chat_template(b.folder, arch)
    text = ct.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert text == EXPECTED_PROMPT[arch]
    tok = Tokenizer.from_file(str(b.folder / "tokenizer.json"))
    eot = b.model.tokens.index(end_of_turn)
    assert tok.encode(end_of_turn, add_special_tokens=False).ids == [eot]
    gen = json.loads((b.folder / "generation_config.json").read_text())
    assert eot in gen["eos_token_id"]
    if arch == "qwen3":   # the template's own switch for reasoning models
        off = ct.render([{"role": "user", "content": "hi"}], enable_thinking=False)
        assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize("arch", list(HF_CLASS))
def test_engine_generates_the_reference_greedy_tokens(built, arch, tmp_path):
    """End to end: the CLI's greedy continuation of a raw prompt is the numpy reference's."""
    b = built(_first(arch))
    text = "The capital of France is"
    env = {**os.environ, "PYTHONPATH": str(REPO), "AMBER_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-m", "engine", "generate", "--model", str(b.folder), "--prompt", text,
                          "--greedy", "--max-tokens", "6", "--json", "--temporary", "--provider", "cpu",
                          "--repetition-penalty", "1.0"],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    ids = list(b.model.tokenizer.encode(text).ids)
    eos = set(json.loads((b.folder / "generation_config.json").read_text())["eos_token_id"])
    want: list[int] = []
    for _ in range(6):
        nxt = int(np.argmax(reference_logits(b.model, ids + want)))
        if nxt in eos:
            break
        want.append(nxt)
    assert want and got["tokens"] == want
    # the text of those tokens; the U+FFFD of random bytes that make no character is left out
    assert got["text"] == b.model.tokenizer.decode(want, skip_special_tokens=True).replace("\ufffd", "")


# ---- bad input --------------------------------------------------------------------------------
def _import_error(src: Path, dest: Path) -> str:
    with pytest.raises(ModelImportError) as err:
        convert_gguf(src, dest)
    assert not dest.exists()
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_phi3_fused_qkv_of_the_wrong_height(tmp_path):
    cfg = _first("phi3", wtype="Q4_1")
    m = write_tiny_gguf(tmp_path / "m.gguf", cfg,
                        replace_tensors={"blk.1.attn_qkv.weight": np.ones((96, 64), np.float32)})
    assert "blk.1.attn_qkv.weight has 96 rows, expected 128" in _import_error(m.path, tmp_path / "out")


def test_phi3_long_factors_without_the_original_context(tmp_path):
    cfg = _first("phi3", wtype="F32")
    m = write_tiny_gguf(tmp_path / "m.gguf", cfg, omit=("phi3.rope.scaling.original_context_length",))
    assert "missing metadata key phi3.rope.scaling.original_context_length" in _import_error(m.path, tmp_path / "out")


def test_phi3_only_one_of_the_factor_tensors(tmp_path):
    cfg = _first("phi3", wtype="F32")
    m = write_tiny_gguf(tmp_path / "m.gguf", cfg, drop=("rope_factors_short.weight",))
    assert "needs both rope_factors_long.weight and rope_factors_short.weight" in \
        _import_error(m.path, tmp_path / "out")


def test_gemma_missing_post_norm(tmp_path):
    cfg = _first("gemma2")
    m = write_tiny_gguf(tmp_path / "m.gguf", cfg, drop=("blk.1.post_ffw_norm.weight",))
    assert "missing tensor blk.1.post_ffw_norm.weight" in _import_error(m.path, tmp_path / "out")


def test_qk_norm_of_the_wrong_size(tmp_path):
    cfg = _first("qwen3")
    m = write_tiny_gguf(tmp_path / "m.gguf", cfg,
                        replace_tensors={"blk.0.attn_k_norm.weight": np.ones(8, np.float32)})
    assert "layer 0 k_norm has 8 values, expected 16" in _import_error(m.path, tmp_path / "out")


def test_sliding_window_on_an_architecture_without_one(tmp_path):
    m = write_tiny_gguf(tmp_path / "m.gguf", TinyConfig(), metadata={"llama.attention.sliding_window": 16})
    assert "llama.attention.sliding_window is set" in _import_error(m.path, tmp_path / "out")


def test_softcap_of_the_wrong_type(tmp_path):
    m = write_tiny_gguf(tmp_path / "m.gguf", _first("gemma2"), omit=("gemma2.attn_logit_softcapping",),
                        metadata={"gemma2.attn_logit_softcapping": "fifty"})
    assert "gemma2.attn_logit_softcapping should be a number" in _import_error(m.path, tmp_path / "out")


def test_sliding_window_pattern_from_the_file(tmp_path):
    """{arch}.attention.sliding_window_pattern (llama.cpp's newer files) overrides the default: a
    period of 3 makes layers 2 and 5 of gemma3's 6 global instead of layer 5 only."""
    import engine.convert.gguf_source as gsrc
    cfg = _first("gemma3", wtype="F32")
    m = write_tiny_gguf(tmp_path / "m.gguf", cfg, metadata={"gemma3.attention.sliding_window_pattern": 3})
    spec = gsrc.GGUFSource(m.path).spec()
    assert spec.params.swa_layers == (True, True, False, True, True, False)
    plain = gsrc.GGUFSource(write_tiny_gguf(tmp_path / "p.gguf", cfg).path).spec()
    assert plain.params.swa_layers == (True, True, True, True, True, False)
    assert [plain.params.window(i) for i in range(6)] == [16] * 5 + [-1]


@pytest.mark.parametrize("unk_id,want", [(0, "<unk>"), (None, None)])
def test_unk_token_reaches_the_template(tmp_path, unk_id, want):
    """tokenizer_config.json's unk_token is the GGUF's tokenizer.ggml.unknown_token_id (templates see it)."""
    from engine.text.chat_template import load_chat_template
    omit = () if unk_id is not None else ("tokenizer.ggml.unknown_token_id",)
    m = write_tiny_gguf(tmp_path / "m.gguf", TinyConfig(), tokenizer="spm", omit=omit)
    out = convert_gguf(m.path, tmp_path / "out")
    assert json.loads((out / "tokenizer_config.json").read_text())["unk_token"] == want
    if want:   # the tiny SentencePiece GGUF has no chat template of its own: a base model
        (out / "chat_template.jinja").write_text("[{{ unk_token }}]", encoding="utf-8")
        assert load_chat_template(out, "m").render([]) == f"[{want}]"


# The real models' head shapes (head_dim 256 for Gemma, 96 for Phi-3, 128 with a narrower
# embedding for Qwen3, one KV head for Gemma 3 1B), at a tiny width.
REAL_HEADS = [
    TinyConfig(arch="gemma3", n_layers=6, n_embd=128, n_head=4, n_head_kv=1, head_dim=256, n_ff=256,
               wtype="F16", sliding_window=16, rope_theta=1e6, seed=40),
    TinyConfig(arch="gemma2", n_embd=128, n_head=2, n_head_kv=1, head_dim=256, n_ff=256, sliding_window=16,
               attn_softcap=2.0, final_softcap=3.0, seed=41),
    TinyConfig(arch="phi3", n_embd=192, n_head=2, n_head_kv=2, head_dim=96, n_ff=256, tied=False, longrope=64,
               wtype="Q8_0", seed=42),
    TinyConfig(arch="qwen3", n_embd=64, n_head=4, n_head_kv=2, head_dim=128, n_ff=128, wtype="Q4_0", seed=43),
]


@pytest.mark.parametrize("cfg", REAL_HEADS, ids=[c.name for c in REAL_HEADS])
def test_real_head_shapes(built, cfg):
    b = built(cfg)
    ids = prompt(b.model, 40, seed=5)
    one_shot, _ = b.runner.run(ids)
    assert max_delta(one_shot, reference_logits(b.model, ids)) <= LOGIT_TOL
    _, past = b.runner.run(ids[:25])
    second, _ = b.runner.run(ids[25:], past)
    assert max_delta(second, one_shot) <= CACHE_TOL
