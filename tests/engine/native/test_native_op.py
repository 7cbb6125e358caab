"""ai.amber.GgufMatMul through a real InferenceSession: exact against the kernels' C API, within
the int8-activation bound of numpy's x @ dequant(W).T (gguf-py's dequantizer), independent of the
thread count; bad nodes from untrusted files give one-line ONNX Runtime errors, never a crash."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import engine.native as native
from tests.support.native_hostile import CASES
from tests.support.native_op import (dequant, error_bound, gguf_matmul_model, kernel_matmul, random_rows,
                                     row_bytes)

REPO = Path(__file__).resolve().parents[3]
TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}


def _session(data: bytes, threads: int = 1) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    assert native.register(so)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _needs(lib, ggml_type: int) -> None:
    if lib.amber_row_bytes(ggml_type, 256) <= 0:
        pytest.skip(f"the kernels do not implement ggml type {ggml_type} yet")


# X shapes: one decode row, a 3-D batch, more rows than one 64-row tile (ragged), rank 1.
SHAPES = [(1, 1, None), (2, 3, None), (70, None, None), (None, None, None)]


@pytest.mark.parametrize("name", list(TYPES))
def test_op_equals_kernels_and_numpy(native_on, name):
    t = TYPES[name]
    _needs(native_on, t)
    rng = np.random.default_rng(t)
    k, n = 512, 200   # N not a multiple of any tile: the last tile is ragged
    rows = random_rows(t, n, k, rng)
    w = dequant(t, rows, k)
    for lead in SHAPES:
        shape = tuple(d for d in lead if d is not None) + (k,)
        x = rng.standard_normal(shape).astype(np.float32)
        sess = _session(gguf_matmul_model(rows, ggml_type=t, k=k, n=n, x_rank=len(shape)))
        y = sess.run(None, {"X": x})[0]
        assert y.shape == shape[:-1] + (n,) and y.dtype == np.float32
        np.testing.assert_array_equal(y, kernel_matmul(native_on, t, x, rows))
        ref = x @ w.T
        err = np.abs(y - ref)
        bound = error_bound(t, x, w)
        assert (err <= bound).all(), f"{name} {shape}: worst error/bound {(err / bound).max():.3f}"
        assert np.abs(ref).max() > 1.0   # the product is not trivially zero


@pytest.mark.parametrize("name", list(TYPES))
def test_threads_give_identical_bits(native_on, name):
    t = TYPES[name]
    _needs(native_on, t)
    rng = np.random.default_rng(100 + t)
    k, n = 1024, 1000
    rows = random_rows(t, n, k, rng)
    data = gguf_matmul_model(rows, ggml_type=t, k=k, n=n, x_rank=2)
    one, two = _session(data, 1), _session(data, 2)
    for m in (1, 5, 130):
        x = rng.standard_normal((m, k)).astype(np.float32)
        np.testing.assert_array_equal(one.run(None, {"X": x})[0], two.run(None, {"X": x})[0])


def test_w_of_any_shape_with_the_right_size(native_on):
    """W may be flat or [N, row_bytes]; only its byte count matters."""
    rng = np.random.default_rng(3)
    k, n = 256, 40
    rows = random_rows(8, n, k, rng)
    x = rng.standard_normal((4, k)).astype(np.float32)
    y2d = _session(gguf_matmul_model(rows, ggml_type=8, k=k, n=n, x_rank=2)).run(None, {"X": x})[0]
    flat = rows.reshape(-1)
    assert flat.size == n * row_bytes(8, k)
    y1d = _session(gguf_matmul_model(flat, ggml_type=8, k=k, n=n, x_rank=2)).run(None, {"X": x})[0]
    np.testing.assert_array_equal(y1d, y2d)


def test_empty_batch(native_on):
    rng = np.random.default_rng(4)
    rows = random_rows(8, 16, 64, rng)
    y = _session(gguf_matmul_model(rows, ggml_type=8, k=64, n=16, x_rank=3)).run(
        None, {"X": np.zeros((0, 5, 64), np.float32)})[0]
    assert y.shape == (0, 5, 16)


@pytest.fixture(scope="module")
def hostile_results(native_lib) -> dict[str, dict[str, str]]:
    """Every bad node, run in one child process (a crash is a signal there, not a dead pytest)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("AMBER_KERNELS", None)
    proc = subprocess.run([sys.executable, "-m", "tests.support.native_hostile"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"child exited {proc.returncode} (negative: a signal)\n{proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_node_is_a_one_line_ort_error(hostile_results, case):
    result = hostile_results[case]
    assert result["phase"] in ("create", "run"), f"{case}: no error at all"
    # onnxruntime's own exception classes (InvalidArgument, RuntimeException, InvalidGraph, Fail)
    assert result["error"] in {"InvalidArgument", "RuntimeException", "InvalidGraph", "Fail"}, result
    assert CASES[case][0] in result["message"], result["message"]
    assert "\n" not in result["message"].strip()


def test_bad_initializer_fails_when_the_session_is_made(hostile_results):
    """W is an initializer: its size is checked at session creation, not mid-generation."""
    for case in ("w_too_short", "w_too_long", "n_huge_small_w", "k_not_block_multiple", "type_f16"):
        assert hostile_results[case]["phase"] == "create", case
    assert hostile_results["w_input_too_short"]["phase"] == "run"


def test_concurrent_runs_of_one_session(native_on):
    """Several chats share a model: runs from several threads at once give each its own result."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(9)
    k, n = 512, 300
    rows = random_rows(8, n, k, rng)
    sess = _session(gguf_matmul_model(rows, ggml_type=8, k=k, n=n, x_rank=2), 2)
    xs = [rng.standard_normal((m, k)).astype(np.float32) for m in (1, 3, 70, 1, 9, 64)]
    expected = [sess.run(None, {"X": x})[0] for x in xs]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            got = list(pool.map(lambda x: sess.run(None, {"X": x})[0], xs))
            for e, g in zip(expected, got, strict=True):
                np.testing.assert_array_equal(g, e)
