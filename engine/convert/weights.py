"""GGUF weight tensors → the forms the ONNX graph uses.

Q4_0, Q4_1 and Q4_K blocks map onto `com.microsoft.MatMulNBits` 4-bit blocks of 32 *without
requantizing*: ONNX Runtime dequantizes a block as (q - zero_point) * scale, so
  Q4_0: w = d * (q - 8)              -> scale d, zero point 8 (the operator's default)
  Q4_1: w = d * q + m                -> scale d, float zero point -m / d
  Q4_K: w = (d*sc) * q - (dmin*mn)   -> scale d*sc, float zero point dmin*mn / (d*sc)
Q8_0 (w = d * q, q in int8) maps onto 8-bit blocks with q + 128 and the default zero point 128.
Requantizing instead measurably changed the default model's answers, so the mapping is exact.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from gguf import GGMLQuantizationType as QT  # noqa: N814 - short, like ggml's own type tags
from gguf import quants

from .errors import ModelImportError

BLOCK = 32
WeightPolicy = Literal["auto", "int4", "int8", "fp16", "fp32"]
WEIGHT_POLICIES: tuple[str, ...] = ("auto", "int4", "int8", "fp16", "fp32")
Q4_TYPES = (QT.Q4_0, QT.Q4_1, QT.Q4_K)
FLOAT_TYPES = (QT.F32, QT.F16, QT.BF16)


def pack_nibbles(levels: np.ndarray) -> np.ndarray:
    """uint8 levels 0..15 [.., 32] -> MatMulNBits bytes [.., 16], low nibble first."""
    packed: np.ndarray = (levels[..., 0::2] | (levels[..., 1::2] << 4)).astype(np.uint8)
    return packed


@dataclass
class Weight:
    """A linear weight of N output rows by K inputs, in one of three storage forms."""
    kind: Literal["q4", "q8", "dense"]
    n: int
    k: int
    values: np.ndarray | None = None        # q4/q8: integer levels uint8 [N, K/32, 32]
    scales: np.ndarray | None = None        # q4/q8: float32 [N, K/32]
    zero_points: np.ndarray | None = None   # q4: float32 [N, K/32]; None = the default 8 / 128
    dense: np.ndarray | None = None         # dense: float32 or float16 [N, K]

    @property
    def bits(self) -> int:
        return {"q4": 4, "q8": 8}[self.kind]

    def packed(self) -> np.ndarray:
        """MatMulNBits' B input: uint8 [N, K/32, 32 * bits / 8], low nibble first."""
        assert self.values is not None
        if self.kind == "q8":
            return self.values
        return pack_nibbles(self.values)

    def dequantized(self) -> np.ndarray:
        """float32 [N, K] — for checks and for re-quantizing."""
        if self.kind == "dense":
            assert self.dense is not None
            return self.dense.astype(np.float32)
        assert self.values is not None and self.scales is not None
        zp = self.zero_points if self.zero_points is not None else np.float32(2 ** (self.bits - 1))
        zp_b = zp[..., None] if isinstance(zp, np.ndarray) else zp
        w: np.ndarray = (self.values.astype(np.float32) - zp_b) * self.scales[..., None]
        return w.reshape(self.n, self.k)

    def rows(self, perm: np.ndarray) -> "Weight":
        """The same weight with its output rows reordered."""
        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else np.ascontiguousarray(a[perm])
        return replace(self, values=pick(self.values), scales=pick(self.scales),
                       zero_points=pick(self.zero_points), dense=pick(self.dense))


def concat_rows(weights: list[Weight]) -> Weight | None:
    """Stack weights along N (fused QKV or gate/up); None when their forms differ."""
    first = weights[0]
    if any(w.kind != first.kind or w.k != first.k for w in weights):
        return None
    n = sum(w.n for w in weights)
    if first.kind == "dense":
        dts = {w.dense.dtype for w in weights}  # type: ignore[union-attr]
        if len(dts) != 1:
            return None
        return Weight("dense", n, first.k, dense=np.concatenate([w.dense for w in weights]))
    zps = None
    if any(w.zero_points is not None for w in weights):
        default = np.float32(2 ** (first.bits - 1))
        zps = np.concatenate([w.zero_points if w.zero_points is not None
                              else np.full(w.scales.shape, default, np.float32) for w in weights])  # type: ignore
    return Weight(first.kind, n, first.k,
                  values=np.concatenate([w.values for w in weights]),
                  scales=np.concatenate([w.scales for w in weights]),
                  zero_points=zps)


def _f16(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw).view(np.float16).astype(np.float32)[..., 0]


def _nibbles_q4_0_1(qs: np.ndarray) -> np.ndarray:
    """[.., 16] bytes -> [.., 32] levels: element i is the low nibble of byte i, i+16 the high."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.uint8)


def _constant_blocks(values: np.ndarray, scales: np.ndarray, zps: np.ndarray,
                     constant: np.ndarray) -> None:
    """Blocks whose scale is 0 hold one constant c: encode as q=0, scale=1, zero point -c."""
    dead = scales == 0
    if dead.any():
        values[dead] = 0
        scales[dead] = 1.0
        zps[dead] = -constant[dead]


def from_q4_0(raw: np.ndarray, n: int, k: int) -> Weight:
    blocks = raw.reshape(n, k // BLOCK, 18)
    d = _f16(blocks[..., 0:2])
    return Weight("q4", n, k, values=_nibbles_q4_0_1(blocks[..., 2:]), scales=d)


def from_q4_1(raw: np.ndarray, n: int, k: int) -> Weight:
    blocks = raw.reshape(n, k // BLOCK, 20)
    d = _f16(blocks[..., 0:2])
    m = _f16(blocks[..., 2:4])
    values = _nibbles_q4_0_1(blocks[..., 4:])
    with np.errstate(divide="ignore", invalid="ignore"):
        zps = np.where(d != 0, -m / d, 0).astype(np.float32)
    scales = d.copy()
    _constant_blocks(values, scales, zps, m)
    return Weight("q4", n, k, values=values, scales=scales, zero_points=zps)


def _q4k_scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 12 packed bytes of a Q4_K super-block -> eight 6-bit scales and eight 6-bit mins."""
    s = scales.reshape(*scales.shape[:-1], 3, 4)
    d, m, m_d = s[..., 0, :], s[..., 1, :], s[..., 2, :]
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.astype(np.float32), mn.astype(np.float32)


