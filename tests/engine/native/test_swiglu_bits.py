"""GgufMatMul's SwiGLU epilogue gives ONNX Runtime's bits: the fused op against the split graph it
replaces (GgufMatMul N = 2F -> Split -> Sigmoid, Mul -> Mul, which ORT's optimizer runs as QuickGelu
alpha = 1 then Mul), with Amber's session options, compared with np.array_equal; amber_silu_mul on
hand-picked values (every float32 in 16 <= |g| <= 18 below the clamp, the +-18 edges, huge |g|)
against the same ORT graph; each MLAS kernel it can follow against ORT's own Sigmoid op (the FMA3
logistic) or a float32 transcription of MLAS's generic kernel."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import engine.native as native
from engine.runtime.providers import session_options
from tests.support.native_op import IR_VERSION, gguf_matmul_model, random_rows

TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_1": 7, "Q8_0": 8, "Q4_K": 12, "Q6_K": 14}
MS = (1, 5, 9, 64, 300)   # decode, m <= 8 (2F columns then one pass), per-tile pairs, one tile, ragged


@pytest.fixture
def best_path(native_on) -> Iterator[str]:
    """The logistic kernel the library picked for this CPU; restored after the test."""
    best = native_on.amber_silu_path().decode()
    yield best
    assert native_on.amber_set_silu_path(best.encode()) == 0


def _ort(model: bytes, threads: int = 1) -> ort.InferenceSession:
    so = session_options(threads)
    assert native.register(so)
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _split_tail(f: int, src: str) -> tuple[list, list]:
    """Split + Sigmoid + Mul + Mul over `src` [.., 2F] (the converter's split form), and its initializer."""
    nodes = [helper.make_node("Split", [src, "sizes"], ["gate", "up"], axis=-1),
             helper.make_node("Sigmoid", ["gate"], ["sig"]),
             helper.make_node("Mul", ["gate", "sig"], ["silu"]),
             helper.make_node("Mul", ["silu", "up"], ["Y"])]
    return nodes, [numpy_helper.from_array(np.array([f, f], np.int64), "sizes")]


def _split_model(rows: np.ndarray, t: int, k: int, f: int) -> bytes:
    tail, inits = _split_tail(f, "gu")
    mm = helper.make_node("GgufMatMul", ["X", "W"], ["gu"], domain="ai.amber", ggml_type=t, K=k, N=2 * f)
    graph = helper.make_graph([mm, *tail], "split", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["m", k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(rows, "W"), *inits])
    model = helper.make_model(graph, ir_version=IR_VERSION,
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.amber", 1)])
    return bytes(model.SerializeToString())


def _tail_only(f: int) -> ort.InferenceSession:
    tail, inits = _split_tail(f, "gu")
    graph = helper.make_graph(tail, "tail", [helper.make_tensor_value_info("gu", TensorProto.FLOAT, ["m", 2 * f])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 17)])
    return ort.InferenceSession(model.SerializeToString(), session_options(1), providers=["CPUExecutionProvider"])


def _x(m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of N(0, 1) times per-row scales from 0.05 to 300: gates from ~0 to far past the +-18 clamp."""
    scale = np.geomspace(0.05, 300.0, m) if m > 1 else np.array([30.0])
    return (rng.standard_normal((m, k)) * scale[:, None]).astype(np.float32)


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


# F = 192: whole 64-row tiles (m > 8 runs per-tile gate|up pairs); F = 200: up rows start mid-tile
# (the op runs the plain tiling over 2F, then one silu pass)
@pytest.mark.parametrize("f", [192, 200])
@pytest.mark.parametrize("name", list(TYPES))
def test_fused_op_equals_the_split_graph_bit_for_bit(native_on, best_path, name, f):
    t = TYPES[name]
    if native_on.amber_row_bytes(t, 256) <= 0:
        pytest.skip(f"the kernels do not implement ggml type {t}")
    rng = np.random.default_rng(310 + t + f)
    k = 512
    rows = random_rows(t, 2 * f, k, rng)
    fused = _ort(gguf_matmul_model(rows, ggml_type=t, k=k, n=2 * f, x_rank=2, attrs={"epilogue": 1}))
    split = _ort(_split_model(rows, t, k, f))
    plain = _ort(gguf_matmul_model(rows, ggml_type=t, k=k, n=2 * f, x_rank=2))
    gates = []
    for m in MS:
        x = _x(m, k, rng)
        want = split.run(None, {"X": x})[0]
        got = fused.run(None, {"X": x})[0]
        assert want.shape == (m, f) and np.abs(want).max() > 0.1
        assert _bits_equal(got, want), (m, int(np.sum(got != want)))
        gates.append(plain.run(None, {"X": x})[0][:, :f].ravel())
    g = np.abs(np.concatenate(gates))
    # the values covered: the polynomial's inside, both clamp regions, large gates
    assert (g < 1).sum() > 100 and ((g > 18) & (g < 100)).sum() > 100 and (g > 1000).sum() > 10


def test_fused_op_threads_give_the_split_graphs_bits(native_on, best_path):
    rng = np.random.default_rng(77)
    t, k, f = 8, 256, 1024
    rows = random_rows(t, 2 * f, k, rng)
    split = _ort(_split_model(rows, t, k, f))
    fused = [_ort(gguf_matmul_model(rows, ggml_type=t, k=k, n=2 * f, x_rank=2, attrs={"epilogue": 1}), n)
             for n in (1, 2)]
    for m in (3, 70):
        x = _x(m, k, rng)
        want = split.run(None, {"X": x})[0]
        for s in fused:
            assert _bits_equal(s.run(None, {"X": x})[0], want), m


def _floats(lo: float, hi: float) -> np.ndarray:
    """Every float32 from lo to hi (0 < lo < hi)."""
    a, b = np.array([lo, hi], np.float32).view(np.uint32)
    return np.arange(a, b + 1, dtype=np.uint32).view(np.float32)


def _edge_values(rng: np.random.Generator) -> np.ndarray:
    """Every gate in 16 <= |g| <= 18 (where the kernels' final clamps differ), every float within
    2000 ulp above 18, huge ones, tiny ones, zeros, and a wide random spread."""
    near = np.concatenate([_floats(16.0, 18.0), _floats(18.0, float(np.float32(18.0) + np.float32(2000 * 2.0 ** -19)))])
    special = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-7, -1e-7, 3000.0, -3000.0, 3.0e38, -3.0e38], np.float32)
    spread = np.concatenate([rng.uniform(-40, 40, 200_000), rng.standard_normal(200_000) * 4,
                             rng.uniform(-1e5, 1e5, 20_000)]).astype(np.float32)
    return np.concatenate([near, -near, special, spread])


def _silu_mul(lib, g: np.ndarray, u: np.ndarray) -> np.ndarray:
    y = np.full(g.size, np.nan, np.float32)
    lib.amber_silu_mul(g.ctypes.data, u.ctypes.data, y.ctypes.data, g.size)
    return y


def test_silu_mul_equals_quickgelu_then_mul(native_on, best_path):
    rng = np.random.default_rng(18)
    g = _edge_values(rng)
    u = (rng.standard_normal(g.size) * 3).astype(np.float32)
    want = _tail_only(g.size).run(None, {"gu": np.concatenate([g, u])[None]})[0][0]
    got = _silu_mul(native_on, g, u)
    assert _bits_equal(got, want), int(np.sum(got.view(np.uint32) != want.view(np.uint32)))
    # any length: the 8- and 16-lane tails give a value the bits it gets inside a full vector
    for n in (1, 7, 8, 9, 15, 17, 31):
        assert _bits_equal(_silu_mul(native_on, g[-n:].copy(), u[-n:].copy()), want[-n:])


def _ort_logistic(g: np.ndarray) -> np.ndarray:
    """ORT's Sigmoid op: MlasComputeLogistic, the FMA3 kernel on any CPU with AVX2 and FMA."""
    graph = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["s"])], "sigmoid",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, ir_version=IR_VERSION, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), session_options(1), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": g})[0]


