"""The Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 kernels (engine/native/src/*/q32*.c) on every ISA this CPU has.

The library is compiled from the sources into a temporary folder and called through ctypes. The
oracle is gguf-py's numpy dequantizer of the same raw blocks, dotted in float64 with the
activations decoded from the kernel's own activation buffer (tests/engine/native/q32_lib.py).
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf.quants import GGMLQuantizationType, dequantize, quantize

from tests.engine.native.q32_lib import (
    Q32_TYPES,
    Lib,
    build,
    compile_q32_strict,
    decode_act,
    dequant_act,
    random_blocks,
)

KS = (32, 64, 4096 + 32)
NS = (1, 7, 33)
MS = (1, 2, 3, 5, 8, 13, 17)   # tiles: 8 rows (AVX-512), 4 (256-bit); m >= 16: AVX-512 packs W


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Lib:
    path = build(tmp_path_factory.mktemp("native"))
    if path is None:
        pytest.skip("no C compiler")
    lib = Lib(path)
    yield lib
    lib.set_isa(lib.best)


@pytest.fixture(scope="module")
def isas(lib) -> list[str]:
    got = lib.available_isas()
    assert got[0] == "scalar" and lib.best in got
    return got


def _weights(qtype: int, n: int, k: int, rng, kind: str) -> np.ndarray:
    if kind == "random":
        return random_blocks(qtype, n, k, rng)
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.05
    return np.ascontiguousarray(quantize(w, GGMLQuantizationType(qtype)))


def _check_case(lib: Lib, qtype: int, k: int, n: int, m: int, rng, kind: str) -> np.ndarray:
    w = _weights(qtype, n, k, rng, kind)
    assert w.shape == (n, lib.c.amber_row_bytes(qtype, k))
    wf = dequantize(w, GGMLQuantizationType(qtype)).astype(np.float64).reshape(n, k)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 3.0, size=(m, 1))).astype(np.float32)
    act = lib.quantize(qtype, x)
    y = lib.matmul(qtype, act, w, k, n)
    assert np.isfinite(y).all()

    # against the dequantized activations the kernel multiplies by: float rounding only
    a = dequant_act(qtype, act, k)
    ref = a @ wf.T
    scale = np.abs(a) @ np.abs(wf).T + 1e-30
    err = np.abs(y - ref) / scale
    assert err.max() < 1e-5, (lib.isa(), kind, k, n, m, err.max())

    # against the float activations: each code is within half a step of x / d
    _, d = decode_act(qtype, act, k)
    step = np.repeat(d.astype(np.float64), 32, axis=1) * 0.5
    assert (np.abs(x - a) <= step * (1 + 4e-5) + 1e-30).all()   # x * (1/d) rounds in float32
    bound = step @ np.abs(wf).T * (1 + 1e-4) + 1e-5 * scale
    assert (np.abs(y - x.astype(np.float64) @ wf.T) <= bound).all()
    return y


@pytest.mark.parametrize("name", list(Q32_TYPES))
@pytest.mark.parametrize("kind", ["random", "quantized"])
def test_matches_dequantized_oracle_on_every_isa(lib, isas, name, kind):
    qtype = Q32_TYPES[name]
    for isa in isas:
        assert lib.set_isa(isa) == 0 and lib.isa() == isa
        rng = np.random.default_rng([qtype, len(isa)])
        for k in KS:
            for n in NS:
                for m in MS:
                    _check_case(lib, qtype, k, n, m, rng, kind)


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_simd_paths_equal_scalar_to_float_rounding(lib, isas, name):
    qtype = Q32_TYPES[name]
    rng = np.random.default_rng(100 + qtype)
    k, n, m = 4096 + 32 * 3, 37, 9     # odd block count, every tile size and a remainder
    w = random_blocks(qtype, n, k, rng)
    x = rng.standard_normal((m, k)).astype(np.float32)
    act = lib.quantize(qtype, x)
    wf = dequantize(w, GGMLQuantizationType(qtype)).astype(np.float64).reshape(n, k)
    scale = np.abs(dequant_act(qtype, act, k)) @ np.abs(wf).T
    lib.set_isa("scalar")
    want = lib.matmul(qtype, act, w, k, n)
    for isa in isas[1:]:
        assert lib.set_isa(isa) == 0
        got = lib.matmul(qtype, act, w, k, n)
        assert (np.abs(got - want) <= 2e-6 * scale).all(), isa
        assert not np.array_equal(got, np.zeros_like(got))


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_only_the_asked_columns_are_written(lib, isas, name):
    qtype = Q32_TYPES[name]
    rng = np.random.default_rng(7)
    k, n, m, ldy = 96, 11, 6, 15
    w = random_blocks(qtype, n, k, rng)
    act = lib.quantize(qtype, rng.standard_normal((m, k)).astype(np.float32))
    for isa in isas:
        lib.set_isa(isa)
        full = lib.matmul(qtype, act, w, k, n)
        y = np.full((m, ldy), 12345.0, np.float32)
        assert lib.gemm(qtype, act, w, k, 3, 8, y, ldy) == 0
        np.testing.assert_array_equal(y[:, 3:8], full[:, 3:8])
        assert (y[:, :3] == 12345.0).all() and (y[:, 8:] == 12345.0).all()
        # m = 1: ldy is not used; m = 0 and an empty range write nothing
        y1 = np.full(n, 12345.0, np.float32)
        assert lib.gemm(qtype, act[:1], w, k, 2, 5, y1, 0) == 0
        np.testing.assert_array_equal(y1[2:5], full[0, 2:5])
        assert (np.delete(y1, [2, 3, 4]) == 12345.0).all()
        y0 = np.full((m, ldy), 12345.0, np.float32)
        assert lib.gemm(qtype, act, w, k, 0, n, y0, ldy, m=0) == 0
        assert lib.gemm(qtype, act, w, k, 4, 4, y0, ldy) == 0
        assert (y0 == 12345.0).all()


def test_bad_arguments_are_refused(lib):
    y = np.zeros(64, np.float32)
    act = np.zeros(4096, np.uint8)
    w = np.zeros(4096, np.uint8)
    for qtype in (-1, 0, 1, 4, 5, 9, 99):
        assert lib.c.amber_row_bytes(qtype, 64) == -1
        assert lib.c.amber_act_bytes(qtype, 64) == -1
        assert lib.gemm(qtype, act, w, 64, 0, 1, y, 1) == -1
    for qtype in Q32_TYPES.values():
        for k in (0, -32, 48, 33):
            assert lib.c.amber_row_bytes(qtype, k) == -1
            assert lib.c.amber_act_bytes(qtype, k) == -1
            assert lib.gemm(qtype, act, w, k, 0, 1, y, 1) == -1
        assert lib.gemm(qtype, act, w, 64, 2, 1, y, 1) == -1      # n1 < n0
        assert lib.gemm(qtype, act, w, 64, 0, 4, y, 3, m=2) == -1  # ldy < n1
    assert (y == 0).all()
    for qtype, bs in ((2, 18), (3, 20), (6, 22), (7, 24), (8, 34)):
        assert lib.c.amber_row_bytes(qtype, 64) == 2 * bs


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_zero_and_hostile_activations_give_no_nan(lib, isas, name):
    qtype = Q32_TYPES[name]
    rng = np.random.default_rng(3)
    k, n = 32 * 5, 9
    w = random_blocks(qtype, n, k, rng)
    wf = dequantize(w, GGMLQuantizationType(qtype)).astype(np.float64).reshape(n, k)
    x = rng.standard_normal((3, k)).astype(np.float32)
    x[0] = 0.0                  # a whole zero row
    x[1, 32:96] = 0.0           # zero blocks inside a row
    x[2, 5] = np.nan            # NaN is coded as 0 (no undefined conversion), other codes unchanged
    act = lib.quantize(qtype, x)
    q, d = decode_act(qtype, act, k)
    assert (q[0] == 0).all() and (d[0] == 0).all()
    assert q[2, 5] == 0 and np.isfinite(d).all()
    for isa in isas:
        lib.set_isa(isa)
        y = lib.matmul(qtype, act, w, k, n)
        assert np.isfinite(y).all()
        assert (y[0] == 0).all()
        ref = dequant_act(qtype, act, k) @ wf.T
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_a_row_does_not_depend_on_the_rows_beside_it(lib, isas, name):
    """Same bits for a row alone (decode) and inside any tile (prefill, batched decode)."""
    qtype = Q32_TYPES[name]
    rng = np.random.default_rng(11)
    k, n, m = 32 * 131, 5, 11   # 3 K segments, odd blocks; 11 rows: the prefill loop, 2 tiles
    w = random_blocks(qtype, n, k, rng)
    act = lib.quantize(qtype, rng.standard_normal((m, k)).astype(np.float32))
    for isa in isas:
        lib.set_isa(isa)
        together = lib.matmul(qtype, act, w, k, n)
        for i in range(m):
            np.testing.assert_array_equal(lib.matmul(qtype, act[i:i + 1], w, k, n)[0], together[i])
        # nor on the weight rows computed with it (AVX-512 takes two rows a step when far apart)
        for j in range(n):
            y = np.zeros((m, n), np.float32)
            assert lib.gemm(qtype, act, w, k, j, j + 1, y, n) == 0
            np.testing.assert_array_equal(y[:, j], together[:, j])


def test_sources_compile_warning_free_with_and_without_x86_paths(lib, tmp_path):
    """-Wall -Wextra -Werror -pedantic; -DQ32_HAVE_X86=0 is what an arm64 build compiles."""
    compile_q32_strict(tmp_path)
    compile_q32_strict(tmp_path, "-DQ32_HAVE_X86=0")


def test_activation_bytes_are_the_same_on_every_isa(lib, isas):
    """The SIMD quantizer writes exactly the scalar one's bytes, hostile values included."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((7, 32 * 37)) * rng.uniform(1e-3, 1e3, size=(7, 1))).astype(np.float32)
    x[1, 3], x[1, 40] = np.nan, np.inf
    x[2, :64], x[2, 70] = 0.0, -0.0
    x[3, 100], x[3, 101] = 3e38, -3e38
    x[4, 200:232] = 1e-40                                   # subnormal block
    x[5, :32] = np.arange(32, dtype=np.float32) - 15.5      # with amax 127, d = 1: x / d are
    x[5, 0] = 127.0                                         # halves, rounded to even
    for qtype in Q32_TYPES.values():
        lib.set_isa("scalar")
        want = lib.quantize(qtype, x)
        for isa in isas[1:]:
            lib.set_isa(isa)
            np.testing.assert_array_equal(lib.quantize(qtype, x), want, err_msg=isa)
    q, d = decode_act(8, want, x.shape[1])
    assert d[5, 0] == 1.0 and list(q[5, 1:6]) == [-14, -14, -12, -12, -10]   # -14.5 -13.5 ...


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_packed_prefill_matches_the_oracle_and_writes_only_its_columns(lib, isas, name):
    """m >= 16 on AVX-512: groups of 16 weight rows packed one output per lane, the rest tiled."""
    qtype = Q32_TYPES[name]
    rng = np.random.default_rng(21)
    k, n, m, ldy = 32 * 67, 40, 20, 43      # two K segments of the packed path (32 blocks), odd nb
    w = random_blocks(qtype, n, k, rng)
    wf = dequantize(w, GGMLQuantizationType(qtype)).astype(np.float64).reshape(n, k)
    act = lib.quantize(qtype, rng.standard_normal((m, k)).astype(np.float32))
    a = dequant_act(qtype, act, k)
    ref, scale = a @ wf.T, np.abs(a) @ np.abs(wf).T
    for isa in isas:
        lib.set_isa(isa)
        y = np.full((m, ldy), 12345.0, np.float32)
        assert lib.gemm(qtype, act, w, k, 3, 37, y, ldy) == 0   # 2 packed groups + 2 tiled rows
        assert (y[:, :3] == 12345.0).all() and (y[:, 37:] == 12345.0).all(), isa
        assert (np.abs(y[:, 3:37] - ref[:, 3:37]) <= 1e-5 * scale[:, 3:37]).all(), isa


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_tiles_of_sixteen_give_the_bits_of_one_call(lib, isas, name):
    """The op splits a prefill into 64 x 64 tiles: the same bits as one call over everything."""
    qtype = Q32_TYPES[name]
    rng = np.random.default_rng(31)
    k, n, m = 512, 200, 70
    w = random_blocks(qtype, n, k, rng)
    act = lib.quantize(qtype, rng.standard_normal((m, k)).astype(np.float32))
    for isa in isas:
        lib.set_isa(isa)
        whole = lib.matmul(qtype, act, w, k, n)
        tiled = np.zeros((m, n), np.float32)
        for r0 in range(0, m, 64):
            for c0 in range(0, n, 64):
                rows = np.ascontiguousarray(act[r0:r0 + 64])
                out = np.zeros((rows.shape[0], n), np.float32)
                assert lib.gemm(qtype, rows, w, k, c0, min(n, c0 + 64), out, n) == 0
                tiled[r0:r0 + 64, c0:c0 + 64] = out[:, c0:c0 + 64]
        np.testing.assert_array_equal(tiled, whole, err_msg=isa)


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_small_decode_batches_match_rows_alone(lib, isas, name):
    """m = 1..3 with enough weight rows for AVX-512's four-rows-a-step and paired paths (plus the
    leftover rows): every output has the bits of its row and column computed alone."""
    qtype = Q32_TYPES[name]
    rng = np.random.default_rng(23)
    k, n = 32 * 19, 71   # odd blocks (the lone block), 71 rows: 4 x 17 + 3 left over
    w = random_blocks(qtype, n, k, rng)
    for m in (1, 2, 3):
        act = lib.quantize(qtype, rng.standard_normal((m, k)).astype(np.float32))
        for isa in isas:
            lib.set_isa(isa)
            together = lib.matmul(qtype, act, w, k, n)
            for j in (0, 16, 17, 34, 68, 70):
                y = np.zeros((m, n), np.float32)
                assert lib.gemm(qtype, act, w, k, j, j + 1, y, n) == 0
                np.testing.assert_array_equal(y[:, j], together[:, j])
            for i in range(m):
                np.testing.assert_array_equal(lib.matmul(qtype, act[i:i + 1], w, k, n)[0], together[i])


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_every_decode_batch_size_matches_rows_alone(lib, isas, name):
    """m = 2..15 (the multi-row paths, below the packed prefill): every row has the bits of the
    row alone, for weight-row ranges that take the paired paths and odd leftovers, and in every
    column range (how the op's threads split N)."""
    qtype = Q32_TYPES[name]
    rng = np.random.default_rng(29)
    k, n = 32 * 67, 37   # 2 K segments, odd blocks (the lone block); 37 rows: pairs + a leftover
    w = random_blocks(qtype, n, k, rng)
    x = rng.standard_normal((15, k)).astype(np.float32)
    act_all = lib.quantize(qtype, x)
    for isa in isas:
        lib.set_isa(isa)
        alone = np.stack([lib.matmul(qtype, act_all[i:i + 1], w, k, n)[0] for i in range(15)])
        for m in range(2, 16):
            act = np.ascontiguousarray(act_all[:m])
            np.testing.assert_array_equal(lib.matmul(qtype, act, w, k, n), alone[:m], err_msg=f"{isa} m={m}")
            for c0, c1 in ((0, 18), (18, 37), (5, 6)):
                y = np.zeros((m, n), np.float32)
                assert lib.gemm(qtype, act, w, k, c0, c1, y, n) == 0
                np.testing.assert_array_equal(y[:, c0:c1], alone[:m, c0:c1], err_msg=f"{isa} m={m} cols {c0}:{c1}")


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_decode_row_groups_match_rows_alone_and_the_oracle(lib, isas, name):
    """m = 1 takes weight rows four at a time (a quarter of the range apart, one reduction for
    the four): every row has the bits of the row computed alone, for ranges around the group
    boundaries, at the default model's K = 576 (18 blocks), an odd block count (the lone block)
    and three K segments; and the result matches the float64 oracle."""
    qtype = Q32_TYPES[name]
    rng = np.random.default_rng(41)
    for k in (576, 608, 32 * 131):
        _check_case(lib, qtype, k, 64, 1, rng, "quantized")
        n = 23
        w = random_blocks(qtype, n, k, rng)
        act = lib.quantize(qtype, rng.standard_normal((1, k)).astype(np.float32) * 2.0)
        for isa in isas:
            lib.set_isa(isa)
            alone = np.zeros((1, n), np.float32)
            for j in range(n):
                assert lib.gemm(qtype, act, w, k, j, j + 1, alone, n) == 0
            for c0, c1 in ((0, n), (0, 4), (1, 8), (3, 16), (2, 23), (0, 7)):
                y = np.full((1, n), -7.0, np.float32)
                assert lib.gemm(qtype, act, w, k, c0, c1, y, n) == 0
                np.testing.assert_array_equal(y[0, c0:c1], alone[0, c0:c1], err_msg=f"{isa} k={k} {c0}:{c1}")
                assert (y[0, :c0] == -7.0).all() and (y[0, c1:] == -7.0).all()
        lib.set_isa(lib.best)
