"""Fixtures for the model-library tests: a local Hub serving tiny GGUF files, AMBER_HOME in tmp."""
from __future__ import annotations

import pytest

from tests.support.hub_server import REPO, Hub, Repo, start
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

TINY = TinyConfig(n_layers=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_ff=128,
                  context_length=512, seed=7)



@pytest.fixture(scope="session")
def tiny_ggufs(tmp_path_factory) -> dict[str, bytes]:
    """The tiny chat model as two real quantizations: {"Q8_0": bytes, "F32": bytes}."""
    from dataclasses import replace
    out = {}
    for wtype in ("Q8_0", "F32"):
        path = tmp_path_factory.mktemp("hub-gguf") / f"tiny-{wtype}.gguf"
        write_tiny_gguf(path, replace(TINY, wtype=wtype))
        out[wtype] = path.read_bytes()
    return out


@pytest.fixture
def hub(tiny_ggufs, monkeypatch, tmp_path):
    """The local Hub (HF_ENDPOINT points at it) with one public GGUF repo of two quantizations."""
    h = start(Hub())
    h.repos[REPO] = Repo(files={"Tiny-Chat-Q8_0.gguf": tiny_ggufs["Q8_0"],
                                "Tiny-Chat-F32.gguf": tiny_ggufs["F32"],
                                "README.md": b"# tiny\n"},
                         architecture="llama", downloads=10)
    monkeypatch.setenv("HF_ENDPOINT", h.url)
    monkeypatch.setenv("AMBER_HOME", str(tmp_path / "home"))
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    yield h
    h.stop()