def from_q4_k(raw: np.ndarray, n: int, k: int) -> Weight:
    nsb = k // 256
    blocks = raw.reshape(n, nsb, 144)
    d = _f16(blocks[..., 0:2])[..., None]
    dmin = _f16(blocks[..., 2:4])[..., None]
    sc, mn = _q4k_scale_min(blocks[..., 4:16])
    qs = blocks[..., 16:].reshape(n, nsb, 4, 32)
    # Each 32-byte chunk holds two sub-blocks: low nibbles first, then high nibbles.
    values = np.stack([qs & 0x0F, qs >> 4], axis=3).reshape(n, nsb * 8, 32).astype(np.uint8)
    scale = (d * sc).reshape(n, nsb * 8).astype(np.float32)
    offset = (dmin * mn).reshape(n, nsb * 8).astype(np.float32)   # w = scale*q - offset
    with np.errstate(divide="ignore", invalid="ignore"):
        zps = np.where(scale != 0, offset / scale, 0).astype(np.float32)
    _constant_blocks(values, scale, zps, -offset)
    return Weight("q4", n, k, values=values, scales=scale, zero_points=zps)


def from_q8_0(raw: np.ndarray, n: int, k: int) -> Weight:
    blocks = raw.reshape(n, k // BLOCK, 34)
    d = _f16(blocks[..., 0:2])
    q = np.ascontiguousarray(blocks[..., 2:]).view(np.int8)
    return Weight("q8", n, k, values=(q.astype(np.int16) + 128).astype(np.uint8), scales=d)


def quantize_int4(w: np.ndarray) -> Weight:
    """Asymmetric 4-bit blocks of 32 (min/max), float zero points."""
    n, k = w.shape
    b = w.reshape(n, k // BLOCK, BLOCK).astype(np.float32)
    lo, hi = b.min(-1), b.max(-1)
    scale = (hi - lo) / 15.0
    safe = np.where(scale == 0, 1.0, scale)
    zp = (-lo / safe).astype(np.float32)
    q = np.clip(np.rint(b / safe[..., None] + zp[..., None]), 0, 15).astype(np.uint8)
    return Weight("q4", n, k, values=q, scales=safe.astype(np.float32), zero_points=zp)


def quantize_int8(w: np.ndarray) -> Weight:
    """Symmetric 8-bit blocks of 32 (the default zero point 128)."""
    n, k = w.shape
    b = w.reshape(n, k // BLOCK, BLOCK).astype(np.float32)
    scale = np.abs(b).max(-1) / 127.0
    safe = np.where(scale == 0, 1.0, scale).astype(np.float32)
    q = np.clip(np.rint(b / safe[..., None]), -127, 127).astype(np.int16) + 128
    return Weight("q8", n, k, values=q.astype(np.uint8), scales=safe)


_DIRECT = {QT.Q4_0: from_q4_0, QT.Q4_1: from_q4_1, QT.Q4_K: from_q4_k, QT.Q8_0: from_q8_0}


def convert_tensor(name: str, qtype: QT, data: np.ndarray, n: int, k: int,
                   policy: WeightPolicy = "auto") -> Weight:
    """One GGUF matrix (N rows of K) as a `Weight`, following the --weights policy."""
    if k % BLOCK != 0 and policy in ("auto", "int4", "int8") and qtype not in FLOAT_TYPES:
        raise ModelImportError(f"tensor {name}: row length {k} is not a multiple of {BLOCK}")
    direct = _DIRECT.get(qtype)
    if direct is not None and (
            (qtype in Q4_TYPES and policy in ("auto", "int4")) or (qtype == QT.Q8_0 and policy in ("auto", "int8"))):
        return direct(np.asarray(data), n, k)
    try:
        dense = quants.dequantize(np.asarray(data), qtype).reshape(n, k)
    except (NotImplementedError, ValueError, KeyError) as exc:
        raise ModelImportError(f"tensor {name}: unsupported tensor type {qtype.name} ({exc})") from None
    if policy == "auto":
        if qtype == QT.F16:
            return Weight("dense", n, k, dense=dense.astype(np.float16))
        if qtype in FLOAT_TYPES:
            return Weight("dense", n, k, dense=dense.astype(np.float32))
        policy = "int8"   # other quantized types: 8-bit keeps them near-lossless
    if policy == "int4":
        if k % BLOCK:
            raise ModelImportError(f"tensor {name}: row length {k} is not a multiple of {BLOCK}")
        return quantize_int4(dense)
    if policy == "int8":
        if k % BLOCK:
            raise ModelImportError(f"tensor {name}: row length {k} is not a multiple of {BLOCK}")
        return quantize_int8(dense)
    return Weight("dense", n, k, dense=dense.astype(np.float16 if policy == "fp16" else np.float32))
