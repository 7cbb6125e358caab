"""The Q8_K activation quantizer's SIMD path (engine/native/src/x86/qk_quant_x86.c) writes the bytes
of the portable one (qk.c, forced with amber_set_isa("scalar")) for every value kind a prompt can
hold: ordinary, huge and tiny magnitudes, exact .5 ties, zero blocks, NaN and infinities. The
prefill kernels for m >= 16 read these bytes, so the same bytes keep the default model's output."""
from __future__ import annotations

import numpy as np
import pytest

from tests.engine.native.q32_lib import Lib, build

QK_TYPES = {"Q4_K": 12, "Q5_K": 13, "Q6_K": 14}


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Lib:
    path = build(tmp_path_factory.mktemp("native"))
    if path is None:
        pytest.skip("no C compiler")
    lib = Lib(path)
    yield lib
    lib.set_isa(lib.best)


def _rows(rng: np.random.Generator, k: int) -> np.ndarray:
    """Rows of one value kind each (k values)."""
    normal = rng.standard_normal(k)
    wide = rng.standard_normal(k) * 10.0 ** rng.uniform(-30, 30, k)
    ties = rng.integers(-254, 255, k) / 2.0                 # amax 127: x * (1/d) lands on .5
    special = normal.copy()
    idx = rng.integers(0, k, k // 8)
    special[idx] = rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38, 1e-45], idx.size)
    zero_block = normal.copy()
    zero_block[:256] = 0.0
    nan_block = normal.copy()
    nan_block[256:512] = np.nan
    return np.stack([normal, wide, ties, special, zero_block, nan_block]).astype(np.float32)


@pytest.mark.parametrize("name", list(QK_TYPES))
def test_simd_quantizer_writes_the_scalar_bytes(lib, name):
    qtype = QK_TYPES[name]
    simd = [i for i in lib.available_isas() if i != "scalar"] or pytest.skip("no SIMD path here")
    x = _rows(np.random.default_rng(qtype), 256 * 6)
    lib.set_isa("scalar")
    ref = lib.quantize(qtype, x)
    for isa in simd:
        lib.set_isa(isa)
        np.testing.assert_array_equal(lib.quantize(qtype, x), ref, err_msg=isa)
    lib.set_isa(lib.best)
    q = ref[:, 4:260].view(np.int8)                           # block 0's codes (d first)
    assert np.abs(q.astype(np.int32)).max() == 127 and (q[2] != 0).any()   # not trivially zero
