"""ctypes access to the kernels library for the q32 tests: build it, call it, decode its buffers.

The decoder follows q32_layout.h (the activation row layout) independently of the C code, so a
layout mistake on either side shows up as a mismatch against gguf-py's dequantizer.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[3] / "engine" / "native" / "src"
Q32_TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8}
BLOCK_BYTES = {2: 18, 3: 20, 6: 22, 7: 24, 8: 34}
ISAS = ("scalar", "avx2", "avxvnni", "avx512vnni", "neon", "dotprod", "i8mm")   # x86-64, then arm64


def build(out_dir: Path) -> Path | None:
    """The library as `python -m engine.native.build` makes it, into out_dir (None without a C
    compiler)."""
    from engine.native import build as native_build

    return native_build.build(out_dir)


def compile_q32_strict(out_dir: Path, *defines: str) -> None:
    """Compiles the q32 family and the dispatch alone with every warning an error (CI's gcc)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc is not None
    from engine.native import build as native_build

    files = [SRC / "generic" / "dispatch.c", *sorted(SRC.glob("*/q32*.c"))]
    for f in files:
        subprocess.run([cc, "-O2", "-std=c11", "-fPIC", "-Wall", "-Wextra", "-Werror", "-pedantic",
                        *defines, *native_build.include_flags(SRC), "-c", str(f),
                        "-o", str(out_dir / (f.stem + ".o"))],
                       check=True, capture_output=True, text=True)


class Lib:
    """The library's C API with numpy arguments."""

    def __init__(self, path: Path) -> None:
        from engine.native import open_library

        lib = open_library(path)
        self.c = lib
        self.best = self.isa()

    def isa(self) -> str:
        return str(self.c.amber_isa().decode())

    def set_isa(self, name: str) -> int:
        return int(self.c.amber_set_isa(name.encode()))

    def available_isas(self) -> list[str]:
        """The ISAs this CPU runs (each forced in turn, then the best one restored)."""
        got = [n for n in ISAS if self.set_isa(n) == 0]
        self.set_isa(self.best)
        return got

    def quantize(self, qtype: int, x: np.ndarray) -> np.ndarray:
        """m float32 rows -> (m, act_bytes) uint8."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        m, k = x.shape
        ab = self.c.amber_act_bytes(qtype, k)
        assert ab > 0
        out = np.zeros((m, ab), np.uint8)
        for i in range(m):
            assert self.c.amber_quantize_act(qtype, x[i].ctypes.data, k, out[i].ctypes.data) == 0
        return out

    def gemm(self, qtype: int, act: np.ndarray, w: np.ndarray, k: int, n0: int, n1: int,
             y: np.ndarray, ldy: int, m: int | None = None) -> int:
        m = act.shape[0] if m is None else m
        return int(self.c.amber_gemm_rows(qtype, act.ctypes.data, m, w.ctypes.data, k, n0, n1,
                                          y.ctypes.data, ldy))

    def matmul(self, qtype: int, act: np.ndarray, w: np.ndarray, k: int, n: int) -> np.ndarray:
        y = np.zeros((act.shape[0], n), np.float32)
        assert self.gemm(qtype, act, w, k, 0, n, y, n) == 0
        return y


def decode_act(qtype: int, act: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(m, act_bytes) -> (the int8 codes in natural order (m, k), the block scales (m, nb))."""
    nb = k // 32
    q = act[:, : nb * 32].view(np.int8).reshape(act.shape[0], nb * 32).astype(np.int32)
    if qtype != 8:
        pairs = nb // 2
        # pair p is stored A[0:16] B[0:16] A[16:32] B[16:32]
        p = q[:, : pairs * 64].reshape(q.shape[0], pairs, 2, 2, 16)   # (m, pair, lo/hi, A/B, 16)
        natural = p.transpose(0, 1, 3, 2, 4).reshape(q.shape[0], pairs * 64)
        q = np.concatenate([natural, q[:, pairs * 64:]], axis=1)
    d = act[:, nb * 32: nb * 36].copy().view(np.float32)
    return q, d


def dequant_act(qtype: int, act: np.ndarray, k: int) -> np.ndarray:
    """The activations the kernel multiplies by, in float64."""
    q, d = decode_act(qtype, act, k)
    return (q.reshape(q.shape[0], -1, 32) * d.astype(np.float64)[:, :, None]).reshape(q.shape[0], k)


def random_blocks(qtype: int, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """n rows of random raw blocks whose fp16 scales (and mins) are finite and small."""
    bs, nb = BLOCK_BYTES[qtype], k // 32
    raw = rng.integers(0, 256, size=(n, nb, bs), dtype=np.uint8)
    n_scales = 2 if qtype in (3, 7) else 1
    scales = (rng.uniform(0.002, 0.05, size=(n, nb, n_scales)) *
              rng.choice([-1.0, 1.0], size=(n, nb, n_scales))).astype(np.float16)
    raw[:, :, : 2 * n_scales] = scales.view(np.uint8).reshape(n, nb, 2 * n_scales)
    return raw.reshape(n, nb * bs)
