"""GGUF weight tensors → the forms the ONNX graph uses, without requantizing.

Every quantized GGUF type Amber maps exactly is a block form
    w = scale * (q - center) - offset          (per block of 32, or 16 for Q6_K)
with integer levels q, an integer `center` and float32 per-block `scale` / `offset`, each stored
as compactly as the GGUF stores it (a `Scale`: float16 numbers, or a float16 super-block number
times small per-block integers, multiplied in float32 exactly as llama.cpp's dequantizer does):
  Q4_0: q 4-bit, center 8,  scale d                         Q8_0: q+128 8-bit, center 128, scale d
  Q4_1: q 4-bit, scale d, offset -m                         Q5_0: q 5-bit, center 16, scale d
  Q4_K: q 4-bit, scale d*sc, offset dmin*mn (sc, mn 6-bit)  Q5_1: q 5-bit, scale d, offset -m
  Q5_K: q 5-bit, scale d*sc, offset dmin*mn                 Q6_K: q 6-bit, center 32, scale d*sc (int8 sc,
                                                                  blocks of 16)
The graph (graph.py) turns these into MatMulNBits inputs: in the exact mode levels of more than 4
bits are split into two 4-bit parts (q = 16*hi + lo), in the fast mode they are one 8-bit plane;
nothing is requantized.
Requantizing instead measurably changed the default model's answers.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT  # noqa: N814 - short, like ggml's own type tags
from gguf import quants

from .errors import ModelImportError

BLOCK = 32
WeightPolicy = Literal["auto", "int4", "int8", "fp16", "fp32"]
WEIGHT_POLICIES: tuple[str, ...] = ("auto", "int4", "int8", "fp16", "fp32")
Q4_TYPES = (QT.Q4_0, QT.Q4_1, QT.Q4_K)
EXACT_TYPES = (QT.Q4_0, QT.Q4_1, QT.Q4_K, QT.Q5_0, QT.Q5_1, QT.Q5_K, QT.Q6_K, QT.Q8_0)
FLOAT_TYPES = (QT.F32, QT.F16, QT.BF16)


def pack_nibbles(levels: np.ndarray) -> np.ndarray:
    """uint8 levels 0..15 [.., 2m] -> MatMulNBits bytes [.., m], low nibble first."""
    packed: np.ndarray = (levels[..., 0::2] | (levels[..., 1::2] << 4)).astype(np.uint8)
    return packed


def pack_bits(levels: np.ndarray, bits: int) -> np.ndarray:
    """uint8 levels [.., m] of `bits` bits (2, 4, 8) -> bytes [.., m*bits/8], first value lowest."""
    if bits == 8:
        return np.ascontiguousarray(levels, dtype=np.uint8)
    per = 8 // bits
    out = np.zeros(levels.shape[:-1] + (levels.shape[-1] // per,), np.uint8)
    for j in range(per):
        out |= (levels[..., j::per] << (bits * j)).astype(np.uint8)
    return out


@dataclass
class Scale:
    """Per-block float32 numbers stored compactly: base[n, b // group] * factor[n, b] in float32
    (factor None: base[n, b]). base is float16 (a GGUF's d, m, dmin) or float32 (requantized)."""
    base: np.ndarray
    factor: np.ndarray | None = None     # uint8 or int8 [N, nb]

    @property
    def group(self) -> int:
        return 1 if self.factor is None else self.factor.shape[1] // self.base.shape[1]

    def value(self) -> np.ndarray:
        b = self.base.astype(np.float32)
        if self.factor is None:
            return b
        return np.repeat(b, self.group, axis=1) * self.factor.astype(np.float32)

    def layout(self) -> tuple[str, str | None, int]:
        return (self.base.dtype.str, None if self.factor is None else self.factor.dtype.str, self.group)

    def rows(self, perm: np.ndarray) -> "Scale":
        return Scale(np.ascontiguousarray(self.base[perm]),
                     None if self.factor is None else np.ascontiguousarray(self.factor[perm]))

    @property
    def nbytes(self) -> int:
        return self.base.nbytes + (0 if self.factor is None else self.factor.nbytes)


@dataclass
class Weight:
    """A linear weight of N output rows by K inputs: quantized blocks (see the module docstring) or dense."""
    kind: Literal["quant", "dense", "native"]
    n: int
    k: int
    levels: np.ndarray | None = None     # quant: uint8 [N, K/block, block], 0 .. 2**qbits - 1
    qbits: int = 4
    block: int = BLOCK
    scale: Scale | None = None
    center: int = 0
    offset: Scale | None = None          # None: no offset
    dense: np.ndarray | None = None      # dense: float32 or float16 [N, K]
    qtype: str = ""                      # the GGUF type it came from (the size report)
    part_of: "tuple[Weight, int] | None" = None   # (fused weight, first row): a view of its rows
    raw: np.ndarray | None = None        # native: the GGUF's bytes, uint8 [N, row_bytes] (native_form.py)
    ggml_type: int = 0                   # native: the GGUF type id of `raw`

    @property
    def nb(self) -> int:
        return self.k // self.block

    def dequantized(self) -> np.ndarray:
        """float32 [N, K] — for checks and for re-quantizing."""
        if self.kind == "dense":
            assert self.dense is not None
            return self.dense.astype(np.float32)
        if self.kind == "native":
            assert self.raw is not None
            return np.asarray(quants.dequantize(self.raw, QT(self.ggml_type)), np.float32).reshape(self.n, self.k)
        assert self.levels is not None and self.scale is not None
        w: np.ndarray = self.scale.value()[..., None] * (self.levels.astype(np.float32) - np.float32(self.center))
        if self.offset is not None:
            w = w - self.offset.value()[..., None]
        return w.reshape(self.n, self.k)

    def rows(self, perm: np.ndarray) -> "Weight":
        """The same weight with its output rows reordered."""
        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else np.ascontiguousarray(a[perm])
        return replace(self, levels=pick(self.levels), dense=pick(self.dense), raw=pick(self.raw),
                       scale=None if self.scale is None else self.scale.rows(perm),
                       offset=None if self.offset is None else self.offset.rows(perm), part_of=None)

    def row_range(self, start: int, stop: int) -> "Weight":
        """Rows [start, stop) as views of this weight's arrays (no copy), remembering where they
        came from so `concat_rows` can hand the fused weight back instead of joining copies."""
        def cut(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[start:stop]

        def cut_scale(sc: Scale | None) -> Scale | None:
            if sc is None:
                return None
            return Scale(sc.base[start:stop], None if sc.factor is None else sc.factor[start:stop])
        return replace(self, n=stop - start, levels=cut(self.levels), dense=cut(self.dense), raw=cut(self.raw),
                       scale=cut_scale(self.scale), offset=cut_scale(self.offset), part_of=(self, start))

    def release(self) -> None:
        """Drops the arrays once written (the metadata stays for the graph)."""
        self.levels = self.dense = self.raw = None
        self.scale = self.offset = None


def _as_offset(w: Weight) -> Weight:
    """The same values with center 0: offset' = center*scale + offset, in float32 (fused mixes)."""
    assert w.scale is not None
    off = w.scale.value() * np.float32(w.center)
    if w.offset is not None:
        off = off - (-w.offset.value())
    return replace(w, center=0, offset=Scale(off.astype(np.float32)))


def concat_rows(weights: list[Weight]) -> Weight | None:
    """Stack weights along N (fused QKV or gate/up); None when their forms differ. Parts cut from
    one fused weight, all of it in order (phi3's attn_qkv, ffn_up), give that weight back."""
    first = weights[0]
    if first.part_of is not None:
        whole, start = first.part_of
        for w in weights:
            if w.part_of is None or w.part_of[0] is not whole or w.part_of[1] != start:
                break
            start += w.n
        else:
            if first.part_of[1] == 0 and start == whole.n:
                return whole
    if any(w.kind != first.kind or w.k != first.k for w in weights):
        return None
    n = sum(w.n for w in weights)
    if first.kind == "native":
        # The GGUF's rows one after the other: one GgufMatMul when the parts share a type.
        if any(w.ggml_type != first.ggml_type for w in weights):
            return None
        return Weight("native", n, first.k, raw=np.concatenate([w.raw for w in weights]),
                      ggml_type=first.ggml_type, qtype=first.qtype)
    if first.kind == "dense":
        dts = {w.dense.dtype for w in weights}  # type: ignore[union-attr]
        if len(dts) != 1:
            return None
        return Weight("dense", n, first.k, dense=np.concatenate([w.dense for w in weights]),
                      qtype=first.qtype)
    if any(w.qbits != first.qbits or w.block != first.block or w.scale.layout() != first.scale.layout()  # type: ignore
           for w in weights):
        return None
    if len({(w.center, None if w.offset is None else w.offset.layout()) for w in weights}) > 1:
        weights = [_as_offset(w) for w in weights]
    f = weights[0]

    def cat(arrs: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrs)

    scale = Scale(cat([w.scale.base for w in weights]),  # type: ignore[union-attr]
                  None if f.scale.factor is None else cat([w.scale.factor for w in weights]))  # type: ignore
    offset = None
    if f.offset is not None:
        offset = Scale(cat([w.offset.base for w in weights]),  # type: ignore[union-attr]
                       None if f.offset.factor is None else cat([w.offset.factor for w in weights]))  # type: ignore
    levels = cat([w.levels for w in weights if w.levels is not None])
    return Weight("quant", n, f.k, levels=levels, qbits=f.qbits, block=f.block,
                  scale=scale, center=f.center, offset=offset,
                  qtype="+".join(sorted({w.qtype for w in weights})))


# ---- GGUF block layouts (as ggml-quants.c / gguf-py's dequantizers read them) ---------------
def _zero_dead_blocks(w: Weight) -> Weight:
    """Blocks whose scale is 0 hold one constant (-offset): their levels are set to 0, which changes
    nothing here and lets the GPU variant encode them as scale 1, zero point -constant."""
    assert w.levels is not None and w.scale is not None
    dead = w.scale.value() == 0
    if dead.any():
        w.levels[dead] = 0
    return w


def _f16(raw: np.ndarray) -> np.ndarray:
    """Two bytes per value -> float16 [..] (kept as float16: it is what the GGUF stores)."""
    return np.ascontiguousarray(raw).view(np.float16)[..., 0]


def _nibbles_32(qs: np.ndarray) -> np.ndarray:
    """[.., 16] bytes -> [.., 32] levels: element i is the low nibble of byte i, i+16 the high."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.uint8)


def _high_bits_32(qh: np.ndarray) -> np.ndarray:
    """[.., 4] bytes (a little-endian uint32) -> [.., 32] bits, bit j for element j."""
    return np.unpackbits(qh, axis=-1, bitorder="little")


def from_q4_0(raw: np.ndarray, n: int, k: int) -> Weight:
    blocks = raw.reshape(n, k // BLOCK, 18)
    return Weight("quant", n, k, levels=_nibbles_32(blocks[..., 2:]), qbits=4, scale=Scale(_f16(blocks[..., 0:2])),
                  center=8, qtype="Q4_0")


def from_q4_1(raw: np.ndarray, n: int, k: int) -> Weight:
    blocks = raw.reshape(n, k // BLOCK, 20)
    return _zero_dead_blocks(Weight("quant", n, k, levels=_nibbles_32(blocks[..., 4:]), qbits=4,
                                    scale=Scale(_f16(blocks[..., 0:2])),
                                    offset=Scale(-_f16(blocks[..., 2:4])), qtype="Q4_1"))


def from_q5_0(raw: np.ndarray, n: int, k: int) -> Weight:
    blocks = raw.reshape(n, k // BLOCK, 22)
    levels = _nibbles_32(blocks[..., 6:]) | (_high_bits_32(blocks[..., 2:6]) << 4)
    return Weight("quant", n, k, levels=levels, qbits=5, scale=Scale(_f16(blocks[..., 0:2])), center=16,
                  qtype="Q5_0")


def from_q5_1(raw: np.ndarray, n: int, k: int) -> Weight:
    blocks = raw.reshape(n, k // BLOCK, 24)
    levels = _nibbles_32(blocks[..., 8:]) | (_high_bits_32(blocks[..., 4:8]) << 4)
    return _zero_dead_blocks(Weight("quant", n, k, levels=levels, qbits=5, scale=Scale(_f16(blocks[..., 0:2])),
                  offset=Scale(-_f16(blocks[..., 2:4])), qtype="Q5_1"))


def _q4k_scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 12 packed bytes of a Q4_K/Q5_K super-block -> eight 6-bit scales and eight 6-bit mins (uint8)."""
    s = scales.reshape(*scales.shape[:-1], 3, 4)
    d, m, m_d = s[..., 0, :], s[..., 1, :], s[..., 2, :]
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.astype(np.uint8), mn.astype(np.uint8)


def _k_scales(blocks: np.ndarray, n: int, nsb: int) -> tuple[Scale, Scale]:
    d, dmin = _f16(blocks[..., 0:2]), _f16(blocks[..., 2:4])
    sc, mn = _q4k_scale_min(blocks[..., 4:16])
    return Scale(d, sc.reshape(n, nsb * 8)), Scale(dmin, mn.reshape(n, nsb * 8))


def from_q4_k(raw: np.ndarray, n: int, k: int) -> Weight:
    nsb = k // 256
    blocks = raw.reshape(n, nsb, 144)
    scale, offset = _k_scales(blocks, n, nsb)
    qs = blocks[..., 16:].reshape(n, nsb, 4, 32)
    # Each 32-byte chunk holds two sub-blocks: low nibbles first, then high nibbles.
    levels = np.stack([qs & 0x0F, qs >> 4], axis=3).reshape(n, nsb * 8, 32).astype(np.uint8)
    return _zero_dead_blocks(Weight("quant", n, k, levels=levels, qbits=4, scale=scale, offset=offset, qtype="Q4_K"))


def from_q5_k(raw: np.ndarray, n: int, k: int) -> Weight:
    nsb = k // 256
    blocks = raw.reshape(n, nsb, 176)
    scale, offset = _k_scales(blocks, n, nsb)
    qh = blocks[..., 16:48]                                                  # [n, nsb, 32]
    qs = blocks[..., 48:].reshape(n, nsb, 4, 32)
    low = np.stack([qs & 0x0F, qs >> 4], axis=3).reshape(n, nsb, 8, 32)     # sub-block j
    high = (qh[:, :, None, :] >> np.arange(8, dtype=np.uint8)[None, None, :, None]) & 1   # bit j of qh
    levels = (low | (high << 4)).reshape(n, nsb * 8, 32).astype(np.uint8)
    return _zero_dead_blocks(Weight("quant", n, k, levels=levels, qbits=5, scale=scale, offset=offset, qtype="Q5_K"))


def from_q6_k(raw: np.ndarray, n: int, k: int) -> Weight:
    nsb = k // 256
    blocks = raw.reshape(n, nsb, 210)
    qls = blocks[..., 0:128].reshape(n, nsb, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 1, 2, 1)
    ql = (qls & 0x0F).reshape(n, nsb, 8, 32)
    qhs = blocks[..., 128:192].reshape(n, nsb, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 1, 4, 1)
    qh = (qhs & 0x03).reshape(n, nsb, 8, 32)
    levels = (ql | (qh << 4)).reshape(n, nsb * 16, 16).astype(np.uint8)
    sc = np.ascontiguousarray(blocks[..., 192:208]).view(np.int8).reshape(n, nsb * 16)
    d = _f16(blocks[..., 208:210])
    return Weight("quant", n, k, levels=levels, qbits=6, block=16, scale=Scale(d, sc), center=32, qtype="Q6_K")


def from_q8_0(raw: np.ndarray, n: int, k: int) -> Weight:
    blocks = raw.reshape(n, k // BLOCK, 34)
    levels = blocks[..., 2:] ^ np.uint8(0x80)       # int8 q + 128 as uint8, without a wider copy
    return Weight("quant", n, k, levels=levels, qbits=8,
                  scale=Scale(_f16(blocks[..., 0:2])), center=128, qtype="Q8_0")


def quantize_int4(w: np.ndarray, qtype: str = "") -> Weight:
    """Asymmetric 4-bit blocks of 32 (min/max): w = s * (q - zp), zp a float."""
    n, k = w.shape
    b = w.reshape(n, k // BLOCK, BLOCK).astype(np.float32)
    lo, hi = b.min(-1), b.max(-1)
    scale = (hi - lo) / 15.0
    safe = np.where(scale == 0, 1.0, scale).astype(np.float32)
    zp = (-lo / safe).astype(np.float32)
    q = np.clip(np.rint(b / safe[..., None] + zp[..., None]), 0, 15).astype(np.uint8)
    return Weight("quant", n, k, levels=q, qbits=4, scale=Scale(safe), offset=Scale((zp * safe).astype(np.float32)),
                  qtype=qtype)


def quantize_int8(w: np.ndarray, qtype: str = "") -> Weight:
    """Symmetric 8-bit blocks of 32 (levels q + 128, center 128)."""
    n, k = w.shape
    b = w.reshape(n, k // BLOCK, BLOCK).astype(np.float32)
    scale = np.abs(b).max(-1) / 127.0
    safe = np.where(scale == 0, 1.0, scale).astype(np.float32)
    q = np.clip(np.rint(b / safe[..., None]), -127, 127).astype(np.int16) + 128
    return Weight("quant", n, k, levels=q.astype(np.uint8), qbits=8, scale=Scale(safe), center=128, qtype=qtype)


_DIRECT = {QT.Q4_0: from_q4_0, QT.Q4_1: from_q4_1, QT.Q4_K: from_q4_k, QT.Q5_0: from_q5_0, QT.Q5_1: from_q5_1,
           QT.Q5_K: from_q5_k, QT.Q6_K: from_q6_k, QT.Q8_0: from_q8_0}


def convert_tensor(name: str, qtype: QT, data: np.ndarray, n: int, k: int,
                   policy: WeightPolicy = "auto", exact: bool = False) -> Weight:
    """One GGUF matrix (N rows of K) as a `Weight`, following the --weights policy.

    `auto` maps every type of `EXACT_TYPES` exactly; other quantized types are requantized to
    8 bits, which `exact` (the --exact promise) refuses instead."""
    if k % BLOCK != 0 and policy in ("auto", "int4", "int8") and qtype not in FLOAT_TYPES:
        raise ModelImportError(f"tensor {name}: row length {k} is not a multiple of {BLOCK}")
    direct = _DIRECT.get(qtype)
    if direct is not None and (policy == "auto" or (qtype in Q4_TYPES and policy == "int4")
                               or (qtype == QT.Q8_0 and policy == "int8")):
        try:
            return direct(np.asarray(data), n, k)
        except ValueError as exc:   # a byte count that does not match the shape
            raise ModelImportError(f"tensor {name}: {qtype.name} data does not match its shape ({exc})") from None
    if exact and policy == "auto" and GGML_QUANT_SIZES.get(qtype, (1, 1))[0] > 1:
        raise ModelImportError(f"tensor {name}: type {qtype.name} has no exact form in Amber "
                               "(convert without --exact to requantize it to 8 bits, or with --weights fp32)")
    try:
        dense = quants.dequantize(np.asarray(data), qtype).reshape(n, k)
    except (NotImplementedError, ValueError, KeyError) as exc:
        raise ModelImportError(f"tensor {name}: unsupported tensor type {qtype.name} ({exc})") from None
    if policy == "auto":
        if qtype == QT.F16:
            return Weight("dense", n, k, dense=dense.astype(np.float16), qtype=qtype.name)
        if qtype in FLOAT_TYPES:
            return Weight("dense", n, k, dense=dense.astype(np.float32), qtype=qtype.name)
        policy = "int8"   # other quantized types: 8-bit keeps them near-lossless
    if policy == "int4":
        return quantize_int4(dense, qtype.name)
    if policy == "int8":
        return quantize_int8(dense, qtype.name)
    return Weight("dense", n, k, dense=dense.astype(np.float16 if policy == "fp16" else np.float32),
                  qtype=qtype.name)
