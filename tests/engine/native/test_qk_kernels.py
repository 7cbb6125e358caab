"""The K-quant kernels (engine/native/src/*/qk*.c) through the library's C API, on every ISA this CPU has.

The oracle is gguf-py's own numpy dequantizer (gguf.quants.dequantize) of the raw super-blocks,
dotted in float64 with the activations as the library quantized them (its Q8_K buffer decoded
here): the kernels' integer arithmetic must match it to float rounding. Blocks are random bytes
(with finite fp16 scales) and, where llama.cpp's Python binding is installed (this venv or the
bench's side venv, `python -m bench deps`), real blocks that its own quantizer writes into a
temporary folder from a random-weight model (without it that case skips, the rest stand alone).
"""
from __future__ import annotations

import platform
import subprocess

import numpy as np
import pytest

gguf_quants = pytest.importorskip("gguf.quants")
from gguf.constants import GGMLQuantizationType  # noqa: E402

Q4_K, Q5_K, Q6_K = 12, 13, 14
BLOCK_BYTES = {Q4_K: 144, Q5_K: 176, Q6_K: 210}
ACT_BLOCK = 292   # float d, int8 q[256], int16 bsums[16]
# the paths of this machine's architecture (each one this CPU lacks skips)
ISAS = (("scalar", "neon", "dotprod", "i8mm") if platform.machine().lower() in ("arm64", "aarch64")
        else ("scalar", "avx2", "avxvnni", "avx512vnni"))
# llama.cpp's file types whose GGUFs hold real blocks of each K-quant: Q4_K + Q6_K in a Q4_K_M
# file, Q5_K in a Q5_K_M one (llama_ftype LLAMA_FTYPE_MOSTLY_Q4_K_M, LLAMA_FTYPE_MOSTLY_Q5_K_M).
LLAMA_FTYPES = {"Q4_K_M": 15, "Q5_K_M": 17}
REAL_BLOCKS = 40 * 17   # N = 40 rows of K = 4352
# llama.cpp's quantizer, as `llama-quantize SRC DST` runs it: argv = src, dst, ftype.
QUANTIZE = ("import sys, llama_cpp\n"
            "p = llama_cpp.llama_model_quantize_default_params()\n"
            "p.ftype = int(sys.argv[3])\n"
            "sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))\n")


@pytest.fixture(scope="session")
def lib(tmp_path_factory):
    from engine.native import build_and_open

    so = build_and_open(tmp_path_factory.mktemp("qk-native"))
    if so is None:
        pytest.skip("no C compiler")
    best = so.amber_isa()
    yield so
    so.amber_set_isa(best)


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def _use_isa(lib, isa: str) -> None:
    if lib.amber_set_isa(isa.encode()) != 0:
        pytest.skip(f"this CPU lacks {isa}")


def quantize(lib, typ: int, x: np.ndarray) -> np.ndarray:
    """The library's activation buffer for float32 rows x (m, K)."""
    m, k = x.shape
    ab = lib.amber_act_bytes(typ, k)
    out = np.zeros(max(m, 1) * ab, np.uint8)
    x = np.ascontiguousarray(x, np.float32)
    for i in range(m):
        assert lib.amber_quantize_act(typ, _ptr(x[i]), k, _ptr(out[i * ab:])) == 0
    return out[:m * ab]


