"""Provider selection for the GPU variant: loading it, its own fingerprint, KV that never mixes
between the variants, float16 KV through pinned sessions, and the strict GPU session's fallback
(`session.disable_cpu_ep_fallback`) with what onnxruntime-gpu really does where CUDA cannot run."""
from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from engine.runtime import providers
from engine.api import SamplingParams, SessionKind
from engine.generation.generate import Generator, collect
from engine.kvstore.kvfile import MAGIC
from engine.runtime.model import load_model
from engine.sessions.manager import SessionManager

B = 16
P1 = [int(t) for t in np.random.default_rng(5).integers(3, 420, 40)]
EXTRA = [int(t) for t in np.random.default_rng(6).integers(3, 420, 12)]
GPU_LISTED = any(p in ort.get_available_providers() for p in providers.GPU_PROVIDERS)


def greedy(n: int = 8) -> SamplingParams:
    return SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=n)


@pytest.fixture(scope="module")
def fp16_model(tiny_dir):
    return load_model(tiny_dir, provider="cpu", threads=1, variant="fp16")


@pytest.fixture
def managers(monkeypatch, tmp_path):
    monkeypatch.setattr("engine.kvstore.prefix_cache.JANITOR_DELAY_S", 0.01)
    made: list[SessionManager] = []

    def make(model, state: Path) -> SessionManager:
        m = SessionManager(model, state, block_tokens=B)
        made.append(m)
        return m
    yield make
    for m in made:
        m.shutdown(timeout=5)


def _header(path: Path) -> dict:
    data = path.read_bytes()
    assert data[:8] == MAGIC
    n = int.from_bytes(data[8:12], "little")
    return json.loads(data[12:12 + n])


def reference(model, prompt: list[int], n: int = 8) -> list[int]:
    gen = Generator(model)
    return collect(gen.stream(gen.new_cache(), prompt, greedy(n))).token_ids


# ---- loading ----------------------------------------------------------------------------------------
def test_fp16_variant_loads_on_the_cpu_provider(tiny_model, fp16_model, tiny_dir):
    assert fp16_model.provider == "CPUExecutionProvider" and fp16_model.provider_fallback_reason is None
    assert fp16_model.variant == "fp16" and fp16_model.graph == tiny_dir / "gpu" / "model.onnx"
    assert fp16_model.kv.dtype == np.float16 and fp16_model.kv.shared_buffer
    assert fp16_model.kv.bytes_per_token * 2 == tiny_model.kv.bytes_per_token
    assert tiny_model.variant == "fp32" and tiny_model.graph == tiny_dir / "model.onnx"
    # Each variant has its own fingerprint (and its own cache of it).
    assert fp16_model.fingerprint != tiny_model.fingerprint
    assert json.loads((tiny_dir / "gpu" / "amber_fingerprint.json").read_text())["fingerprint"] == \
        fp16_model.fingerprint
    assert load_model(tiny_dir, provider="cpu", threads=1).fingerprint == tiny_model.fingerprint
    # Greedy through the runner's shared float16 buffers agrees with float32 on the tiny model's
    # clear choices, and the cache really holds float16.
    gen = Generator(fp16_model)
    cache = gen.new_cache()
    out = collect(gen.stream(cache, P1, greedy(6)))
    assert out.token_ids == reference(tiny_model, P1, 6)
    assert cache.export(0, len(cache)).dtype == np.float16


def test_existing_folder_gets_the_variant_on_first_use(tiny_dir, tmp_path):
    """A folder imported before the variant existed: it is made from the saved graph (no GGUF),
    with progress, once; a re-import (the CPU graph changes) makes it stale."""
    folder = tmp_path / "old-model"
    shutil.copytree(tiny_dir, folder, ignore=shutil.ignore_patterns("gpu", "amber_fingerprint.json"))
    assert not (folder / "gpu").exists()
    seen: list[tuple[int, int]] = []
    m = load_model(folder, provider="cpu", threads=1, variant="fp16", progress=lambda d, t, w: seen.append((d, t)))
    assert m.variant == "fp16" and (folder / "gpu" / "model.onnx").is_file()
    assert seen and seen[-1][0] == seen[-1][1]
    stamp = (folder / "gpu" / "model.onnx").stat().st_mtime_ns
    seen.clear()
    load_model(folder, provider="cpu", threads=1, variant="fp16", progress=lambda d, t, w: seen.append((d, t)))
    assert not seen and (folder / "gpu" / "model.onnx").stat().st_mtime_ns == stamp   # reused
    (folder / "model.onnx").write_bytes((folder / "model.onnx").read_bytes())          # "re-imported"
    load_model(folder, provider="cpu", threads=1, variant="fp16", progress=lambda d, t, w: seen.append((d, t)))
    assert seen                                                                        # rebuilt
    assert not [p.name for p in folder.iterdir() if ".partial" in p.name or ".old" in p.name]