@pytest.mark.parametrize("path", ["fma3", "avx512f"])
def test_vector_paths_are_mlas_logistic_times_g_times_u(native_on, best_path, path):
    if best_path == "generic":
        pytest.skip("this CPU has no AVX2 + FMA: ORT's Sigmoid is the generic kernel")
    if native_on.amber_set_silu_path(path.encode()) != 0:
        pytest.skip(f"this CPU cannot run the {path} kernel")
    rng = np.random.default_rng(20)
    g = _edge_values(rng)
    u = (rng.standard_normal(g.size) * 3).astype(np.float32)
    s = _ort_logistic(g)
    if path == "avx512f":   # MlasSiluKernelAvx512F clamps the logistic to [0, 1]; the FMA3 one only below
        s = np.minimum(s, np.float32(1.0))
    assert (s > 1).any() == (path == "fma3")   # the values reach the clamp that tells the two apart
    with np.errstate(over="ignore"):
        want = (g * s) * u
    assert _bits_equal(_silu_mul(native_on, g, u), want)


def _mlas_generic(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """MlasLogisticKernel (onnxruntime/core/mlas/lib/logistic.cpp) in float32, one rounding an operation."""
    f = np.float32
    x = np.minimum(np.maximum(g, f(-18.0)), f(18.0))
    x2 = x * x
    p = x2 * f(4.37031012579801e-11) + f(1.15627324459942e-07)
    for c in (6.08574864600143e-05, 8.51377133304701e-03, 2.48287947061529e-01):
        p = p * x2 + f(c)
    p = p * x
    q = x2 * f(6.10247389755681e-13) + f(5.76102136993427e-09)
    for c in (6.29106785017040e-06, 1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01):
        q = q * x2 + f(c)
    s = np.clip(p / q + f(0.5), f(0.0), f(1.0))
    return (g * s) * u


def test_generic_path_is_mlas_generic_kernel(native_on, best_path):
    rng = np.random.default_rng(19)
    g = _edge_values(rng)
    u = (rng.standard_normal(g.size) * 3).astype(np.float32)
    assert native_on.amber_set_silu_path(b"generic") == 0
    assert native_on.amber_silu_path() == b"generic"
    with np.errstate(over="ignore"):   # g * s * u of a 3e38 gate is inf in both
        want = _mlas_generic(g, u)
    assert _bits_equal(_silu_mul(native_on, g, u), want)


def test_silu_path_names(native_on, best_path):
    assert best_path in ("avx512f", "fma3", "generic")
    assert native_on.amber_set_silu_path(b"no-such-path") != 0
    assert native_on.amber_silu_path().decode() == best_path
