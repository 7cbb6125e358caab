"""KV files on disk: a self-describing header, a raw payload and a checksum, written atomically.

Layout: magic (8 bytes) | header length (u32 LE) | header JSON | padding to 64 | payload.
The header carries an XXH3-64 checksum of the payload: verifying it costs ~7 ms per 94 MB, so a
resume stays close to the disk's read bandwidth.
The payload is [layers, 2, kv_heads, tokens, head_dim] in the model's own KV dtype (lossless).
"""
from __future__ import annotations

import json
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import xxhash

from engine.base import safefs
from engine.base.safefs import open_regular
from engine.onnx.halfcast import half_to_float

MAGIC = b"AMBERKV\x00"
FORMAT_VERSION = 2      # 2: XXH3-64 payload checksum (4x faster to verify than CRC-32)
_ALIGN = 64
_IOV_MAX = 1024         # buffers per preadv (the limit on Linux and macOS)


class KVFileError(Exception):
    """A KV file failed validation; the message is the reason (shown as fallback_reason)."""


@dataclass(frozen=True)
class KVShape:
    """What a KV file must match to be usable by the loaded model."""
    fingerprint: str
    dtype: str
    n_layers: int
    kv_heads: int
    head_dim: int


def atomic_write(path: Path, chunks: Sequence[bytes | memoryview]) -> int:
    """The KV store's writes (tests count and fail them here): safefs.atomic_write, folder made first."""
    return safefs.atomic_write(path, chunks, parents=True)


def write_kv_file(path: Path, shape: KVShape, token_ids: Sequence[int], payload: np.ndarray,
                  extra: dict[str, Any] | None = None) -> int:
    """Writes one KV file atomically; returns its size in bytes."""
    data = np.ascontiguousarray(payload, dtype=np.dtype(shape.dtype))   # a float16 store converts here
    view = memoryview(data.data).cast("B")
    header = {"version": FORMAT_VERSION, "fingerprint": shape.fingerprint, "dtype": shape.dtype,
              "layers": shape.n_layers, "kv_heads": shape.kv_heads, "head_dim": shape.head_dim,
              "tokens": len(token_ids), "token_ids": [int(t) for t in token_ids],
              "xxh3": xxhash.xxh3_64_intdigest(view), **(extra or {})}
    head = json.dumps(header, separators=(",", ":")).encode()
    prefix = MAGIC + struct.pack("<I", len(head)) + head
    prefix += b"\0" * (-len(prefix) % _ALIGN)
    return atomic_write(path, [prefix, view])


