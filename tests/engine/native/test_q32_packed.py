"""The q32 family's packed prefill paths (m >= 16: engine/native/src/x86/q32_pack512.c on AVX-512 VNNI,
q32_pack256.c on AVX-VNNI and AVX2; each ISA this CPU has is forced in turn)
at shapes the op's tiles and a long prompt give it: many rows, K over several packed segments
with a lone last block, N not a multiple of 16, and row/column splits at multiples of 16.

Oracle: gguf-py's dequantizer dotted in float64 with the kernel's own quantized activations
(tests/engine/native/q32_lib.py).
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf.quants import GGMLQuantizationType, dequantize

from tests.engine.native.q32_lib import Q32_TYPES, Lib, build, dequant_act, random_blocks


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Lib:
    path = build(tmp_path_factory.mktemp("native"))
    if path is None:
        pytest.skip("no C compiler")
    lib = Lib(path)
    yield lib
    lib.set_isa(lib.best)


@pytest.fixture(scope="module")
def simd(lib) -> list[str]:
    """The SIMD ISAs this CPU has: each one's packed path (AVX-512 VNNI, AVX-VNNI, AVX2)."""
    return [i for i in lib.available_isas() if i != "scalar"] or pytest.skip("no SIMD path here")


def _case(lib: Lib, qtype: int, m: int, k: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    w = random_blocks(qtype, n, k, rng)
    wf = dequantize(w, GGMLQuantizationType(qtype)).astype(np.float64).reshape(n, k)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 3.0, size=(m, 1))).astype(np.float32)
    act = lib.quantize(qtype, x)
    a = dequant_act(qtype, act, k)
    return w, act, a @ wf.T, np.abs(a) @ np.abs(wf).T


@pytest.mark.parametrize("name", list(Q32_TYPES))
@pytest.mark.parametrize("m,k,n", [(16, 32, 16), (16, 32, 15), (31, 64, 33), (100, 32 * 101, 53),
                                   (600, 32 * 37, 40)])
def test_many_rows_match_the_oracle(lib, simd, name, m, k, n):
    """16..600 activation rows; K of one block, of a lone last block after pairs, of four packed
    segments (101 blocks); N with 0-3 whole groups of 16 (0-6 of 8) and a tiled rest."""
    qtype = Q32_TYPES[name]
    w, act, ref, scale = _case(lib, qtype, m, k, n, seed=m + n + qtype)
    assert np.abs(ref).max() > 0.1   # not trivially zero
    for isa in simd:
        lib.set_isa(isa)
        y = lib.matmul(qtype, act, w, k, n)
        assert np.isfinite(y).all(), isa
        assert (np.abs(y - ref) <= 1e-5 * scale + 1e-30).all(), isa
    lib.set_isa(lib.best)


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_every_packed_path_gives_the_same_bits(lib, simd, name):
    """The 256-bit packed paths (8 weight rows a pack; AVX2 by maddubs with Q8_0's sign trick,
    AVX-VNNI by vpdpbusd) do the AVX-512 one's exact int32 block dots and its float operations in
    its order: on the rows and columns every path packs (multiples of 16), the same bits."""
    qtype = Q32_TYPES[name]
    m, k, n = 48, 32 * 43, 48
    w, act, ref, scale = _case(lib, qtype, m, k, n, seed=11 + qtype)
    got = {}
    for isa in simd:
        lib.set_isa(isa)
        got[isa] = lib.matmul(qtype, act, w, k, n)
    lib.set_isa(lib.best)
    first = next(iter(got.values()))
    assert (np.abs(first - ref) <= 1e-5 * scale + 1e-30).all()
    for isa, y in got.items():
        np.testing.assert_array_equal(y, first, err_msg=isa)


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_splits_at_multiples_of_sixteen_give_the_bits_of_one_call(lib, simd, name):
    """Uneven row chunks and column ranges (all multiples of 16 from the call's start), K over
    several segments: every output has the bits it gets in one call over everything."""
    qtype = Q32_TYPES[name]
    m, k, n = 150, 32 * 75, 90
    w, act, _, _ = _case(lib, qtype, m, k, n, seed=7 + qtype)
    for isa in simd:
        lib.set_isa(isa)
        whole = lib.matmul(qtype, act, w, k, n)
        split = np.full((m, n), np.nan, np.float32)
        for r0, r1 in ((0, 48), (48, 64), (64, 144), (144, 150)):
            rows = np.ascontiguousarray(act[r0:r1])
            for c0, c1 in ((0, 32), (32, 80), (80, 90)):
                out = np.full((r1 - r0, n), np.nan, np.float32)
                assert lib.gemm(qtype, rows, w, k, c0, c1, out, n) == 0
                assert np.isnan(out[:, :c0]).all() and np.isnan(out[:, c1:]).all()   # only its columns
                split[r0:r1, c0:c1] = out[:, c0:c1]
        np.testing.assert_array_equal(split, whole, err_msg=isa)
    lib.set_isa(lib.best)


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_row_stride_wider_than_the_output(lib, simd, name):
    """ldy > N (the op writes into a wider Y): nothing outside [n0, n1) of each row is touched."""
    qtype = Q32_TYPES[name]
    m, k, n, ldy = 40, 32 * 9, 44, 61
    w, act, ref, scale = _case(lib, qtype, m, k, n, seed=3 + qtype)
    for isa in simd:
        lib.set_isa(isa)
        y = np.full((m, ldy), -7.0, np.float32)
        assert lib.gemm(qtype, act, w, k, 0, n, y, ldy) == 0
        assert (y[:, n:] == -7.0).all(), isa
        assert (np.abs(y[:, :n] - ref) <= 1e-5 * scale + 1e-30).all(), isa
    lib.set_isa(lib.best)


@pytest.mark.parametrize("name", list(Q32_TYPES))
def test_every_code_at_its_maximum_against_full_activations(lib, simd, name):
    """Every code at its largest magnitude (4-bit 15, 5-bit 31, Q8_0 -128) against rows of one value
    (every q = +127 or -127): the largest integer sums a block can make, where a path that adds
    products in int16 beyond what int16 holds would wrap."""
    qtype = Q32_TYPES[name]
    m, k, n = 40, 32 * 6, 16
    rng = np.random.default_rng(qtype)
    w = random_blocks(qtype, n, k, rng).reshape(n, k // 32, -1)
    first_code = {2: 2, 3: 4, 6: 2, 7: 4, 8: 2}[qtype]   # after d (and m)
    w[:, :, first_code:] = 0x80 if qtype == 8 else 0xFF
    w = w.reshape(n, -1)
    wf = dequantize(w, GGMLQuantizationType(qtype)).astype(np.float64).reshape(n, k)
    for sign in (1.0, -1.0):
        x = np.full((m, k), 0.75 * sign, np.float32)
        x[1::2] *= 3.0
        act = lib.quantize(qtype, x)
        a = dequant_act(qtype, act, k)
        ref, scale = a @ wf.T, np.abs(a) @ np.abs(wf).T
        for isa in simd:
            lib.set_isa(isa)
            y = lib.matmul(qtype, act, w, k, n)
            assert (np.abs(y - ref) <= 1e-5 * scale + 1e-30).all(), isa
    lib.set_isa(lib.best)
