"""bench.experiments.profile_step's per-node view: medians per node over the profiled decode steps
and the MatMulNBits table by form, on a real converted model and ONNX Runtime's own profiler."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.experiments import profile_step


def test_node_medians_drop_a_preempted_run() -> None:
    def ev(name: str, ts: int, dur: int) -> dict:
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": "MatMulNBits"}}
    runs = [(0, 100), (200, 300), (400, 500)]
    events = [ev("a", 10, 20), ev("a", 210, 22), ev("a", 410, 900), ev("a", 610, 5),   # the last is outside
              {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100}]
    assert profile_step.node_medians(events, runs) == {"a": ("MatMulNBits", 22.0)}


def test_matmul_forms_of_a_real_decode_profile(tmp_path: Path) -> None:
    import onnx

    from engine.convert import FAST, convert_gguf
    from engine.runtime.model import load_model
    from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf
    cfg = variant(TinyConfig(), wtype="Q4_K", tied=True, seed=40, n_embd=256, n_head=4, head_dim=64, n_ff=512,
                  overrides=(("attn_v.weight", "Q6_K"), ("ffn_down.weight", "Q6_K"), ("token_embd.weight", "Q6_K")))
    write_tiny_gguf(tmp_path / "m.gguf", cfg)
    folder = convert_gguf(tmp_path / "m.gguf", tmp_path / "conv", accuracy_level=FAST, gpu_variant=False,
                          kernels="ort")   # the MatMulNBits forms
    model = load_model(str(folder), provider="cpu", threads=1)
    out = tmp_path / "prof"
    out.mkdir()
    res = profile_step.profile_decode(model, ctx=6, steps=3, threads=1, out_dir=out)
    forms = res["matmul_forms"]
    assert sum(r["nodes"] for r in forms) == res["optimized_ops"]["MatMulNBits"]
    assert {(r["bits"], r["block"]) for r in forms} >= {(8, 16), (4, 32)}       # Q6_K and Q4_K forms
    for r in forms:
        nb = -(-r["K"] // r["block"])
        levels_and_scales = r["N"] * nb * r["block"] * r["bits"] // 8 + r["N"] * nb * 4
        zero_points = r["N"] * -(-nb * r["bits"] // 8)
        assert r["bytes"] in (levels_and_scales, levels_and_scales + zero_points), r
        assert r["us_per_node"] > 0 and r["gb_s"] == pytest.approx(r["bytes"] / r["us_per_node"] / 1e3)
    assert [r["ms_per_step"] for r in forms] == sorted((r["ms_per_step"] for r in forms), reverse=True)
    assert not list(out.glob("optimized.onnx*"))             # the dumped graph is cleaned up
    assert onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.node   # the folder is untouched


def test_native_form_nodes_in_the_form_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A native-form model (ai.amber.GgufMatMul over the GGUF's rows) profiles with the op library
    registered; its GgufMatMul nodes are grouped by (K, N, GGML type), bytes = N rows of the GGUF's."""
    import engine.native as native
    from engine.convert import FAST, convert_gguf
    from engine.native import build
    from engine.runtime.model import load_model
    from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf
    if build.find_compiler() is None and native.library_path() is None:
        pytest.skip("no C compiler (cc/gcc/clang) to build the native kernels")
    build.build()
    monkeypatch.setenv("AMBER_KERNELS", "native")
    cfg = variant(TinyConfig(), wtype="Q4_K", tied=True, seed=41, n_embd=256, n_head=4, head_dim=64, n_ff=512,
                  overrides=(("attn_v.weight", "Q6_K"), ("ffn_down.weight", "Q6_K"), ("token_embd.weight", "Q6_K")))
    write_tiny_gguf(tmp_path / "m.gguf", cfg)
    folder = convert_gguf(tmp_path / "m.gguf", tmp_path / "conv", accuracy_level=FAST, gpu_variant=False,
                          kernels="native")
    model = load_model(str(folder), provider="cpu", threads=1)
    out = tmp_path / "prof"
    out.mkdir()
    res = profile_step.profile_decode(model, ctx=6, steps=3, threads=1, out_dir=out, prefill=80, chunk=32)
    forms = res["matmul_forms"]
    assert sum(r["nodes"] for r in forms) == res["optimized_ops"]["GgufMatMul"] > 0
    assert {r["bits"] for r in forms} == {"ggml12", "ggml14"}              # Q4_K and Q6_K rows
    for r in forms:
        ggml_type = int(r["bits"][4:])
        assert r["bytes"] == r["N"] * native.kernels().amber_row_bytes(ggml_type, r["K"]), r
    assert res["prefill_chunks"] >= 1 and res["prefill"]["runs"] == res["prefill_chunks"]
    assert "GgufMatMul" in res["prefill"]["ops"]
    # the prefill's runs one by one: 32, 32 and 16 tokens after 0, 32 and 64 cached positions
    by_chunk = res["prefill_by_chunk"]
    assert res["prefill_chunks"] == 3 and [c["depth"] for c in by_chunk] == [0, 32, 64]
    assert all(c["runs"] == 1 and c["run_us"] > 0 and "GgufMatMul" in c["ops"] for c in by_chunk)