def _open_validated(f: Any, path: Path, shape: KVShape, token_ids: Sequence[int] | None) -> dict[str, Any]:
    """Reads and checks the header; leaves `f` at the payload."""
    if f.read(8) != MAGIC:
        raise KVFileError(f"{path.name}: not an Amber KV file")
    (n,) = struct.unpack("<I", f.read(4))
    if n > 16 << 20:
        raise KVFileError(f"{path.name}: corrupt header")
    try:
        header: dict[str, Any] = json.loads(f.read(n))
    except (ValueError, RecursionError):
        raise KVFileError(f"{path.name}: corrupt header") from None
    if not isinstance(header, dict):
        raise KVFileError(f"{path.name}: corrupt header")
    f.seek((12 + n + _ALIGN - 1) // _ALIGN * _ALIGN)
    if header.get("version") != FORMAT_VERSION:
        raise KVFileError(f"{path.name}: format version {header.get('version')} (this Amber reads {FORMAT_VERSION})")
    if header.get("fingerprint") != shape.fingerprint:
        raise KVFileError(f"{path.name}: made by another model")
    if (header.get("dtype"), header.get("layers"), header.get("kv_heads"), header.get("head_dim")) != (
            shape.dtype, shape.n_layers, shape.kv_heads, shape.head_dim):
        raise KVFileError(f"{path.name}: KV shape or dtype differs from the model's")
    if token_ids is not None and header.get("token_ids") != [int(t) for t in token_ids]:
        raise KVFileError(f"{path.name}: holds other tokens than expected")
    return header


def _read_scattered(f: Any, bufs: list[memoryview]) -> int:
    """Fills `bufs` in order from the file's current position; returns the offset after them.
    One `preadv` per IOV_MAX buffers where the OS has it (a block is 180 small views: one system
    call instead of 180), `readinto` elsewhere. Raises `KVFileError` if the file ends early."""
    offset: int = f.tell()
    preadv = getattr(os, "preadv", None)     # not on Windows
    pending = list(bufs)
    i = 0
    while i < len(pending):
        if preadv is None:
            f.seek(offset)
            batch = pending[i:i + 1]
            got: int = f.readinto(batch[0])
        else:
            batch = pending[i:i + _IOV_MAX]
            got = preadv(f.fileno(), batch, offset)
        if not got:
            name = f.name if isinstance(f.name, str) else getattr(f, "amber_path", "KV file")
            raise KVFileError(f"{Path(name).name}: truncated")
        offset += got
        for buf in batch:               # a short read leaves the rest of a buffer for the next call
            if got >= len(buf):
                got -= len(buf)
                i += 1
            else:
                pending[i] = buf[got:]
                break
    return offset


_scratch_buffers = threading.local()


def _scratch(name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A reusable buffer of this thread's (contents undefined), grown when too small."""
    size = int(np.prod(shape)) * dtype.itemsize
    buf = getattr(_scratch_buffers, name, None)
    if buf is None or buf.nbytes < size:
        buf = np.empty(size, np.uint8)
        setattr(_scratch_buffers, name, buf)
    return buf[:size].view(dtype).reshape(shape)


def read_kv_into(path: Path, shape: KVShape, token_ids: Sequence[int], views: Sequence[np.ndarray]) -> None:
    """Reads a KV file straight into `views` — one contiguous [tokens, head_dim] array per
    (layer, key/value, head), in payload order — with no intermediate copy. Raises `KVFileError`;
    then the views hold garbage, which the caller never marks valid. Views of another dtype than
    the file's (a float16 store under a float32 cache) are filled through one converting copy."""
    stored = np.dtype(shape.dtype)
    if any(v.dtype != stored for v in views):
        # Through per-thread scratch buffers: fresh ones for every block cost page faults.
        payload_shape = (shape.n_layers, 2, shape.kv_heads, len(token_ids), shape.head_dim)
        saved = _scratch("stored", payload_shape, stored)
        read_kv_into(path, shape, token_ids, [saved])
        if stored == np.float16 and all(v.dtype == np.float32 for v in views):
            saved = half_to_float(saved,   # ~15x numpy's cast
                                  _scratch("converted", payload_shape, np.dtype(np.float32)))
        flat = saved.reshape(-1)
        pos = 0
        for view in views:
            view[...] = flat[pos:pos + view.size].reshape(view.shape)
            pos += view.size
        return
    try:
        with open_regular(path) as f:      # never a FIFO (a hang) or through a symlink
            header = _open_validated(f, path, shape, token_ids)
            if header.get("tokens") != len(token_ids):
                raise KVFileError(f"{path.name}: holds other tokens than expected")
            bufs = [memoryview(view.data).cast("B") for view in views]
            end = _read_scattered(f, bufs)
            if end < os.fstat(f.fileno()).st_size:
                raise KVFileError(f"{path.name}: trailing bytes")
            hasher = xxhash.xxh3_64()
            for buf in bufs:
                hasher.update(buf)
    except FileNotFoundError:
        raise KVFileError(f"{path.name}: missing") from None
    except (OSError, struct.error) as exc:
        raise KVFileError(f"{path.name}: unreadable ({exc})") from None
    if hasher.intdigest() != header.get("xxh3"):
        raise KVFileError(f"{path.name}: checksum mismatch (the file is damaged)")


def read_kv_file(path: Path, shape: KVShape, token_ids: Sequence[int]) -> np.ndarray:
    """Reads and validates a KV file into a new [layers, 2, kv_heads, tokens, head_dim] array."""
    out = np.empty((shape.n_layers, 2, shape.kv_heads, len(token_ids), shape.head_dim), dtype=shape.dtype)
    read_kv_into(path, shape, token_ids, [out])    # the payload is exactly this array, in order
    return out


def looks_like_kv_file(path: Path) -> bool:
    """A cheap check of the magic and header (not the payload): is this an Amber KV file at all?"""
    try:
        with open_regular(path) as f:
            if f.read(8) != MAGIC:
                return False
            (n,) = struct.unpack("<I", f.read(4))
            header = json.loads(f.read(n)) if n <= 16 << 20 else None
    except (OSError, ValueError, struct.error, RecursionError):
        return False
    return isinstance(header, dict) and header.get("version") == FORMAT_VERSION
