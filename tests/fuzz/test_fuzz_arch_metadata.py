"""Fuzzing the architecture-specific GGUF metadata (engine/convert/arch.py): soft-caps, sliding
windows and their layer pattern, attention scale, Phi-3 long-context RoPE, gemma3's local base.

Property: any value of any type under those keys ends in a spec or in one `ModelImportError`
line, never another exception (a zero original context once divided a logarithm by zero).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.convert import ModelImportError
from engine.convert.gguf_source import GGUFSource
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

KEYS = ("attention.sliding_window", "attention.sliding_window_pattern", "attn_logit_softcapping",
        "final_logit_softcapping", "attention.scale", "rope.scaling.original_context_length",
        "rope.scaling.attn_factor", "rope.freq_base_swa")
CONFIGS = {
    "gemma2": TinyConfig(arch="gemma2", n_layers=2, sliding_window=16, attn_softcap=2.0, final_softcap=3.0),
    "gemma3": TinyConfig(arch="gemma3", n_layers=6, sliding_window=16),
    "phi3": TinyConfig(arch="phi3", tied=False, longrope=64),
    "qwen3": TinyConfig(arch="qwen3"),
}
values = st.one_of(
    st.integers(0, 2 ** 32 - 1), st.sampled_from([0, 1, 2, 5, 6, 511, 512, 513, 2 ** 31]),
    st.floats(allow_nan=True, allow_infinity=True, width=32), st.sampled_from([0.0, -1.0, 1e-30, 1e30]),
    st.booleans(), st.text(max_size=8))


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-arch")


@given(arch=st.sampled_from(sorted(CONFIGS)),
       meta=st.dictionaries(st.sampled_from(KEYS), values, min_size=1, max_size=4))
def test_arch_metadata_is_read_or_refused(work, arch, meta):
    cfg = CONFIGS[arch]
    keys = {f"{arch}.{k}": v for k, v in meta.items()}
    path = work / f"{arch}.gguf"
    write_tiny_gguf(path, cfg, omit=tuple(keys), metadata=keys)
    try:
        spec = GGUFSource(path).spec()
    except ModelImportError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg, repr(msg)
        return
    p = spec.params
    assert all(isinstance(f, bool) for f in p.swa_layers) and len(p.swa_layers) in (0, cfg.n_layers)
    assert p.attn_scale is None or p.attn_scale > 0
