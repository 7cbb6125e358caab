"""The native kernels built for arm64 Linux (aarch64-linux-gnu-gcc), run under qemu-aarch64 on three
CPU models: cortex-a53 (plain NEON), cortex-a76 (NEON + dotprod) and max (dotprod + i8mm), each
ISA path the model has forced in turn (tests/native_harness).

The expectations come from this machine: the x86 library's scalar path (the same C code; the arm64
paths only vectorize the exact integer dot products and keep the scalar path's float operations
in its order, so they must give its bits), its activation quantizer (the same bytes), and
gguf-py's dequantizer dotted in float64 with the kernel's own int8 activations (the x86 tests'
oracle and tolerance). Bit-exactness across the ways callers split a call (column ranges:
threads; a row alone: decode) is checked on the emulated CPU itself.

Without the cross compiler or qemu the tests skip, saying what is missing; with
AMBER_ARM64_TESTS=required (`make test`) they fail instead.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf.quants import GGMLQuantizationType, dequantize

from engine.native import build as native_build
from tests.engine.native.q32_lib import Lib, dequant_act
from tests.native_harness.client import Batch, HarnessError, build_harness, missing_tools
from tests.support.attn_graphs import Case, feeds, numpy_reference
from tests.support.native_op import random_rows

REQUIRED = os.environ.get("AMBER_ARM64_TESTS", "") == "required"
# qemu CPU model -> (the ISA the library picks there, every ISA it may be forced to)
CPUS = {
    "cortex-a53": ("neon", ("scalar", "neon")),
    "cortex-a76": ("dotprod", ("scalar", "neon", "dotprod")),
    "max": ("i8mm", ("scalar", "neon", "dotprod", "i8mm")),
}
ALL_ISAS = ("scalar", "avx2", "avxvnni", "avx512vnni", "neon", "dotprod", "i8mm")
TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}
NS = (1, 7, 33)          # one weight row, a group of 4 and a remainder, many groups
MS = (1, 3, 8, 13)       # decode, a partial tile, a full tile (8 rows), the prefill loop
TOLERANCE = 1e-5         # relative to |a| @ |w|, as the x86 kernel tests
ATTN_ATOL = 5e-3         # attention output against float64 GQA, as the x86 attention tests
ATTN_CASES = {
    "decode": Case(totals=[1]),
    "decode_long": Case(cap=300, totals=[257], hq=9, hkv=3, d=64),
    "prefill_from_empty": Case(s=130, cap=160, totals=[130], hq=9, hkv=3, d=64),
    "prefill_chunk_after_past": Case(s=37, cap=128, totals=[100]),
    "batch4_decode_different_lengths": Case(b=4, totals=[3, 70, 1, 41], cap=80),
    "batch2_prefill_different_pasts": Case(b=2, s=5, totals=[9, 33], cap=40),
    "window_prefill": Case(s=40, cap=80, totals=[70], window=16),
    "window_decode": Case(cap=80, totals=[70], window=16),
    "softcap": Case(s=9, totals=[30], cap=40, softcap=3.0),
    "no_rotary": Case(s=3, totals=[11], cap=16, rotary=False),
    "partial_rotary": Case(s=3, totals=[11], cap=16, rot=16),
    "mqa_wide_group": Case(s=20, totals=[50], cap=64, hq=8, hkv=1, d=16),
    "odd_head_dim": Case(s=4, totals=[12], cap=16, d=24),
    "head_dim_128": Case(s=3, totals=[70], cap=80, hq=2, hkv=1, d=128),
    "custom_scale": Case(s=2, totals=[5], cap=8, scale=0.05),
}


def _unavailable(why: str) -> None:
    if REQUIRED:
        pytest.fail(f"AMBER_ARM64_TESTS=required: {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    missing = missing_tools()
    if missing:
        _unavailable(f"the arm64 kernel tests need {', '.join(missing)} "
                     "(packaging/linux/install-sysdeps.sh installs them)")
    try:
        return build_harness(tmp_path_factory.mktemp("arm64"))
    except HarnessError as exc:
        pytest.fail(f"the arm64 harness does not compile: {exc}")


@pytest.fixture(scope="module")
def x86() -> Lib:
    path = native_build.build()   # this machine's library where the app keeps it (built once)
    if path is None:
        _unavailable("no C compiler for this machine's library (the expected results)")
    lib = Lib(path)
    yield lib
    lib.set_isa(lib.best)


def _ks(qtype: int) -> tuple[int, ...]:
    if qtype >= 12:
        return (256, 768, 256 * 9)
    return (32, 96, 32 * 131)   # one block, an odd count (the lone block), three K segments


def _act_values(qtype: int, act: np.ndarray, k: int) -> np.ndarray:
    """The activations the kernel multiplies by, in float64 (m, k)."""
    if qtype < 12:
        return dequant_act(qtype, act, k)
    blocks = act.reshape(act.shape[0], k // 256, 292)
    d = blocks[..., :4].copy().view(np.float32).astype(np.float64)
    q = blocks[..., 4:260].copy().view(np.int8).astype(np.float64)
    return (q * d).reshape(act.shape[0], k)


def _float_words(qtype: int, k: int) -> np.ndarray:
    """Per 4-byte word of an activation row: True where it holds a float32 (q32_layout.h, qk's
    Q8_K blocks)."""
    if qtype >= 12:
        words = np.zeros((k // 256, 73), bool)   # 292 bytes: float d, q[256], bsums[16]
        words[:, 0] = True
        return words.reshape(-1)
    nb = k // 32
    sections = [np.zeros(8 * nb, bool), np.ones(nb, bool), np.zeros(nb, bool)]   # q, d, S
    if qtype == 8:
        sections.append(np.zeros(nb, bool))                            # int32 bias
    else:
        npairs = (nb + 1) // 2
        sections += [np.ones(8 * npairs, bool), np.full(8 * npairs, qtype in (3, 7))]   # dexp, aux
    return np.concatenate(sections)


def assert_same_activations(qtype: int, k: int, got: np.ndarray, want: np.ndarray, where: str) -> None:
    """The same bytes, except that a NaN float may differ in sign: the default NaN an invalid
    operation gives (inf * 0) is negative on x86 and positive on arm64."""
    assert got.shape == want.shape, where
    g, w = got.reshape(got.shape[0], -1, 4), want.reshape(want.shape[0], -1, 4)
    same = (g == w).all(axis=2)
    gf, wf = got.view(np.float32), want.view(np.float32)
    both_nan = np.isnan(gf) & np.isnan(wf) & _float_words(qtype, k)[None, :]
    bad = np.argwhere(~(same | both_nan))
    assert bad.size == 0, f"{where}: {len(bad)} words differ, first at (row, word) {tuple(bad[0])}"


def test_build_cross_compiles_an_arm64_library_and_keeps_other_targets(harness, tmp_path):
    """`python -m engine.native.build --target aarch64-linux`: an AArch64 ELF exporting the API;
    a rebuild removes its own stale libraries, never this machine's."""
    stale_arm = tmp_path / f"{native_build.LIB_STEM}-0123456789abcdef-aarch64-linux.so"
    native_lib = tmp_path / f"{native_build.LIB_STEM}-0123456789abcdef.so"
    stale_arm.write_bytes(b"old")
    native_lib.write_bytes(b"this machine's")
    lib = native_build.build(tmp_path, target="aarch64-linux")
    assert lib is not None and lib.name == native_build.library_name(target="aarch64-linux")
    head = lib.read_bytes()[:20]
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 183   # EM_AARCH64
    assert not stale_arm.exists() and native_lib.read_bytes() == b"this machine's"
    nm = shutil.which("aarch64-linux-gnu-nm")
    if nm is not None:
        syms = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                              check=True).stdout.split()
        for name in ("amber_gemm_rows", "amber_quantize_act", "amber_set_isa", "amber_silu_mul",
                     "RegisterCustomOps"):
            assert name in syms


