"""Amber's GGUF import of qwen3 / gemma2 / gemma3 / phi3 against llama.cpp itself (llama-cpp-python in
the side venv that `make bench-deps` builds): the same tiny random GGUFs the unit tests convert,
evaluated by llama.cpp's CPU backend, give the same last-position logits as Amber's converted model.
This checks the importer's reading of each architecture's GGUF layout (tensor names, Gemma's stored
`1 + w` norms, phi3's fused Q|K|V and gate|up, Q/K norms, soft-caps, windows, local/global rotary)
against the engine that defines the format, not only against the numpy reference. Run by
`make test-remote`; skipped elsewhere.

Measured (llama-cpp-python 0.3.36, F32 weights): max |Δlogit| Amber vs llama.cpp 7e-4 to 3e-3 for
every architecture, the same as for plain llama (llama.cpp's own float32 rounding: Amber vs the
float64 reference is ~2e-6). Two documented differences, both checked here: llama.cpp picks phi3's
long RoPE factors from its context size (transformers and Amber from the sequence length), and it
ignores phi3's sliding window (transformers and Amber apply it).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))   # test_convert's configs and reference

from tests.support.reference_model import CONFIGS, Runner, reference_logits

from engine.convert import convert_gguf
from tests.support.tiny_gguf import TinyConfig, TinyModel, write_tiny_gguf

pytestmark = pytest.mark.skipif(os.environ.get("AMBER_TEST_REMOTE") != "1",
                                reason="needs llama.cpp from the side venv: run `make test-remote`")

TOL = 1e-2       # measured at most 3.05e-3 (llama, head_dim 32) over these models
N_CTX = 512      # the tiny models' context
WORKER = f"""
import json, sys, numpy as np
from llama_cpp import Llama
path, ids_file, out = sys.argv[1:4]
llm = Llama(model_path=path, n_ctx={N_CTX}, n_batch=512, n_ubatch=512, n_threads=2, flash_attn=False, verbose=False)
llm.eval(json.load(open(ids_file)))
np.save(out, np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)))
"""
F32 = [c for c in CONFIGS if c.wtype == "F32" and c.arch in ("llama", "qwen3", "gemma2", "gemma3", "phi3")][:1] + \
      [c for c in CONFIGS if c.wtype == "F32" and c.arch in ("qwen3", "gemma2", "gemma3", "phi3")]
PHI3_SWA = TinyConfig(arch="phi3", tied=False, sliding_window=32, seed=44)


def _side_python() -> Path:
    from bench.harness.common import SIDE_VENV  # honours AMBER_TEST_HOME / AMBER_BENCH_VENV
    return SIDE_VENV / "bin" / "python"


@pytest.fixture(scope="module")
def llama_cpp(tmp_path_factory):
    """logits(model, ids) from llama.cpp for a tiny GGUF."""
    py = _side_python()
    if not py.is_file() or subprocess.run([str(py), "-c", "import llama_cpp"], capture_output=True,
                                          check=False).returncode:
        pytest.fail(f"{py}: no llama_cpp; run `make bench-deps`")
    tmp = tmp_path_factory.mktemp("llamacpp-arch")

    def run(model: TinyModel, ids: np.ndarray) -> np.ndarray:
        ids_file, out = tmp / "ids.json", tmp / "logits.npy"
        ids_file.write_text(json.dumps([int(i) for i in ids]))
        p = subprocess.run([str(py), "-c", WORKER, str(model.path), str(ids_file), str(out)],
                           capture_output=True, text=True, timeout=300, check=False)
        assert p.returncode == 0, p.stderr[-2000:]
        return np.load(out).astype(np.float64)
    return run


@pytest.fixture(scope="module")
def built(tmp_path_factory, monkeypatch_module):
    tmp = tmp_path_factory.mktemp("arch-gguf")

    def get(cfg: TinyConfig) -> tuple[TinyModel, Runner]:
        m = write_tiny_gguf(tmp / f"{cfg.name}.gguf", cfg)
        folder = tmp / cfg.name
        if not folder.exists():
            convert_gguf(m.path, folder)
        return m, Runner(folder)
    return get


@pytest.fixture(scope="module")
def monkeypatch_module():
    # llama.cpp sets token attributes by looking up Phi-3's own special tokens ("</s>", "<unk>", ...)
    # when the model's general.name contains "phi3": the tiny vocabulary has none of them, so the
    # tiny files are named without it (nothing else reads the name).
    import gguf
    mp = pytest.MonkeyPatch()
    orig = gguf.GGUFWriter.add_name
    mp.setattr(gguf.GGUFWriter, "add_name", lambda self, name: orig(self, name.replace("phi3", "p3")))
    yield mp
    mp.undo()


def _ids(model: TinyModel, n: int) -> np.ndarray:
    return np.random.default_rng(7).integers(3, model.vocab_size, n)


@pytest.mark.parametrize("cfg", F32, ids=[c.name for c in F32])
@pytest.mark.parametrize("n", [21, 300])
def test_logits_match_llama_cpp(built, llama_cpp, cfg, n):
    if cfg.longrope and n <= cfg.longrope:
        pytest.skip("llama.cpp uses the long factors here (test_phi3_longrope_choice)")
    model, runner = built(cfg)
    ids = _ids(model, n)
    got, _ = runner.run(ids)
    assert np.abs(got - llama_cpp(model, ids)).max() <= TOL


def test_phi3_longrope_choice(built, llama_cpp):
    """A 21-token prompt within the original context: Amber (like transformers) rotates with the
    short factors; llama.cpp, started with a context beyond the original, with the long ones."""
    cfg = next(c for c in F32 if c.longrope)
    model, runner = built(cfg)
    ids = _ids(model, 21)
    got, _ = runner.run(ids)
    theirs = llama_cpp(model, ids)
    as_long = dict(model.weights, rope_short=model.weights["rope_long"])
    long_ref = reference_logits(TinyModel(model.path, cfg, as_long, model.tokenizer, model.tokens), ids)
    assert np.abs(theirs - long_ref).max() <= TOL
    assert np.abs(got - reference_logits(model, ids)).max() <= 1e-3
    assert np.abs(got - theirs).max() > 10 * TOL


def test_phi3_sliding_window(built, llama_cpp):
    """llama.cpp ignores phi3's sliding window; with it left out of the reference they agree."""
    model, runner = built(PHI3_SWA)
    ids = _ids(model, 120)
    got, _ = runner.run(ids)
    theirs = llama_cpp(model, ids)
    no_window = TinyModel(model.path, replace(PHI3_SWA, sliding_window=0), model.weights, model.tokenizer,
                          model.tokens)
    assert np.abs(theirs - reference_logits(no_window, ids)).max() <= TOL
    assert np.abs(got - reference_logits(model, ids)).max() <= 1e-3
