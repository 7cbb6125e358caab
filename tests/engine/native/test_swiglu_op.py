"""GgufMatMul's SwiGLU epilogue (epilogue=1) through a real InferenceSession: W holds gate rows then
up rows, Y = silu(X Wg) * (X Wu). The reference is the same op without the epilogue (the int8
activation product, exact against the kernels' C API), then silu * up in float64, within MLAS's
logistic error (the epilogue follows ORT's own kernel bit for bit: test_swiglu_bits.py); thread
counts give identical bits; bad epilogue attributes fail when the session is made."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import engine.native as native
from tests.support.native_op import gguf_matmul_model, random_rows

REPO = Path(__file__).resolve().parents[3]
TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}


def _session(data: bytes, threads: int = 1) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    assert native.register(so)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _swiglu64(y: np.ndarray) -> np.ndarray:
    """silu(gate) * up in float64 from the op's plain [.., 2F] output."""
    f = y.shape[-1] // 2
    g, u = y[..., :f].astype(np.float64), y[..., f:].astype(np.float64)
    with np.errstate(over="ignore"):   # exp(-g) of a large negative gate is inf: silu is 0 there
        return g / (1.0 + np.exp(-g)) * u


def _assert_swiglu(y: np.ndarray, plain: np.ndarray) -> None:
    """y within MLAS's logistic error of float64 silu(gate) * up from the plain [.., 2F] output: the
    rational approximation is within 2e-7 absolute of the logistic (measured 1.96e-7 on [-40, 40]),
    so |error| <= 2.5e-7 |g u| plus float32 rounding of the products."""
    f = plain.shape[-1] // 2
    ref = _swiglu64(plain)
    gu = np.abs(plain[..., :f].astype(np.float64) * plain[..., f:])
    assert np.abs(ref).max() > 0.1   # not trivially zero
    assert (np.abs(y - ref) <= 2.5e-7 * gu + 1e-6 * np.abs(ref) + 1e-30).all()


def _models(t: int, k: int, f: int, rng: np.random.Generator, x_rank: int = 2) -> tuple[bytes, bytes]:
    rows = random_rows(t, 2 * f, k, rng)
    plain = gguf_matmul_model(rows, ggml_type=t, k=k, n=2 * f, x_rank=x_rank)
    fused = gguf_matmul_model(rows, ggml_type=t, k=k, n=2 * f, x_rank=x_rank, attrs={"epilogue": 1})
    return plain, fused


@pytest.mark.parametrize("name", list(TYPES))
def test_epilogue_equals_plain_op_then_swiglu(native_on, name):
    t = TYPES[name]
    if native_on.amber_row_bytes(t, 256) <= 0:
        pytest.skip(f"the kernels do not implement ggml type {t}")
    rng = np.random.default_rng(180 + t)
    k, f = 512, 200   # F not a multiple of any tile: the last tile is ragged; up rows start mid-tile
    plain, fused = _models(t, k, f, rng)
    ps, fs = _session(plain), _session(fused)
    # decode and m <= 8 (all 2F columns, then one silu pass), m = 9..15 (per-tile gate|up pairs),
    # one 64-row tile, packed and ragged
    for m in (1, 4, 8, 9, 64, 300):
        x = rng.standard_normal((m, k)).astype(np.float32)
        y = fs.run(None, {"X": x})[0]
        assert y.shape == (m, f) and y.dtype == np.float32
        _assert_swiglu(y, ps.run(None, {"X": x})[0])


def test_epilogue_keeps_leading_dims(native_on):
    rng = np.random.default_rng(5)
    k, f = 256, 64
    plain, fused = _models(8, k, f, rng, x_rank=3)
    x = rng.standard_normal((2, 3, k)).astype(np.float32)
    y = _session(fused).run(None, {"X": x})[0]
    assert y.shape == (2, 3, f)
    _assert_swiglu(y, _session(plain).run(None, {"X": x})[0])


@pytest.mark.parametrize("name", ["Q4_0", "Q4_K", "Q6_K"])
def test_epilogue_threads_give_identical_bits(native_on, name):
    t = TYPES[name]
    if native_on.amber_row_bytes(t, 256) <= 0:
        pytest.skip(f"the kernels do not implement ggml type {t}")
    rng = np.random.default_rng(200 + t)
    _, fused = _models(t, 1024, 500, rng)
    one, two = _session(fused, 1), _session(fused, 2)
    for m in (1, 5, 130):
        x = rng.standard_normal((m, 1024)).astype(np.float32)
        np.testing.assert_array_equal(one.run(None, {"X": x})[0], two.run(None, {"X": x})[0])


def test_bad_epilogue_fails_when_the_session_is_made(native_lib):
    """Hostile epilogue values and an odd N, in a child process (a crash is a signal there)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("AMBER_KERNELS", None)
    names = ["epilogue_unknown", "epilogue_negative", "epilogue_huge", "epilogue_odd_n"]
    proc = subprocess.run([sys.executable, "-m", "tests.support.native_hostile", *names], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    import json
    out = json.loads(proc.stdout)
    from tests.support.native_hostile import CASES
    for name in names:
        r = out[name]
        assert r["phase"] == "create", (name, r)
        assert CASES[name][0] in r["message"] and "\n" not in r["message"].strip(), (name, r)