def test_each_cpu_model_gets_its_widest_isa_and_only_what_it_has(harness):
    for cpu, (best, runs) in CPUS.items():
        b = Batch()
        first = b.isa()
        tries = {name: b.set_isa(name) for name in ALL_ISAS}
        replies = b.run(harness, cpu)
        assert replies[first].text() == best, cpu
        for name, i in tries.items():
            assert replies[i].rc == (0 if name in runs else -1), (cpu, name)


def test_hostile_activations_quantize_to_the_x86_bytes(harness, x86):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((6, 512)) * rng.uniform(1e-3, 1e3, size=(6, 1))).astype(np.float32)
    x[1, 3], x[1, 40], x[1, 300] = np.nan, np.inf, -np.inf
    x[2, :64], x[2, 70] = 0.0, -0.0
    x[3, 100], x[3, 101] = 3e38, -3e38
    x[4, 200:232] = 1e-40                                   # a subnormal block
    x[5, :32] = np.arange(32, dtype=np.float32) - 15.5      # halves: ties round to even
    x[5, 0] = 127.0
    x86.set_isa("scalar")
    for cpu, (_, runs) in CPUS.items():
        b = Batch()
        asked = [(isa, t, b.set_isa(isa), b.quantize(t, x)) for isa in runs for t in TYPES.values()]
        replies = b.run(harness, cpu)
        for isa, t, set_i, q_i in asked:
            assert replies[set_i].rc == 0
            assert_same_activations(t, x.shape[1], replies[q_i].array(0, np.uint8).reshape(6, -1),
                                    x86.quantize(t, x), f"{cpu} {isa} type {t}")


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("name", list(TYPES))
def test_matmul_has_the_scalar_bits_and_matches_the_oracle(harness, x86, cpu, name):
    qtype, (_, runs) = TYPES[name], CPUS[cpu]
    rng = np.random.default_rng([qtype, len(cpu)])
    cases, b = [], Batch()
    for k in _ks(qtype):
        for n in NS:
            for m in MS:
                w = random_rows(qtype, n, k, rng)
                x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 3.0, size=(m, 1))).astype(np.float32)
                act = x86.quantize(qtype, x)
                x86.set_isa("scalar")
                want = x86.matmul(qtype, act, w, k, n)
                h = n // 2
                calls = {}
                for isa in runs:
                    b.set_isa(isa)
                    calls[isa] = (
                        b.gemm(qtype, act, m, w, k, 0, n, np.zeros((m, n), np.float32), n),
                        # a thread's column range, into a buffer whose other columns stay put
                        b.gemm(qtype, act, m, w, k, h, n, np.full((m, n), -7.0, np.float32), n),
                        # the last row alone (decode), m = 1
                        b.gemm(qtype, act[m - 1:], 1, w, k, 0, n, np.zeros(n, np.float32), 0),
                    )
                cases.append((k, n, m, w, act, want, b.quantize(qtype, x), calls))
    replies = b.run(harness, cpu)
    worst = 0.0
    for k, n, m, w, act, want, quant_i, calls in cases:
        assert_same_activations(qtype, k, replies[quant_i].array(0, np.uint8).reshape(m, -1), act,
                                f"{cpu} {name} k={k} m={m}")
        wf = dequantize(w, GGMLQuantizationType(qtype)).astype(np.float64).reshape(n, k)
        a = _act_values(qtype, act, k)
        ref, scale = a @ wf.T, np.abs(a) @ np.abs(wf).T + 1e-30
        for isa, (full_i, part_i, row_i) in calls.items():
            where = f"{cpu} {isa} {name} k={k} n={n} m={m}"
            assert all(replies[i].rc == 0 for i in (full_i, part_i, row_i)), where
            y = replies[full_i].array(0, np.float32).reshape(m, n)
            np.testing.assert_array_equal(y, want, err_msg=where)
            err = float((np.abs(y - ref) / scale).max())
            assert err < TOLERANCE, (where, err)
            worst = max(worst, err)
            part = replies[part_i].array(0, np.float32).reshape(m, n)
            h = n // 2
            np.testing.assert_array_equal(part[:, h:], y[:, h:], err_msg=where)
            assert (part[:, :h] == -7.0).all(), where
            np.testing.assert_array_equal(replies[row_i].array(0, np.float32), y[m - 1], err_msg=where)
    print(f"arm64 {cpu} {name}: {len(cases) * len(runs)} matmuls ({len(runs)} ISAs), "
          f"bit-exact with x86 scalar, max relative error {worst:.2e}")


