"""KV files read straight into scattered views: whole, in short reads, without preadv, damaged."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from engine.kvstore import kvfile
from engine.kvstore.kvfile import KVFileError, KVShape, read_kv_into, write_kv_file

SHAPE = KVShape(fingerprint="f" * 16, dtype="float32", n_layers=3, kv_heads=2, head_dim=8)
TOKENS = list(range(100, 105))


def _payload() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.standard_normal((3, 2, 2, len(TOKENS), 8)).astype(np.float32)


def _views(n_cap: int = 9) -> tuple[np.ndarray, list[np.ndarray]]:
    """Buffers laid out like the KV cache (capacity > tokens) and the payload-order views of them."""
    buf = np.full((3, 2, 2, n_cap, 8), np.nan, np.float32)
    return buf, [buf[i, kv, h, 2:2 + len(TOKENS)] for i in range(3) for kv in range(2) for h in range(2)]


@pytest.fixture(params=["preadv", "short-reads", "no-preadv"])
def read_mode(request, monkeypatch) -> str:
    if request.param == "short-reads" and hasattr(os, "preadv"):
        real = os.preadv
        monkeypatch.setattr(os, "preadv", lambda fd, bufs, off: real(fd, [bufs[0][:37]], off))  # 37 bytes a call
    elif request.param == "no-preadv":
        monkeypatch.delattr(os, "preadv", raising=False)
    return request.param


def _write_and_read_back(tmp_path: Path) -> np.ndarray:
    """Writes a payload, reads it into cache-like buffers at positions 2..6, checks it; returns them."""
    payload = _payload()
    path = tmp_path / "a.kv"
    write_kv_file(path, SHAPE, TOKENS, payload)
    buf, views = _views()
    read_kv_into(path, SHAPE, TOKENS, views)
    np.testing.assert_array_equal(buf[:, :, :, 2:7], payload)
    return buf


def test_read_into_scattered_views_round_trips(tmp_path: Path, read_mode: str) -> None:
    buf = _write_and_read_back(tmp_path)
    assert np.isnan(buf[:, :, :, :2]).all() and np.isnan(buf[:, :, :, 7:]).all()   # nothing else written


@pytest.mark.parametrize("damage", ["truncated", "trailing", "bitflip"])
def test_damaged_file_is_refused_with_its_reason(tmp_path: Path, read_mode: str, damage: str) -> None:
    path = tmp_path / "a.kv"
    write_kv_file(path, SHAPE, TOKENS, _payload())
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[:-100]
    elif damage == "trailing":
        data += b"\0"
    else:
        data[-50] ^= 0x10
    path.write_bytes(bytes(data))
    _, views = _views()
    reason = {"truncated": "truncated", "trailing": "trailing bytes", "bitflip": "checksum"}[damage]
    with pytest.raises(KVFileError, match=reason):
        read_kv_into(path, SHAPE, TOKENS, views)


def test_iov_batches_cover_more_views_than_one_call_takes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(kvfile, "_IOV_MAX", 5)      # 12 views: three preadv calls (or readinto)
    _write_and_read_back(tmp_path)


def test_half_to_float_equals_numpys_cast_on_every_float16_value() -> None:
    from engine.onnx.halfcast import half_to_float
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(256, 256)   # incl. subnormals, inf, nan
    got, want = half_to_float(every), every.astype(np.float32)
    assert got.dtype == np.float32 and got.shape == (256, 256)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))                          # -0.0 stays -0.0
    assert half_to_float(np.zeros((0, 4), np.float16)).shape == (0, 4)


def test_float16_file_read_into_float32_views(tmp_path: Path) -> None:
    shape16 = KVShape(SHAPE.fingerprint, "float16", SHAPE.n_layers, SHAPE.kv_heads, SHAPE.head_dim)
    payload = _payload()
    path = tmp_path / "h.kv"
    write_kv_file(path, shape16, TOKENS, payload)              # converted to float16 on write
    write_kv_file(tmp_path / "f.kv", SHAPE, TOKENS, payload)
    assert (tmp_path / "f.kv").stat().st_size - path.stat().st_size == payload.nbytes // 2
    buf, views = _views()
    read_kv_into(path, shape16, TOKENS, views)
    np.testing.assert_array_equal(buf[:, :, :, 2:7], payload.astype(np.float16).astype(np.float32))
    assert np.isnan(buf[:, :, :, :2]).all() and np.isnan(buf[:, :, :, 7:]).all()
