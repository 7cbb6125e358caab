"""The linear-weight forms of Amber's graphs: what a GGUF matrix becomes in ONNX.

A quantized `Weight` (weights.py) becomes MatMulNBits inputs (packed levels, float32 scales and
zero-point corrections formed at load from the GGUF's own numbers), a dense one a MatMul, a native
one Amber's GgufMatMul over the GGUF's rows. The converter (engine/convert/graph.py) builds whole
decoders with it; the ORT re-form of a native folder (ort_form.py) rewrites GgufMatMul nodes with
the same code, so both write the same nodes from the same blocks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import TensorProto

from engine.native import OP_DOMAIN as NATIVE_DOMAIN
from engine.native import OP_NAME as NATIVE_OP

from .builder import GraphBuilder
from .weights import Scale, Weight, pack_bits, pack_nibbles
from .writer import DataWriter

MS = "com.microsoft"
SPLIT_ABOVE = 64 << 20        # weights (N*K) above which a MatMulNBits is split by rows ...
SPLIT_WEIGHTS = 32 << 20      # ... into pieces of at most this many


@dataclass
class QInits:
    """The graph values of one quantized weight: MatMulNBits inputs and what the embedding gathers."""
    w: Weight                                   # metadata only once written (arrays released)
    matmuls: list[tuple[str, int, str, str | None]] = field(default_factory=list)  # (B, bits, scales, zp)
    correction: str | None = None               # float32 [nb, N]: added as blocksum(x) @ correction
    stored: list[tuple[str, int, int]] = field(default_factory=list)  # (packed levels, bits, multiplier)
    scale2d: str = ""                           # float32 [N, nb]
    offset2d: str | None = None                 # float32 [N, nb]
    gather_shift: int = 0                       # added to the stored levels (the center moves with it)


def pack_nibbles_pairs(levels: np.ndarray) -> np.ndarray:
    """uint8 levels [N, 2m] -> [N * m] bytes, low nibble first (MatMulNBits' zero points)."""
    packed: np.ndarray = (levels[:, 0::2] | (levels[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
    return packed


def packed_zero_points(values: np.ndarray, bits: int) -> np.ndarray:
    """uint8 zero points [N, nb] -> MatMulNBits' packed zero points (each row padded to whole bytes)."""
    per = 8 // bits
    pad = (-values.shape[1]) % per
    if pad:
        values = np.concatenate([values, np.zeros((values.shape[0], pad), np.uint8)], axis=1)
    return pack_bits(values, bits).reshape(-1)


class ModelGraph(GraphBuilder):
    """The decoder's graph: the builder plus the GGUF weights' forms (MatMulNBits, GgufMatMul, dense)."""

    def __init__(self, accuracy_level: int, writer: DataWriter | None = None) -> None:
        super().__init__(writer)
        self.accuracy_level = accuracy_level
        self.scale_parts: dict[str, tuple[str, str | None, int]] = {}   # scale_value's stored parts
        self.native = False      # some linear is a GgufMatMul: the graph imports the ai.amber domain

    # ---- weight preparation: compact on disk, float32 at load -------------------------------
    # These nodes take only initializers, so ONNX Runtime's constant folding computes them once
    # when the session is made (the same float32 products llama.cpp's dequantizer forms); the
    # file keeps the GGUF's own float16 numbers and small integers.
    def scale_value(self, name: str, s: Scale, n: int, nb: int, tag: str) -> str:
        """float32 [N, nb] named `name` from a compact `Scale`."""
        if s.factor is None:
            if s.base.dtype == np.float32:
                return self.init(name, s.base.reshape(n, nb), tag)
            stored = self.init(name + "_f16", s.base, tag)
            self.scale_parts[name] = (stored, None, 1)
            return self.op1("Cast", [stored], to=TensorProto.FLOAT, outputs=[name])
        g = s.group
        self.scale_parts[name] = (name + "_base", name + "_factor", g)
        base = self.op1("Cast", [self.init(name + "_base", s.base, tag)], to=TensorProto.FLOAT)
        factor = self.op1("Cast", [self.init(name + "_factor", s.factor, tag)], to=TensorProto.FLOAT)
        prod = self.op1("Mul", [self.op1("Reshape", [base, self.const([n, nb // g, 1])]),
                                self.op1("Reshape", [factor, self.const([n, nb // g, g])])])
        return self.op1("Reshape", [prod, self.const([n, nb])], outputs=[name])

    def gathered_scale(self, name: str, ids: str, n: int, nb: int) -> str:
        """Rows `ids` of the float32 [N, nb] value `name` as [B, S, nb, 1], formed from the stored
        compact parts of those rows only (the same float32 products), so the whole float32 table
        is never needed at run time (the embedding's: 58 MiB at 1.5B)."""
        parts = self.scale_parts.get(name)
        if parts is None:
            return self.op1("Gather", [self.op1("Reshape", [name, self.const([n, nb, 1])]), ids])
        base_name, factor_name, g = parts
        base = self.op1("Cast", [self.op1("Gather", [base_name, ids])], to=TensorProto.FLOAT)
        if factor_name is None:
            return self.op1("Unsqueeze", [base, self.const([-1])])
        factor = self.op1("Cast", [self.op1("Gather", [factor_name, ids])], to=TensorProto.FLOAT)
        prod = self.op1("Mul", [self.op1("Reshape", [base, self.const([0, 0, nb // g, 1])]),
                                self.op1("Reshape", [factor, self.const([0, 0, nb // g, g])])])
        return self.op1("Reshape", [prod, self.const([0, 0, nb, 1])])

    def unpack(self, packed: str, bits: int, shape: list[int]) -> str:
        """Packed levels [.., bytes] -> uint8 levels reshaped to `shape` (first value lowest bits)."""
        if bits == 8:
            return self.op1("Reshape", [packed, self.const(shape)])
        mask = self.const((1 << bits) - 1, np.uint8)
        parts = []
        for j in range(8 // bits):
            v = packed if j == 0 else self.op1("BitShift", [packed, self.const(bits * j, np.uint8)], direction="RIGHT")
            if j < 8 // bits - 1:
                v = self.op1("BitwiseAnd", [v, mask])
            parts.append(self.op1("Unsqueeze", [v, self.const([-1])]))
        return self.op1("Reshape", [self.op1("Concat", parts, axis=-1), self.const(shape)])

    def fill(self, value: int, shape: list[int], name: str | None = None) -> str:
        """A uint8 array of one value, formed at load (nothing stored but the value)."""
        return self.op1("Expand", [self.const(value, np.uint8), self.const(shape)],
                        outputs=[name] if name else None)

    def nibble_plane(self, levels: str, shape: list[int], name: str | None = None) -> str:
        """uint8 levels 0..15 [N, nb, blk] -> MatMulNBits' 4-bit B [N, nb, blk/2], low nibble first."""
        n, nb, blk = shape
        pairs = self.op1("Reshape", [levels, self.const([n, nb * blk // 2, 2])])
        lo = self.op1("Gather", [pairs, self.const(0)], axis=2)
        hi = self.op1("Gather", [pairs, self.const(1)], axis=2)
        packed = self.op1("BitwiseOr", [lo, self.op1("BitShift", [hi, self.const(4, np.uint8)], direction="LEFT")])
        return self.op1("Reshape", [packed, self.const([n, nb, blk // 2])], outputs=[name] if name else None)

    def widen_to_nibbles(self, packed: str, bits: int, shape: list[int], name: str) -> str:
        """A plane of 1- or 2-bit levels (first value lowest) -> MatMulNBits' 4-bit B [N, nb, blk/2]:
        each output byte takes two neighbouring levels straight from the packed bytes (a quarter of
        the work of unpacking to one byte per level and packing again)."""
        n, nb, blk = shape
        mask = self.const((1 << bits) - 1, np.uint8)
        parts = []
        for t in range(8 // bits // 2):
            def level(j: int) -> str:
                v = packed if j == 0 else self.op1("BitShift", [packed, self.const(j * bits, np.uint8)],
                                                   direction="RIGHT")
                return self.op1("BitwiseAnd", [v, mask])
            high = self.op1("BitShift", [level(2 * t + 1), self.const(4, np.uint8)], direction="LEFT")
            parts.append(self.op1("Unsqueeze", [self.op1("BitwiseOr", [level(2 * t), high]), self.const([-1])]))
        return self.op1("Reshape", [self.op1("Concat", parts, axis=-1), self.const([n, nb, blk // 2])],
                        outputs=[name])

    def zero_points_u4(self, scale2d: str, offset2d: str, center: int, n: int, nb: int,
                       prefix: str) -> tuple[str, str]:
        """The nearest integer zero point per block, clip(round(center + offset/scale), 0, 15) (0 where
        the scale is 0), formed at load: (MatMulNBits' packed uint4 zero points, their float32 values)."""
        dead = self.op1("Equal", [scale2d, self.const(0.0, np.float32)])
        safe = self.op1("Where", [dead, self.const(1.0, np.float32), scale2d])
        z = self.op1("Add", [self.const(float(center), np.float32), self.op1("Div", [offset2d, safe])])
        z = self.op1("Clip", [self.op1("Round", [z]), self.const(0.0, np.float32), self.const(15.0, np.float32)])
        z = self.op1("Where", [dead, self.const(0.0, np.float32), z])
        zint = self.op1("Cast", [z], to=TensorProto.UINT8)
        if nb % 2:
            zint = self.op1("Concat", [zint, self.fill(0, [n, 1])], axis=1)
        packed = self.nibble_plane(zint, [n, 1, nb + nb % 2])
        return self.op1("Reshape", [packed, self.const([-1])], outputs=[f"{prefix}.zero_points_u4"]), z

    def quant_inits(self, prefix: str, w: Weight) -> QInits:
        """Writes a quantized weight's initializers and the (folded) values MatMulNBits takes.

        The file holds the GGUF's own information only: levels of more than 4 bits as a 4-bit low
        plane and a (bits-4)-bit high plane, zero points and constant planes as nodes. The kernels'
        forms (8-bit planes, 4-bit high planes, packed zero points) are made from them at load
        (engine/runtime/prefold.py, in numpy; or ONNX Runtime's constant folding)."""
        assert w.levels is not None and w.scale is not None
        tag, n, nb, blk = w.qtype or "other", w.n, w.nb, w.block
        q = QInits(w)
        q.scale2d = self.scale_value(f"{prefix}.scale_values", w.scale, n, nb, tag)
        if w.offset is not None:
            q.offset2d = self.scale_value(f"{prefix}.offset_values", w.offset, n, nb, tag)
        flat = self.op1("Reshape", [q.scale2d, self.const([-1])], outputs=[f"{prefix}.scales"])
        fast = self.accuracy_level != 0
        kernel_zero: Any = None          # the zero point the kernels apply in total (int or value name)
        if w.qbits == 4:
            b = self.init(f"{prefix}.qweight", pack_nibbles(w.levels), tag)
            q.stored = [(b, 4, 1)]
            zp = None
            kernel_zero = 8
            if fast and q.offset2d is not None:
                # int8 activations: keep the kernel's part small, the nearest integer zero point.
                zp, kernel_zero = self.zero_points_u4(q.scale2d, q.offset2d, w.center, n, nb, prefix)
            q.matmuls = [(b, 4, flat, zp)]
        elif w.qbits == 8 and fast:
            # One 8-bit MatMulNBits (ORT's int8 kernel), default zero point 128: Q8_0 as is.
            b = self.init(f"{prefix}.qweight", pack_bits(w.levels, 8), tag)
            q.stored = [(b, 8, 1)]
            q.matmuls = [(b, 8, flat, None)]
            kernel_zero = 128
        else:
            # Levels of 5, 6 or 8 bits: q = 16*hi + lo, stored as a 4-bit low plane and a high plane of
            # bits-4 bits (the GGUF's bytes, rearranged).
            high_bits = 4 if w.qbits == 8 else w.qbits - 4
            hi = self.init(f"{prefix}.qweight_hi", pack_bits(w.levels >> 4, high_bits), tag)
            lo = self.init(f"{prefix}.qweight_lo", pack_nibbles(w.levels & 0x0F), tag)
            q.stored = [(hi, high_bits, 16), (lo, 4, 1)]
            shape = [n, nb, blk]
            if fast:
                # One 8-bit MatMulNBits (ORT's int8 kernel) on (lo | hi << 4) + 128 - center, formed
                # at load, with its default zero point 128: the kernel form of Q8_0. (Two 4-bit
                # matmuls, or a 2-bit one for the high part, measured 2-5x slower on this kernel.)
                high = self.op1("BitShift", [self.unpack(hi, high_bits, shape), self.const(4, np.uint8)],
                                direction="LEFT")
                levels = self.op1("BitwiseOr", [self.unpack(lo, 4, shape), high])
                b = self.op1("Add", [levels, self.const(128 - w.center, np.uint8)], outputs=[f"{prefix}.qweight"])
                q.matmuls = [(b, 8, flat, None)]
                kernel_zero = w.center
            else:
                # Exact mode: two 4-bit matmuls with float32 activations, zero points chosen so that
                # 16*z_hi + z_lo is the center (no correction for the symmetric types). ORT 1.31's 2-bit
                # CPU kernel dequantizes on every call at accuracy level 0 (24.6 ms against 0.18 ms for
                # 4-bit at 4864x896), so the high plane is widened to 4 bits at load.
                hi4 = hi if high_bits == 4 else self.widen_to_nibbles(hi, high_bits, shape, f"{prefix}.qweight_hi4")
                z_hi = 8 if w.qbits == 8 else (2 if w.center == 32 else 1)
                hi_scales = self.op1("Mul", [flat, self.const(16.0, np.float32)])
                zbytes = [n * ((nb + 1) // 2)]
                zp_hi = None if z_hi == 8 else self.fill(z_hi | (z_hi << 4), zbytes, f"{prefix}.zero_points_hi")
                zp_lo = self.fill(0, zbytes, f"{prefix}.zero_points_lo")
                q.matmuls = [(hi4, 4, hi_scales, zp_hi), (lo, 4, flat, zp_lo)]
                kernel_zero = 16 * z_hi
        # Correction per block: what the kernels computed, s*(l - kz), vs w = s*(l - c) - offset.
        if isinstance(kernel_zero, str) or kernel_zero != w.center or w.offset is not None:
            if isinstance(kernel_zero, str):
                diff = self.op1("Mul", [q.scale2d, self.op1("Sub", [kernel_zero,
                                                                    self.const(float(w.center), np.float32)])])
            else:
                diff = self.op1("Mul", [q.scale2d, self.const(float(kernel_zero - w.center), np.float32)])
            if q.offset2d is not None:
                diff = self.op1("Sub", [diff, q.offset2d])
            q.correction = self.op1("Transpose", [diff], perm=[1, 0], outputs=[f"{prefix}.zp_correction"])
        w.release()
        return q

    def matmul_nbits(self, x: str, w: Weight, b: str, bits: int, scales: str, zp: str | None,
                     split: bool = True) -> str:
        """One MatMulNBits, or for a very large weight (the lm_head) several over row ranges whose
        outputs are concatenated: ONNX Runtime holds a weight's unpacked and re-packed copies at
        once while it re-packs it at load (measured +280 MiB for the 151936x1536 head of a 1.5B
        model), so smaller pieces keep the load peak down. Same arithmetic, row by row."""
        level, nb = self.accuracy_level, w.nb
        pieces = -(-w.n * w.k // SPLIT_WEIGHTS) if split and w.n * w.k > SPLIT_ABOVE else 1
        if pieces <= 1:
            return self.op1("MatMulNBits", [x, b, scales] + ([zp] if zp else []), domain=MS, K=w.k,
                            N=w.n, bits=bits, block_size=w.block, accuracy_level=level)
        rows = -(-w.n // pieces)
        zrow = -(-nb * bits // 8)          # packed zero-point bytes per row (rows padded to bytes)
        outs = []
        for r0 in range(0, w.n, rows):
            r1 = min(w.n, r0 + rows)

            def part(name: str, per_row: int, r0: int = r0, r1: int = r1) -> str:
                return self.op1("Slice", [name, self.const([r0 * per_row]), self.const([r1 * per_row]),
                                          self.const([0])])
            ins = [x, part(b, 1), part(scales, nb)] + ([part(zp, zrow)] if zp else [])
            outs.append(self.op1("MatMulNBits", ins, domain=MS, K=w.k, N=r1 - r0, bits=bits,
                                 block_size=w.block, accuracy_level=level))
        return self.op1("Concat", outs, axis=-1)

    def gguf_matmul(self, x: str, w: Weight, prefix: str) -> str:
        """Amber's own op over the GGUF's rows (native_form.py): X @ dequant(W).T, llama.cpp's numerics."""
        assert w.raw is not None
        b = self.init(f"{prefix}.gguf_rows", w.raw, w.qtype or "other")
        self.native = True
        y = self.op1(NATIVE_OP, [x, b], domain=NATIVE_DOMAIN, ggml_type=w.ggml_type, K=w.k, N=w.n)
        w.release()
        return y

    def _block_sums(self, x: str, w: Weight) -> str:
        blocks = self.op1("Reshape", [x, self.const([0, 0, w.nb, w.block])])
        return self.op1("ReduceSum", [blocks, self.const([-1])], keepdims=0)      # [B, S, nb]

    def linear(self, x: str, w: Weight, prefix: str, bias: np.ndarray | None = None,
               params: QInits | None = None) -> str:
        if w.kind == "native":
            y = self.gguf_matmul(x, w, prefix)
        elif w.kind == "dense":
            assert w.dense is not None
            wt = self.init(f"{prefix}.weight", np.ascontiguousarray(w.dense.T), w.qtype or "other")
            if w.dense.dtype == np.float16:
                wt = self.op1("Cast", [wt], to=TensorProto.FLOAT)
            y = self.op1("MatMul", [x, wt])
            w.release()
        else:
            q = params or self.quant_inits(prefix, w)
            w = q.w
            outs = []
            for b, bits, scales, zp in q.matmuls:
                outs.append(self.matmul_nbits(x, w, b, bits, scales, zp, split=q.correction is None))
            y = outs[0] if len(outs) == 1 else self.op1("Add", outs)
            if q.correction is not None:
                # Per block, the kernels' zero point z0 differs from the weight's: the difference is
                # added back exactly as sum_b blocksum(x)_b * correction_b (ORT's CPU kernel is ~10x
                # slower with float zero points).
                y = self.op1("Add", [y, self.op1("MatMul", [self._block_sums(x, w), q.correction])])
        if bias is not None:
            y = self.op1("Add", [y, self.init(f"{prefix}.bias", bias.astype(np.float32))])
        return y

    def linear_group(self, x: str, parts: list[Weight], prefixes: list[str],
                     biases: list[np.ndarray | None]) -> list[str]:
        """Linears over the same input whose weights `concat_rows` cannot stack (different GGUF
        types): one set of MatMulNBits when every part runs as the same kernel form — the same
        planes (bits) in the same order, no correction: fast mode's one 8-bit plane (Q5_0, Q6_K with
        blocks of 32, Q8_0), exact mode's two 4-bit planes — with the parts' planes, scales and zero
        points concatenated at load; otherwise one linear per part. What is stored is each part's
        own form either way (a default zero point is written out only where another part has one)."""
        qs = [self.quant_inits(pre, w) if w.kind == "quant" else None
              for w, pre in zip(parts, prefixes, strict=True)]
        qq = [q for q in qs if q is not None and q.correction is None]
        forms = {(q.w.k, q.w.block, tuple(bits for _, bits, _, _ in q.matmuls)) for q in qq}
        if len(parts) < 2 or len(qq) != len(parts) or len(forms) != 1:
            return [self.linear(x, w, pre, bias, params=q)
                    for w, pre, bias, q in zip(parts, prefixes, biases, qs, strict=True)]
        k, blk, plane_bits = forms.pop()
        nb, n = k // blk, sum(q.w.n for q in qq)
        outs = []
        for j, bits in enumerate(plane_bits):
            planes = [self.op1("Reshape", [q.matmuls[j][0], self.const([q.w.n, nb, blk * bits // 8])]) for q in qq]
            scales = [self.op1("Reshape", [q.matmuls[j][2], self.const([-1])]) for q in qq]
            inputs = [x, self.op1("Concat", planes, axis=0), self.op1("Concat", scales, axis=0)]
            if any(q.matmuls[j][3] for q in qq):
                zps = [q.matmuls[j][3] or self.init(
                    f"{pre}.zero_points_default{j}",
                    packed_zero_points(np.full((q.w.n, nb), 1 << (bits - 1), np.uint8), bits))
                       for q, pre in zip(qq, prefixes, strict=True)]
                inputs.append(self.op1("Concat", [self.op1("Reshape", [z, self.const([-1])]) for z in zps], axis=0))
            outs.append(self.op1("MatMulNBits", inputs, domain=MS, K=k, N=n, bits=bits, block_size=blk,
                                 accuracy_level=self.accuracy_level))
        y = outs[0] if len(outs) == 1 else self.op1("Add", outs)
        if any(b is not None for b in biases):
            bias = np.concatenate([np.zeros(q.w.n, np.float32) if b is None else b.astype(np.float32)
                                   for q, b in zip(qq, biases, strict=True)])
            y = self.op1("Add", [y, self.init(f"{prefixes[0]}.group_bias", bias)])
        return [y]

    def embedding(self, ids: str, w: Weight, params: QInits | None) -> str:
        """Gathers rows and dequantizes only those (the table stays quantized in memory)."""
        if w.kind == "dense":
            assert w.dense is not None
            table = self.init("model.embed_tokens.weight", w.dense, w.qtype or "other")
            is16 = w.dense.dtype == np.float16
            w.release()
            rows = self.op1("Gather", [table, ids])
            return self.op1("Cast", [rows], to=TensorProto.FLOAT) if is16 else rows
        assert params is not None
        w = params.w
        nb, blk = w.nb, w.block
        levels = None
        for packed, bits, mult in params.stored:
            part = self.op1("Cast", [self.unpack(self.op1("Gather", [packed, ids]), bits, [0, 0, nb, blk])],
                            to=TensorProto.FLOAT)
            if mult != 1:
                part = self.op1("Mul", [part, self.const(float(mult), np.float32)])
            levels = part if levels is None else self.op1("Add", [levels, part])
        assert levels is not None
        levels = self.op1("Sub", [levels, self.const(float(w.center + params.gather_shift), np.float32)])
        values = self.op1("Mul", [levels, self.gathered_scale(params.scale2d, ids, w.n, nb)])
        if params.offset2d is not None:
            values = self.op1("Sub", [values, self.gathered_scale(params.offset2d, ids, w.n, nb)])
        return self.op1("Reshape", [values, self.const([0, 0, w.k])])

    def lm_head(self, x: str, w: Weight, params: QInits | None, tied: bool, dense16: bool = False) -> str:
        if w.kind == "dense" and tied:
            # The embedding table is [V, K]: multiply by its transpose without a second copy.
            flat = self.op1("Reshape", [x, self.const([-1, w.k])])
            table = "model.embed_tokens.weight"
            if dense16:
                table = self.op1("Cast", [table], to=TensorProto.FLOAT)
            y = self.op1("Gemm", [flat, table], transB=1)
            shape = self.op1("Concat", [self.op1("Slice", [self.op1("Shape", [x]), self.const([0]), self.const([2])]),
                                        self.const([w.n])], axis=0)
            return self.op1("Reshape", [y, shape], outputs=["logits"])
        out = self.linear(x, w, "lm_head", params=params)
        return self.op1("Identity", [out], outputs=["logits"])