def _x86_silu(x86: Lib, path: str, g: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The x86-64 library's SwiGLU kernel of one MLAS SiLU path (restored after: it is process-wide)."""
    before = x86.c.amber_silu_path()
    if x86.c.amber_set_silu_path(path.encode()) != 0:
        pytest.skip(f"this CPU cannot run the x86 {path} kernel")
    want = np.zeros_like(g)
    try:
        x86.c.amber_silu_mul(g.ctypes.data, u.ctypes.data, want.ctypes.data, g.size)
    finally:
        assert x86.c.amber_set_silu_path(before) == 0
    return want


def test_silu_mul_has_mlas_arm64_bits_and_the_generic_kernel_when_forced(harness, x86):
    """arm64's SiLU is MLAS's generic logistic with AArch64's fused multiply-adds: the x86 FMA3
    kernel's operations lane for lane, so the same bits wherever s = p/q + 1/2 stays within [0, 1]
    (|g| below the clamp at 18, where the FMA3 kernel may give 1 + 2^-23); beyond it arm64 clamps s
    to [0, 1], so |y| never exceeds |g * u|. Forced to "generic", the x86 generic kernel's bits."""
    rng = np.random.default_rng(9)
    g = np.concatenate([rng.standard_normal(4000) * 6, np.linspace(-17.5, 17.5, 999),
                        [0.0, -0.0, 1e-30, -1e-30]]).astype(np.float32)
    g = g[np.abs(g) <= 17.5][:4003]     # an odd count: a tail through the padded lanes
    u = rng.standard_normal(g.size).astype(np.float32)
    big = np.concatenate([np.linspace(18, 60, 101), -np.linspace(18, 60, 101)]).astype(np.float32)
    ub = rng.standard_normal(big.size).astype(np.float32)
    everything = np.concatenate([g, big, [np.nan, np.inf, -np.inf]]).astype(np.float32)
    ue = rng.standard_normal(everything.size).astype(np.float32)
    want_fused = _x86_silu(x86, "fma3", g, u)
    want_generic = _x86_silu(x86, "generic", everything, ue)
    for cpu in CPUS:
        b = Batch()
        path, got, got_big = b.silu_path(), b.silu_mul(g, u), b.silu_mul(big, ub)
        forced, generic = b.set_silu_path("generic"), b.silu_mul(everything, ue)
        replies = b.run(harness, cpu)
        assert replies[path].text() == "neon", cpu
        np.testing.assert_array_equal(replies[got].array(0, np.float32), want_fused, err_msg=cpu)
        yb = replies[got_big].array(0, np.float32)
        assert np.all(np.abs(yb) <= np.abs(big * ub)), cpu
        pos = big > 0   # s is 1 (or one ulp under it) at +18 and beyond, about 1.5e-8 at -18 and beyond
        np.testing.assert_allclose(yb[pos], (big * ub)[pos], rtol=1e-6, err_msg=cpu)
        assert np.all(np.abs(yb[~pos]) <= 1e-6 * np.abs(big * ub)[~pos]), cpu
        assert replies[forced].rc == 0, cpu
        np.testing.assert_array_equal(replies[generic].array(0, np.float32), want_generic, err_msg=cpu)


@pytest.mark.parametrize("cpu", ["cortex-a53", "max"])
def test_attention_matches_float64_gqa(harness, cpu):
    """ai.amber.Attention's core (KV write, flash attention) on every ISA of the model against
    GroupQueryAttention's semantics in float64; present KV to one float16 step."""
    rng = np.random.default_rng(17)
    b, asked = Batch(), []
    for name, c in ATTN_CASES.items():
        f = feeds(c, rng)
        for isa in CPUS[cpu][1]:
            b.set_isa(isa)
            asked.append((name, isa, c, numpy_reference(c, f), b.attention(c, f)))
    replies = b.run(harness, cpu)
    worst: dict[str, float] = {}
    outs: dict[tuple[str, str], np.ndarray] = {}
    for name, isa, c, ref, i in asked:
        where = f"{cpu} {isa} {name}"
        assert replies[i].rc == 0, where
        out = replies[i].array(0, np.float32).reshape(ref[0].shape)
        np.testing.assert_allclose(out, ref[0], atol=ATTN_ATOL, rtol=0, err_msg=where)
        worst[isa] = max(worst.get(isa, 0.0), float(np.abs(out - ref[0]).max()))
        outs[(name, isa)] = out
        for j in (1, 2):
            kv = replies[i].array(j, np.float16).reshape(c.b, c.hkv, c.cap, c.d)
            for seq, total in enumerate(c.totals):
                np.testing.assert_allclose(kv[seq, :, :total].astype(np.float32), ref[j][seq, :, :total],
                                           rtol=2 ** -10, atol=2 ** -20, err_msg=where)
    # the NEON primitives sum in another order than the scalar ones: their own path ran
    assert any(not np.array_equal(outs[(n, "neon")], outs[(n, "scalar")]) for n in ATTN_CASES)
    print(f"arm64 {cpu} attention: {len(asked)} calls, max abs error per ISA "
          + ", ".join(f"{isa} {e:.2e}" for isa, e in worst.items()))
