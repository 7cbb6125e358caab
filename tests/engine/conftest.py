"""Shared fixtures for the engine's generation, session and CLI tests.

The tiny chat model is a random-weight llama (2 layers, n_embd 64, GQA 4/2, context 512) written
by `tiny_gguf.write_tiny_gguf` and converted by `engine.convert.convert_gguf`, once per test
session. Its tokenizer is a small byte-level BPE with ChatML specials and a ChatML template, so
`SessionManager.chat` works on it; its replies are gibberish but deterministic under greedy.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.tiny_gguf import TinyConfig, TinyModel, write_tiny_gguf

REPO = Path(__file__).resolve().parents[2]
TINY = TinyConfig(n_layers=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_ff=128,
                  context_length=512, seed=7)
DEFAULT_MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def tiny_source(tmp_path_factory) -> TinyModel:
    """The tiny GGUF and the HF-order float weights it encodes."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny-chat.gguf", TINY)


@pytest.fixture(scope="session")
def tiny_dir(tiny_source, tmp_path_factory) -> Path:
    """The converted (GroupQueryAttention) model folder. Treat it as read-only."""
    from engine.convert import convert_gguf
    return convert_gguf(tiny_source.path, tmp_path_factory.mktemp("tiny-model") / "tiny-chat")


@pytest.fixture(scope="session")
def tiny_model(tiny_dir):
    """The tiny model loaded on CPU (one LoadedModel shared by the whole test session)."""
    from engine.runtime.model import load_model
    return load_model(tiny_dir, provider="cpu", threads=1)


@pytest.fixture(scope="session")
def plain_dir(tiny_source, tiny_dir, tmp_path_factory) -> Path:
    """The same weights as an optimum-style plain-attention graph (no GroupQueryAttention)."""
    from tests.support.plain_onnx import write_plain_model
    return write_plain_model(tiny_source, tiny_dir, tmp_path_factory.mktemp("plain") / "tiny-plain")


@pytest.fixture(scope="session")
def plain_model(plain_dir):
    from engine.runtime.model import load_model
    return load_model(plain_dir, provider="cpu", threads=1)


@pytest.fixture
def generator(tiny_model):
    from engine.generation.generate import Generator
    return Generator(tiny_model)


@pytest.fixture
def default_model_dir() -> Path:
    """The real default model (SmolLM2-135M-Instruct) prepared by `make test`, or a skip."""
    home = os.environ.get("AMBER_TEST_HOME")
    if not home:
        pytest.skip("AMBER_TEST_HOME is not set: the real default model is prepared by `make test`")
    path = Path(home).expanduser().resolve() / "models" / DEFAULT_MODEL
    if not (path / "model.onnx").is_file():
        pytest.skip(f"the default model is not prepared at {path} (run: make default-model)")
    return path


@pytest.fixture(scope="session")
def default_model_ort_dir(tmp_path_factory) -> Path:
    """The real default model in ONNX Runtime's form (MatMulNBits; what GPU variants are made
    from): the prepared one when it has that form, else converted from the wheel `make
    default-model` keeps, with AMBER_KERNELS=ort (a CPU machine's default is the native form)."""
    import json

    from engine.convert import default_model
    home = os.environ.get("AMBER_TEST_HOME")
    if not home:
        pytest.skip("AMBER_TEST_HOME is not set: the real default model is prepared by `make test`")
    prepared = Path(home).expanduser().resolve() / "models" / DEFAULT_MODEL
    marker = prepared / default_model.MARKER
    if marker.is_file() and json.loads(marker.read_text()).get("kernels", "ort") == "ort":
        return prepared
    wheel = Path(home).expanduser().resolve() / "downloads" / default_model.WHEEL_FILE
    if not wheel.is_file():
        pytest.skip(f"no {default_model.WHEEL_FILE} under AMBER_TEST_HOME/downloads (make default-model keeps it)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_KERNELS", "ort")
        return default_model.ensure_default_model(model_dir=tmp_path_factory.mktemp("ort") / DEFAULT_MODEL,
                                                  wheel=wheel)


@pytest.fixture
def run_cli(tmp_path):
    """run_cli(*args, env=None, timeout=120) -> CompletedProcess of `python -m engine ARGS`.

    AMBER_HOME points into tmp_path unless `env` says otherwise, so nothing touches user data."""
    import subprocess

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        full = dict(os.environ)
        full["AMBER_HOME"] = str(tmp_path / "amber-home")
        full["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([full["PYTHONPATH"]] if full.get("PYTHONPATH") else []))
        full.update(env or {})
        return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], cwd=REPO, env=full,
                              capture_output=True, text=True, timeout=timeout)
    return run
