"""ONNX folder layouts other than Amber's own: optimum's older merged decoder
(`decoder_model_merged.onnx`, an `If` on `use_cache_branch`) and onnxruntime-genai's model builder
(`genai_config.json` only, logits for every position). Each folder is built from the same weights
as the tiny converted model and must generate exactly its greedy tokens.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

import engine.runtime.runner as runner_mod
from engine.api import SamplingParams
from engine.generation.generate import Generator, collect
from engine.runtime.model import ModelLoadError, load_model
from engine.runtime.runner import Runner
from engine.text.sampling import resolve_sampling
from engine.sessions.manager import SessionManager
from tests.support.genai_folder import write_genai_folder
from tests.support.plain_onnx import write_merged_model

CHAT = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is the capital of France?"}]
TOL = 1e-3     # a different graph of the same weights: float32 kernels sum in different orders


def greedy(n: int = 16) -> SamplingParams:
    return SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=n)


def prompt_ids(n: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 420, n)]


def tokens(model, prompt: list[int], n: int = 16) -> list[int]:
    gen = Generator(model)
    return collect(gen.stream(gen.new_cache(), prompt, greedy(n))).token_ids


@pytest.fixture(scope="module")
def merged_dir(tiny_source, tiny_dir, tmp_path_factory) -> Path:
    return write_merged_model(tiny_source, tiny_dir, tmp_path_factory.mktemp("merged") / "tiny-merged")


@pytest.fixture(scope="module")
def merged_model(merged_dir):
    return load_model(merged_dir, provider="cpu", threads=1)


@pytest.fixture(scope="module")
def genai_dir(tiny_dir, tmp_path_factory) -> Path:
    return write_genai_folder(tiny_dir, tmp_path_factory.mktemp("genai") / "tiny-genai")


@pytest.fixture(scope="module")
def genai_model(genai_dir):
    return load_model(genai_dir, provider="cpu", threads=1)


# ---- optimum's merged decoder ---------------------------------------------------------------------
def test_merged_folder_is_what_optimum_wrote(merged_dir, merged_model):
    assert not (merged_dir / "model.onnx").exists()
    assert merged_model.graph == merged_dir / "onnx" / "decoder_model_merged.onnx"
    proto = onnx.load(str(merged_model.graph))
    assert [n.op_type for n in proto.graph.node] == ["If"]
    assert "use_cache_branch" in merged_model.input_names
    assert merged_model.attention == "standard"


def test_merged_decoder_generates_the_reference_tokens(merged_model, plain_model, tiny_model):
    gen = Generator(merged_model)
    p = gen.encode_chat(CHAT)
    ref = tokens(plain_model, p, 20)
    assert tokens(merged_model, p, 20) == ref == tokens(tiny_model, p, 20)
    assert len(set(ref)) > 3       # not one token repeated: a real reply to compare


def test_merged_decoder_runs_both_branches(merged_model, plain_model):
    """The first step runs the no-past branch, later chunks and decode steps the with-past one:
    logits match the plain graph at every step."""
    ra, rb = Runner(merged_model), Runner(plain_model)
    ca, cb = ra.new_cache(), rb.new_cache()
    p = prompt_ids(40, seed=3)
    la, lb = ra.forward(ca, p[:25]), rb.forward(cb, p[:25])       # no past
    assert np.max(np.abs(la - lb)) <= TOL
    la, lb = ra.forward(ca, p[25:]), rb.forward(cb, p[25:])       # a second chunk, with past
    assert np.max(np.abs(la - lb)) <= TOL
    for _ in range(5):
        t = int(np.argmax(lb))
        assert t == int(np.argmax(la))
        la, lb = ra.forward(ca, [t]), rb.forward(cb, [t])
        assert np.max(np.abs(la - lb)) <= TOL
    assert len(ca) == 45 and ca.keys[0].shape == (1, 2, 45, 16)


def test_merged_decoder_chunked_prefill(merged_model, tiny_model, monkeypatch):
    monkeypatch.setattr(runner_mod, "PREFILL_CHUNK", 7)
    monkeypatch.setattr("engine.generation.generate.PREFILL_CHUNK", 7)     # the generator chunks too
    p = prompt_ids(30, seed=5)
    assert tokens(merged_model, p, 12) == tokens(tiny_model, p, 12)


# ---- onnxruntime-genai's model builder ------------------------------------------------------------
def test_genai_folder_has_no_config_json(genai_dir, genai_model, tiny_model):
    assert not (genai_dir / "config.json").exists() and not (genai_dir / "generation_config.json").exists()
    out = onnx.load(str(genai_dir / "model.onnx"), load_external_data=False).graph.output[0]
    assert out.name == "logits" and out.type.tensor_type.shape.dim[1].dim_param == "sequence_length"
    assert genai_model.context_window == 512 == tiny_model.context_window
    assert genai_model.eos_token_ids == tiny_model.eos_token_ids
    assert genai_model.kv.n_layers == 2 and genai_model.kv.kv_heads == 2 and genai_model.kv.head_dim == 16
    assert genai_model.attention == "gqa"


def test_genai_sampling_defaults_come_from_search(genai_model, tiny_model):
    """genai_config.json's search section is the sampler's default, as generation_config.json is."""
    assert genai_model.generation_config["temperature"] == 0.7
    assert genai_model.generation_config["repetition_penalty"] == 1.1
    a = resolve_sampling(None, genai_model.generation_config)
    b = resolve_sampling(None, {k: v for k, v in tiny_model.generation_config.items() if k != "min_p"})
    assert a == b


def test_genai_folder_generates_the_reference_tokens(genai_model, tiny_model):
    """Logits for every position: the prefill's [1, n, vocab] and the decode steps' [1, 1, vocab]
    (the crash of the issue: an output bound once kept the prefill's shape)."""
    gen = Generator(genai_model)
    p = gen.encode_chat(CHAT)
    ref = tokens(tiny_model, p, 24)
    assert tokens(genai_model, p, 24) == ref and len(set(ref)) > 3


def test_genai_logits_match_step_by_step(genai_model, tiny_model, monkeypatch):
    monkeypatch.setattr(runner_mod, "PREFILL_CHUNK", 16)      # chunks of 16 then a shorter one
    ra, rb = Runner(genai_model), Runner(tiny_model)
    ca, cb = ra.new_cache(), rb.new_cache()
    p = prompt_ids(41, seed=11)
    la, lb = ra.forward(ca, p), rb.forward(cb, p)
    assert la.shape == lb.shape == (420,)
    assert np.max(np.abs(la - lb)) <= TOL
    for n in (1, 1, 3, 1, 2, 1):       # decode steps and short multi-token steps in between
        extra = [int(np.argmax(la))] + prompt_ids(n - 1, seed=n)
        la, lb = ra.forward(ca, extra), rb.forward(cb, extra)
        assert np.max(np.abs(la - lb)) <= TOL


def test_genai_folder_in_a_chat_session(genai_model, tiny_model, tmp_path):
    """Two turns through the session manager: the second reuses the first's KV (truncation and
    growth of the shared buffer) and still matches the converted model."""
    replies = []
    for model, state in ((genai_model, tmp_path / "a"), (tiny_model, tmp_path / "b")):
        m = SessionManager(model, state)
        try:
            sid = m.open().session_id
            r1 = collect(m.chat(sid, "Hello there", sampling=greedy(10)))
            r2 = collect(m.chat(sid, "And again", sampling=greedy(10)))
            replies.append((r1.token_ids, r2.token_ids, r2.figures.reused_tokens))
        finally:
            m.shutdown()
    assert replies[0] == replies[1] and replies[0][2] > 0


@pytest.fixture
def genai_copy(genai_dir, tmp_path) -> Path:
    dest = tmp_path / "genai"
    shutil.copytree(genai_dir, dest)
    return dest


def edit_genai(folder: Path, edit) -> None:
    path = folder / "genai_config.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def refused(folder: Path) -> str:
    with pytest.raises(ModelLoadError) as err:
        load_model(folder, provider="cpu", threads=1)
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


@pytest.mark.parametrize("edit,words", [
    (lambda d: d["model"]["decoder"]["inputs"].update(past_key_names="past.%d.k"), "past_key_names"),
    (lambda d: d["model"]["decoder"].update(filename="../model.onnx"), "filename"),
    (lambda d: d["model"]["decoder"].update(filename="other.onnx"), "other.onnx: missing"),
    (lambda d: d["model"].update(decoder=[1]), "model.decoder should be an object"),
    (lambda d: d["model"]["decoder"].update(num_key_value_heads="2"), "num_key_value_heads"),
    (lambda d: d["model"].update(context_length=-4), "max_position_embeddings"),
    (lambda d: d["search"].update(temperature=-1), "genai_config.json"),
])
def test_damaged_genai_config_is_one_line(genai_copy, edit, words):
    edit_genai(genai_copy, edit)
    msg = refused(genai_copy)
    assert words in msg, msg


def test_genai_config_not_json(genai_copy):
    (genai_copy / "genai_config.json").write_bytes(b"{\"model\": ")
    assert "genai_config.json: not valid JSON" in refused(genai_copy)


def test_config_json_wins_over_genai_config(genai_copy, tiny_dir):
    """A folder with both (someone added a config.json, as the issue did) reads config.json."""
    shutil.copyfile(tiny_dir / "config.json", genai_copy / "config.json")
    edit_genai(genai_copy, lambda d: d["model"].update(context_length=256))
    assert load_model(genai_copy, provider="cpu", threads=1).context_window == 512
    (genai_copy / "config.json").unlink()
    assert load_model(genai_copy, provider="cpu", threads=1).context_window == 256


def test_a_graph_with_an_input_amber_does_not_feed_is_refused(merged_dir, tmp_path):
    """e.g. token_type_ids: one line at load, not ONNX Runtime's error on the first step."""
    folder = tmp_path / "extra"
    shutil.copytree(merged_dir, folder)
    path = folder / "onnx" / "decoder_model_merged.onnx"
    proto = onnx.load(str(path))
    proto.graph.input.append(onnx.helper.make_tensor_value_info("token_type_ids", onnx.TensorProto.INT64,
                                                                ["batch", "seq"]))
    onnx.save_model(proto, str(path))
    msg = refused(folder)
    assert "needs inputs Amber does not feed (token_type_ids)" in msg, msg


def test_genai_folder_gets_no_amber_gpu_variant(genai_dir):
    """Amber's float16 variant rewriter expects its own graphs; a builder graph runs as it is
    (on a GPU too: `auto` would otherwise make the variant) and an explicit fp16 is one line."""
    with pytest.raises(ModelLoadError, match="not an Amber-converted graph"):
        load_model(genai_dir, provider="cpu", threads=1, variant="fp16")
    assert not (genai_dir / "gpu").exists()
    assert load_model(genai_dir, provider="cpu", threads=1, variant="auto").variant == "fp32"


def test_genai_folder_with_a_config_json_added_generates(genai_copy, tiny_dir, tiny_model):
    """The issue's crash: with a config.json added, the first decode step failed on the logits
    output bound with the prefill's shape."""
    shutil.copyfile(tiny_dir / "config.json", genai_copy / "config.json")
    model = load_model(genai_copy, provider="cpu", threads=1)
    p = prompt_ids(32, seed=2)
    assert tokens(model, p, 8) == tokens(tiny_model, p, 8)