def test_variant_of_a_foreign_graph_is_refused_with_one_line(plain_dir):
    from engine.runtime.model import ModelLoadError
    with pytest.raises(ModelLoadError, match="not an Amber-converted graph"):
        load_model(plain_dir, provider="cpu", variant="fp16")


# ---- KV never mixes; float16 KV is lossless through pinned sessions ------------------------------
def test_kv_saved_by_one_variant_is_never_loaded_into_the_other(tiny_model, fp16_model, managers, tmp_path):
    state = tmp_path / "state"
    m = managers(tiny_model, state)
    s = str(uuid.uuid4())
    m.open(s, SessionKind.PINNED)
    t1 = collect(m.generate_tokens(s, P1, greedy())).token_ids
    assert m.wait_for_saves()
    m.shutdown()
    # The float16 variant over the same state: the float32 KV is not used, the chat re-prefills.
    m16 = managers(fp16_model, state)
    m16.open(s)
    r = collect(m16.generate_tokens(s, P1 + t1 + EXTRA, greedy()))
    assert r.figures.resume != "disk" and r.figures.reused_tokens == 0
    assert "another model" in (r.figures.fallback_reason or "")
    assert r.token_ids == reference(fp16_model, P1 + t1 + EXTRA)
    assert m16.wait_for_saves()
    m16.shutdown()
    # Both variants' blocks are on disk now, each under its own fingerprint and dtype.
    headers = [_header(p) for p in state.rglob("*.kv[bt]")]
    assert {(h["fingerprint"], h["dtype"]) for h in headers} == {
        (tiny_model.fingerprint, "float32"), (fp16_model.fingerprint, "float16")}
    # Saved last by the float16 variant: the float32 graph does not take that manifest's KV; it
    # may reuse only its own float32 blocks of the shared prefix (from the first save).
    m32 = managers(tiny_model, state)
    m32.open(s)
    r = collect(m32.generate_tokens(s, P1 + t1 + EXTRA, greedy()))
    assert "another model" in (r.figures.fallback_reason or "")
    assert r.figures.reused_tokens <= (len(P1) + len(t1) - 1) // B * B
    assert r.token_ids == reference(tiny_model, P1 + t1 + EXTRA)
    cache = m32._open[s].cache                              # white-box: the float32 model's own KV
    assert cache.export(0, len(cache)).dtype == np.float32


def test_pinned_resume_on_the_fp16_variant_is_lossless(fp16_model, managers, tmp_path):
    state = tmp_path / "state"
    m = managers(fp16_model, state)
    s = str(uuid.uuid4())
    m.open(s, SessionKind.PINNED)
    t1 = collect(m.generate_tokens(s, P1, greedy())).token_ids
    assert m.wait_for_saves() and m.info(s).save_error is None
    m.shutdown()
    saved = sorted(state.rglob("*.kv[bt]"))
    assert saved
    for path in saved:                         # the variant's own dtype on disk
        header = _header(path)
        assert header["dtype"] == "float16" and header["fingerprint"] == fp16_model.fingerprint
    live = managers(fp16_model, tmp_path / "live")
    other = str(uuid.uuid4())
    live.open(other, SessionKind.TEMPORARY)
    assert collect(live.generate_tokens(other, P1, greedy())).token_ids == t1
    p2 = P1 + t1 + EXTRA
    never = collect(live.generate_tokens(other, p2, greedy()))
    m2 = managers(fp16_model, state)
    m2.open(s)
    r = collect(m2.generate_tokens(s, p2, greedy()))
    assert r.figures.resume == "disk" and r.figures.fallback_reason is None
    assert r.figures.reused_tokens == len(P1) + len(t1) - 1
    assert r.token_ids == never.token_ids
    got, want = m2._open[s].cache, live._open[other].cache    # white-box: bit-identical KV
    assert got.tokens == want.tokens
    assert np.array_equal(got.export(0, len(got)), want.export(0, len(want)))


# ---- the strict GPU session and its fallback --------------------------------------------------------
def test_strict_options_disable_the_cpu_fallback():
    so = providers.strict_session_options("CUDAExecutionProvider")
    assert so.get_session_config_entry(providers.DISABLE_CPU_FALLBACK) == "1"
    dml = providers.strict_session_options(providers.DML)
    assert dml.get_session_config_entry(providers.DISABLE_CPU_FALLBACK) == "1"
    assert dml.enable_mem_pattern is False and dml.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL


