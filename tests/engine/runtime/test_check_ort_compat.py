"""packaging/check_ort_compat.py's probe and comparisons, on this interpreter's ONNX Runtime and
the tiny converted model (the cross-release run is `make check-platforms`)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("check_ort_compat", REPO / "packaging" / "check_ort_compat.py")
oc = importlib.util.module_from_spec(_spec)
sys.modules["check_ort_compat"] = oc
_spec.loader.exec_module(oc)


def test_the_probe_runs_the_engine_and_matches_itself(tiny_dir, tmp_path):
    import onnxruntime as ort
    info = oc.run_probe(sys.executable, tiny_dir, tmp_path / "a.npz")
    oc.run_probe(sys.executable, tiny_dir, tmp_path / "b.npz")
    assert info["ort"] == ort.__version__ and info["provider"] == "CPUExecutionProvider"
    assert info["halfcast_exact"] is True and info["prompt_tokens"] > 0 and info["decode_steps"] > 0
    with np.load(tmp_path / "a.npz") as a, np.load(tmp_path / "b.npz") as b:
        ref, got = a["logits"], b["logits"]
    assert ref.shape[0] == len(oc.SCHEDULES) * (info["decode_steps"] + 1) and np.all(np.isfinite(ref))
    result = oc.compare(ref, got)
    assert result.ok and f"equal at {len(ref)}/{len(ref)}" in result.line
    ops = oc.graph_ops(tiny_dir)
    assert "com.microsoft:GroupQueryAttention" in ops and "com.microsoft:SkipSimplifiedLayerNormalization" in ops


def test_a_broken_model_fails_the_probe_with_its_message(tiny_dir, tmp_path):
    import shutil
    broken = tmp_path / "broken"
    shutil.copytree(tiny_dir, broken)
    (broken / "model.onnx").write_bytes(b"not a graph")
    try:
        oc.run_probe(sys.executable, broken, tmp_path / "x.npz")
    except RuntimeError as exc:
        assert "broken" in str(exc) and "ONNX Runtime cannot load it" in str(exc)
    else:
        raise AssertionError("the probe accepted a broken graph")


def _logits(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((6, 50)).astype(np.float32) * 3
    x[:, 7] += 20.0                     # a clear greedy winner at every step
    return x


def test_compare_fails_on_drift_nan_shape_and_a_flipped_greedy_token():
    ref = _logits()
    assert oc.compare(ref, ref + 1e-4).ok
    assert not oc.compare(ref, ref + 0.5).ok                               # beyond ATOL + RTOL * max|ref|
    nan = ref.copy()
    nan[2, 3] = np.nan
    assert "NaN" in oc.compare(ref, nan).line
    assert not oc.compare(ref, ref[:, :-1]).ok
    first, second = np.argsort(-ref[4])[:2]
    flipped = ref.copy()
    flipped[4, first], flipped[4, second] = ref[4, second], ref[4, first]
    bad = oc.compare(ref, flipped)
    assert not bad.ok and "clear-margin steps [4]" in bad.line


def test_compare_accuracy_measures_against_the_float32_twin():
    rng = np.random.default_rng(2)
    exact = rng.standard_normal((400, 50)).astype(np.float32) * 2   # many steps: stable means
    exact[:, 3] += 6.0
    ref = exact + rng.standard_normal(exact.shape).astype(np.float32) * 0.05
    close = exact + rng.standard_normal(exact.shape).astype(np.float32) * 0.05
    far = exact + rng.standard_normal(exact.shape).astype(np.float32) * 0.5
    assert np.allclose(oc.kl_per_step(exact, exact), 0, atol=1e-12)
    assert oc.compare_accuracy(ref, close, exact).ok
    result = oc.compare_accuracy(ref, far, exact)
    assert not result.ok and "from the float32 twin" in result.line


def test_compare_ops_flags_any_differing_bit_and_a_missing_output(tmp_path):
    y = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    kv = y.astype(np.float16)
    np.savez(tmp_path / "ref.npz", **{"GgufMatMul-Q4_0-m1/0": y, "Attention-decode/1": kv})
    flipped = y.copy()
    flipped.view(np.int32)[1, 2] ^= 1                                  # one ulp in one element
    np.savez(tmp_path / "ulp.npz", **{"GgufMatMul-Q4_0-m1/0": flipped, "Attention-decode/1": kv})
    np.savez(tmp_path / "short.npz", **{"GgufMatMul-Q4_0-m1/0": y})
    assert oc.compare_ops(tmp_path / "ref.npz", tmp_path / "ref.npz") == []
    bad = oc.compare_ops(tmp_path / "ref.npz", tmp_path / "ulp.npz")
    assert len(bad) == 1 and bad[0].startswith("GgufMatMul-Q4_0-m1/0: differs")
    missing = oc.compare_ops(tmp_path / "ref.npz", tmp_path / "short.npz")
    assert missing == ["Attention-decode/1: missing on one release"]