def decode_act(buf: np.ndarray, m: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(float64 values (m, K), d (m, K/256), q (m, K) int8, bsums (m, K/256, 16) int16)."""
    blocks = buf.reshape(m, k // 256, ACT_BLOCK)
    d = blocks[..., :4].copy().view(np.float32)[..., 0]
    q = blocks[..., 4:260].copy().view(np.int8)
    bs = blocks[..., 260:292].copy().view(np.int16)
    vals = (d[..., None].astype(np.float64) * q.astype(np.float64)).reshape(m, k)
    return vals, d, q.reshape(m, k), bs


def gemm(lib, typ: int, act: np.ndarray, m: int, w: np.ndarray, k: int, n0: int, n1: int,
         y: np.ndarray, ldy: int) -> int:
    return lib.amber_gemm_rows(typ, _ptr(act) if act.size else _ptr(np.zeros(1, np.uint8)), m,
                               _ptr(w), k, n0, n1, _ptr(y), ldy)


def random_blocks(typ: int, nblocks: int, rng: np.random.Generator) -> np.ndarray:
    """Random super-blocks whose fp16 d (and dmin) are finite and small."""
    raw = rng.integers(0, 256, (nblocks, BLOCK_BYTES[typ]), dtype=np.uint8)

    def halves(n: int) -> np.ndarray:
        v = rng.uniform(1e-3, 2e-2, n) * rng.choice([-1.0, 1.0], n)
        return v.astype(np.float16).view(np.uint8).reshape(n, 2)

    if typ == Q6_K:
        raw[:, 208:210] = halves(nblocks)
    else:
        raw[:, 0:2] = halves(nblocks)
        raw[:, 2:4] = halves(nblocks)
    return raw


def dequant(typ: int, raw: np.ndarray, n: int, k: int) -> np.ndarray:
    w = gguf_quants.dequantize(raw.reshape(n, -1), GGMLQuantizationType(typ))
    assert w.shape == (n, k)
    return w.astype(np.float64)


@pytest.fixture(scope="session")
def real_blocks(tmp_path_factory):
    """{type: raw super-blocks} from GGUFs that llama.cpp's quantizer writes here from a random-weight
    qwen2 model of the bench's `tiny` shape; empty where llama.cpp's binding is not installed."""
    from gguf import GGUFReader

    from bench.suites.convert import SHAPES, write_gguf
    from bench.harness.common import python_with

    python = python_with("llama_cpp")
    if python is None:
        return {}
    root = tmp_path_factory.mktemp("llama-cpp-quantized")
    f16 = root / "tiny-F16.gguf"
    write_gguf(f16, SHAPES["tiny"], "F16")
    out: dict[int, np.ndarray] = {}
    for name, ftype in LLAMA_FTYPES.items():
        path = root / f"tiny-{name}.gguf"
        done = subprocess.run([python, "-c", QUANTIZE, str(f16), str(path), str(ftype)],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        for t in GGUFReader(str(path)).tensors:
            typ = int(t.tensor_type)
            if typ in BLOCK_BYTES and typ not in out and t.data.nbytes >= REAL_BLOCKS * BLOCK_BYTES[typ]:
                out[typ] = np.array(t.data).view(np.uint8).reshape(-1, BLOCK_BYTES[typ])[:REAL_BLOCKS].copy()
    return out


def check_case(lib, typ: int, raw: np.ndarray, x: np.ndarray, n: int, k: int) -> np.ndarray:
    """Runs one gemm, asserts it against the oracle and the float activations; returns y."""
    m = x.shape[0]
    act = quantize(lib, typ, x)
    a64, d, _, _ = decode_act(act, m, k)
    w64 = dequant(typ, raw, n, k)
    y = np.full((m, n), np.nan, np.float32)
    assert gemm(lib, typ, act, m, raw, k, 0, n, y, n) == 0
    mag = np.abs(a64) @ np.abs(w64).T   # the scale of the sums: bounds float rounding
    ref = a64 @ w64.T
    assert np.all(np.isfinite(y))
    assert np.all(np.abs(y - ref) <= 1e-5 * mag + 1e-30), float(np.max(np.abs(y - ref) / (mag + 1e-30)))
    # against the float activations: off by at most the rounding of each activation (d/2)
    half_step = np.repeat(d.astype(np.float64) / 2, 256, axis=1)
    bound = half_step @ np.abs(w64).T * (1 + 1e-4) + 2e-5 * mag + 1e-30
    assert np.all(np.abs(y - x.astype(np.float64) @ w64.T) <= bound)
    return y


def _scalar_outputs(lib, typ: int, act: np.ndarray, raw: np.ndarray, n: int, k: int, isa: str) -> np.ndarray:
    """The scalar path's outputs for the quantized rows `act` (then back to `isa`)."""
    m = act.size // lib.amber_act_bytes(typ, k)
    ys = np.full((m, n), np.nan, np.float32)
    assert lib.amber_set_isa(b"scalar") == 0
    assert gemm(lib, typ, act, m, raw, k, 0, n, ys, n) == 0
    _use_isa(lib, isa)
    return ys


@pytest.mark.parametrize("k", [256, 512, 4096 + 256])
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("typ", [Q4_K, Q5_K, Q6_K], ids=["Q4_K", "Q5_K", "Q6_K"])
def test_random_blocks_match_the_oracle(lib, typ, isa, k):
    _use_isa(lib, isa)
    rng = np.random.default_rng(typ * 1000 + k)
    for n in (1, 7, 33):
        raw = random_blocks(typ, n * k // 256, rng)
        for m in (1, 2, 3, 5, 8, 17, 40):   # 17 (not Q6_K), 40: the packed prefill paths (N >= 8 or 16)
            x = rng.standard_normal((m, k)).astype(np.float32) * rng.uniform(0.1, 10, (m, 1)).astype(np.float32)
            y = check_case(lib, typ, raw, x, n, k)
            if isa != "scalar":   # every path ends each super-block with the same float ops: same bits
                np.testing.assert_array_equal(y, _scalar_outputs(lib, typ, quantize(lib, typ, x), raw, n, k, isa))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("typ", [Q4_K, Q5_K, Q6_K], ids=["Q4_K", "Q5_K", "Q6_K"])
def test_real_llama_cpp_blocks_match_the_oracle(lib, real_blocks, typ, isa):
    if typ not in real_blocks:
        pytest.skip(f"no llama.cpp-quantized blocks of type {typ} (llama.cpp's Python binding not installed)")
    _use_isa(lib, isa)
    rng = np.random.default_rng(typ)
    k, n = 4096 + 256, 40
    raw = real_blocks[typ][:n * k // 256]
    for m in (1, 5):
        check_case(lib, typ, raw, rng.standard_normal((m, k)).astype(np.float32), n, k)


@pytest.mark.parametrize("isa", ISAS[1:])
@pytest.mark.parametrize("typ", [Q4_K, Q5_K, Q6_K], ids=["Q4_K", "Q5_K", "Q6_K"])
def test_packed_tiles_in_pairs_and_alone_give_the_scalar_bits(lib, typ, isa):
    """N = 88: the AVX-512 packed path takes 16-row tiles two at a time (tiles 0-1, 2-3), then
    tile 4 alone, then the 8-row remainder in the row layout; K = 1280 (5 super-blocks) leaves a
    short last pack group; m = 16 and 45 cover whole and partial row blocks. Every output has the
    scalar path's bits, and a sub-range call [n0, n1) (other tiles) the same."""
    _use_isa(lib, isa)
    rng = np.random.default_rng(typ + 88)
    n, k = 88, 1280
    raw = random_blocks(typ, n * k // 256, rng)
    for m in (16, 45):
        x = rng.standard_normal((m, k)).astype(np.float32) * rng.uniform(0.1, 10, (m, 1)).astype(np.float32)
        y = check_case(lib, typ, raw, x, n, k)
        act = quantize(lib, typ, x)
        ys = _scalar_outputs(lib, typ, act, raw, n, k, isa)
        np.testing.assert_array_equal(y, ys)
        part = np.full((m, n), np.nan, np.float32)
        assert gemm(lib, typ, act, m, raw, k, 16, 80, part, n) == 0
        np.testing.assert_array_equal(part[:, 16:80], ys[:, 16:80])


@pytest.mark.parametrize("typ", [Q4_K, Q5_K, Q6_K], ids=["Q4_K", "Q5_K", "Q6_K"])
def test_quantized_activations_are_q8_k(lib, typ):
    rng = np.random.default_rng(5)
    k = 512
    x = rng.standard_normal((3, k)).astype(np.float32)
    x[1, :256] = 0.0   # an all-zero block: d 0, q 0
    act = quantize(lib, typ, x)
    assert act.size == 3 * lib.amber_act_bytes(typ, k) == 3 * 2 * ACT_BLOCK
    vals, d, q, bs = decode_act(act, 3, k)
    assert np.all(np.abs(q.astype(np.int32)) <= 127)
    amax = np.abs(x.reshape(3, 2, 256)).max(axis=2)
    np.testing.assert_allclose(d, amax / 127, rtol=1e-6)
    assert d[1, 0] == 0 and not q[1, :256].any()
    np.testing.assert_array_equal(bs, q.reshape(3, 2, 16, 16).astype(np.int32).sum(axis=3))
    assert np.all(np.abs(vals - x) <= np.repeat(d, 256, axis=1) / 2 * (1 + 1e-5) + 1e-12)


def test_nonfinite_activations_quantize_without_faults(lib):
    x = np.zeros(256, np.float32)
    x[:4] = [np.nan, np.inf, -np.inf, 1.0]
    act = quantize(lib, Q4_K, x[None])
    _, _, q, _ = decode_act(act, 1, 256)
    assert np.all(np.abs(q.astype(np.int32)) <= 127)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("typ", [Q4_K, Q5_K, Q6_K], ids=["Q4_K", "Q5_K", "Q6_K"])
@pytest.mark.parametrize("m", [5, 20, 33])
def test_only_rows_n0_to_n1_are_written(lib, typ, isa, m):
    _use_isa(lib, isa)
    rng = np.random.default_rng(11)
    n, k, ldy, n0, n1 = 33, 512, 41, 3, 20
    raw = random_blocks(typ, n * k // 256, rng)
    x = rng.standard_normal((m, k)).astype(np.float32)
    act = quantize(lib, typ, x)
    sentinel = np.float32(-7777.0)
    y = np.full(m * ldy, sentinel, np.float32)
    assert gemm(lib, typ, act, m, raw, k, n0, n1, y, ldy) == 0
    full = np.full((m, n), np.nan, np.float32)
    assert gemm(lib, typ, act, m, raw, k, 0, n, full, n) == 0
    y2 = y.reshape(m, ldy)
    # the same bits as the full call (there a row may fall in a packed tile, here in the remainder)
    np.testing.assert_array_equal(y2[:, n0:n1], full[:, n0:n1])
    assert np.all(y2[:, :n0] == sentinel) and np.all(y2[:, n1:] == sentinel)
    # m = 1 with any ldy writes row 0 only
    y1 = np.full(ldy, sentinel, np.float32)
    assert gemm(lib, typ, act, 1, raw, k, n0, n1, y1, 0) == 0
    np.testing.assert_array_equal(y1[n0:n1], full[0, n0:n1])
    assert np.all(y1[:n0] == sentinel) and np.all(y1[n1:] == sentinel)


@pytest.mark.parametrize("typ", [Q4_K, Q5_K, Q6_K], ids=["Q4_K", "Q5_K", "Q6_K"])
def test_contract_m0_bad_type_bad_k(lib, typ):
    rng = np.random.default_rng(3)
    k, n = 256, 4
    assert lib.amber_row_bytes(typ, k) == BLOCK_BYTES[typ]
    assert lib.amber_row_bytes(typ, 4352) == 17 * BLOCK_BYTES[typ]
    assert lib.amber_act_bytes(typ, 4352) == 17 * ACT_BLOCK
    raw = random_blocks(typ, n, rng)
    x = rng.standard_normal((1, k)).astype(np.float32)
    act = quantize(lib, typ, x)
    y = np.full(n, 5.0, np.float32)
    assert gemm(lib, typ, act, 0, raw, k, 0, n, y, n) == 0
    assert np.all(y == 5.0)   # m = 0: nothing written
    for bad_k in (0, 128, 300, 255, -256):
        assert lib.amber_row_bytes(typ, bad_k) == -1
        assert lib.amber_act_bytes(typ, bad_k) == -1
        assert lib.amber_quantize_act(typ, _ptr(x[0]), bad_k, _ptr(act)) == -1
        assert gemm(lib, typ, act, 1, raw, bad_k, 0, n, y, n) == -1
    for bad_type in (-1, 0, 1, 9, 10, 11, 15, 16, 99):
        assert lib.amber_row_bytes(bad_type, k) == -1
        assert lib.amber_act_bytes(bad_type, k) == -1
        assert gemm(lib, bad_type, act, 1, raw, k, 0, n, y, n) == -1
    assert np.all(y == 5.0)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("typ", [Q4_K, Q5_K, Q6_K], ids=["Q4_K", "Q5_K", "Q6_K"])
def test_zero_activations_give_zero(lib, typ, isa):
    _use_isa(lib, isa)
    rng = np.random.default_rng(9)
    k, n, m = 512, 9, 6
    raw = random_blocks(typ, n * k // 256, rng)
    act = quantize(lib, typ, np.zeros((m, k), np.float32))
    y = np.full((m, n), np.nan, np.float32)
    assert gemm(lib, typ, act, m, raw, k, 0, n, y, n) == 0
    assert np.all(y == 0.0)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("typ", [Q4_K, Q5_K, Q6_K], ids=["Q4_K", "Q5_K", "Q6_K"])
def test_decode_rows_stream_across_rows_with_the_same_bits(lib, typ, isa):
    """m = 1 reads the rows' super-blocks as one stream, 8 a reduction, so a reduction spans rows
    when K is not 8 super-blocks (K = 1536 is 6: Qwen2.5-1.5B's width): every row, and every
    sub-range [n0, n1) starting mid-stream, gives the oracle's value and the scalar path's bits.
    The AVX-512 path runs whole batches of 8 blocks unrolled and the stream's last (total mod 8)
    blocks one by one: K of 1, 2, 8 and 16 blocks and the sub-ranges below cover both, batches that
    span several rows, and a stream that is only a tail."""
    _use_isa(lib, isa)
    rng = np.random.default_rng(typ + 77)
    for nb in (1, 2, 3, 6, 7, 8, 9, 16):
        k, n = nb * 256, 29
        raw = random_blocks(typ, n * nb, rng)
        x = rng.standard_normal((1, k)).astype(np.float32)
        y = check_case(lib, typ, raw, x, n, k)
        act = quantize(lib, typ, x)
        assert lib.amber_set_isa(b"scalar") == 0
        ys = np.full((1, n), np.nan, np.float32)
        assert gemm(lib, typ, act, 1, raw, k, 0, n, ys, n) == 0
        _use_isa(lib, isa)
        np.testing.assert_array_equal(y, ys)
        for n0, n1 in ((1, 2), (5, 6), (3, 28), (0, 29), (11, 20)):
            part = np.full(n, np.float32(-5.0), np.float32)
            assert gemm(lib, typ, act, 1, raw, k, n0, n1, part, n) == 0
            np.testing.assert_array_equal(part[n0:n1], ys[0, n0:n1])
            assert np.all(part[:n0] == -5.0) and np.all(part[n1:] == -5.0)


# bytes of each type's quantized levels (set to all ones: every level at its maximum)
LEVEL_BYTES = {Q4_K: slice(16, 144), Q5_K: slice(16, 176), Q6_K: slice(0, 192)}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("typ", [Q4_K, Q5_K, Q6_K], ids=["Q4_K", "Q5_K", "Q6_K"])
def test_every_level_at_its_maximum_against_full_activations(lib, typ, isa):
    """Every level at its maximum (15, 31, 63) against rows of one value (every q = +127 or -127):
    the largest integer sums a sub-block can make, where a path that adds products in int16 beyond
    what int16 holds would wrap. Decode rows and the packed prefill path (m = 40, N = 16)."""
    _use_isa(lib, isa)
    rng = np.random.default_rng(typ)
    n, k = 16, 512
    raw = random_blocks(typ, n * k // 256, rng)
    raw[:, LEVEL_BYTES[typ]] = 0xFF
    for sign in (1.0, -1.0):
        for m in (1, 4, 40):
            x = np.full((m, k), 0.75 * sign, np.float32)
            x[1::2] *= 3.0   # rows of other scales: still one q each
            check_case(lib, typ, raw, x, n, k)