@pytest.mark.skipif(not GPU_LISTED, reason="this ONNX Runtime build lists no CUDA/DirectML provider")
def test_a_graph_the_gpu_cannot_place_fails_over_to_cpu_naming_the_nodes(tiny_dir, tiny_model, monkeypatch):
    """The float32 graph asked for on the GPU under disable_cpu_ep_fallback: ORT refuses the
    session (CUDA has no float32 GroupQueryAttention; on a machine without CUDA nothing can be
    placed at all) and Amber runs it on CPU, saying why and naming the nodes."""
    # Past the library pre-check, so that ORT itself judges the strict session.
    monkeypatch.setattr(providers, "provider_library_problem", lambda p: None)
    m = load_model(tiny_dir, provider="gpu", threads=1, variant="fp32")
    assert m.provider == "CPUExecutionProvider" and m.variant == "fp32"
    reason = m.provider_fallback_reason or ""
    gpu = providers.short_name(providers.wanted_providers("gpu")[0])
    assert reason.startswith(f"{gpu} failed: ")
    assert f"no {gpu} kernel for: GroupQueryAttention float ×{tiny_model.kv.n_layers} (" in reason
    assert m.fingerprint == tiny_model.fingerprint       # the CPU graph, as if loaded for CPU
    gen = Generator(m)
    assert collect(gen.stream(gen.new_cache(), P1, greedy(4))).token_ids == reference(tiny_model, P1, 4)


def test_real_onnxruntime_refuses_a_strict_session_it_cannot_place(tiny_dir):
    """What ORT does with disable_cpu_ep_fallback when the GPU provider takes no node (the case
    of onnxruntime-gpu without CUDA, or of the CPU package): an error, never a silent CPU run."""
    gpu = next((p for p in providers.GPU_PROVIDERS if p in ort.get_available_providers()), None)
    if gpu is None or providers.provider_library_problem(gpu) is None:
        pytest.skip("needs a listed GPU provider whose library cannot load (a CPU-only machine)")
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        ort.InferenceSession(str(tiny_dir / "gpu" / "model.onnx"),
                             providers.strict_session_options(gpu), providers=[gpu])
    m = load_model(tiny_dir, provider="auto", threads=1)
    assert m.provider == "CPUExecutionProvider" and m.variant == "fp32"
    assert m.provider_fallback_reason.startswith(f"{providers.short_name(gpu)} failed: ")
    assert "cannot open shared object file" in m.provider_fallback_reason


def test_macos_runs_on_cpu_and_says_why(tiny_dir, monkeypatch):
    monkeypatch.setattr(providers.sys, "platform", "darwin")
    monkeypatch.setattr(providers.ort, "get_available_providers",
                        lambda: ["CoreMLExecutionProvider", "CPUExecutionProvider"])
    assert providers.wanted_providers("auto") == ["CPUExecutionProvider"]
    m = load_model(tiny_dir, provider="auto", threads=1)
    assert m.provider == "CPUExecutionProvider"
    assert "CoreML has no kernels" in (m.provider_fallback_reason or "")
    assert load_model(tiny_dir, provider="cpu", threads=1).provider_fallback_reason is None


def test_no_variant_is_made_for_a_gpu_that_cannot_load(tiny_dir, tmp_path, monkeypatch):
    folder = tmp_path / "m"
    shutil.copytree(tiny_dir, folder, ignore=shutil.ignore_patterns("gpu", "amber_fingerprint.json"))
    monkeypatch.setattr(providers, "wanted_providers", lambda choice: ["CUDAExecutionProvider", providers.CPU])
    monkeypatch.setattr(providers, "provider_library_problem", lambda p: "libcudart.so.13: cannot open it")
    m = load_model(folder, provider="auto", threads=1)
    assert m.provider_fallback_reason == "CUDA failed: libcudart.so.13: cannot open it"
    assert not (folder / "gpu").exists()


def test_read_only_model_folder_gets_its_variant_in_amber_home(tiny_dir, tiny_model, tmp_path, monkeypatch):
    """An installed package's model folder is read-only: the variant goes under AMBER_HOME/variants.
    (Tests run as root, which ignores file modes, so writing into the folder is refused here.)"""
    from engine.onnx import variants
    folder = tmp_path / "installed" / "model"
    shutil.copytree(tiny_dir, folder, ignore=shutil.ignore_patterns("gpu", "amber_fingerprint.json"))
    home = tmp_path / "home"
    monkeypatch.setenv("AMBER_HOME", str(home))
    real = variants.build_variant

    def read_only(model_dir, cpu_graph=None, progress=None, dest=None):
        if dest is None:
            raise PermissionError(13, "Permission denied", str(Path(model_dir) / ".gpu.partial"))
        return real(model_dir, cpu_graph, progress, dest)
    monkeypatch.setattr(variants, "build_variant", read_only)
    m = load_model(folder, provider="cpu", threads=1, variant="fp16")
    assert m.variant == "fp16" and m.graph.parent.parent == home / "variants"
    assert not (folder / "gpu").exists()
    fp = m.fingerprint
    again = load_model(folder, provider="cpu", threads=1, variant="fp16")   # reused, same fingerprint
    assert again.graph == m.graph and again.fingerprint == fp != tiny_model.fingerprint
