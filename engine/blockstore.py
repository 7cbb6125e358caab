"""The content-addressed KV block store under the state directory.

A token history is cut into fixed blocks; a block's key is a BLAKE2b hash chain over
(model fingerprint, cache salt for the first block, previous block's key, the block's token ids).
Equal prefixes under the same model and salt give equal keys, so a block shared by several
sessions (same system prompt, a branched chat) is stored once.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .kvfile import KVShape, read_kv_file, write_kv_file

DEFAULT_BLOCK_TOKENS = 128
_KEY_DOMAIN = b"amber-kv-block-v1"


def block_keys(fingerprint: str, salt: str | None, tokens: Sequence[int], block_tokens: int) -> list[str]:
    """Keys of the full blocks of `tokens` (a partial last block has none)."""
    keys: list[str] = []
    prev = b""
    arr = np.asarray(tokens, dtype="<i4")
    for start in range(0, len(arr) - block_tokens + 1, block_tokens):
        h = hashlib.blake2b(digest_size=20)
        h.update(_KEY_DOMAIN)
        if not keys:
            h.update(fingerprint.encode())
            # No salt is its own namespace, distinct from every salt (including "").
            h.update(b"\x00" if salt is None else b"\x01" + salt.encode("utf-8"))
        else:
            h.update(prev)
        h.update(arr[start:start + block_tokens].tobytes())
        prev = h.digest()
        keys.append(prev.hex())
    return keys


class BlockStore:
    """Block files on disk: `blocks/<2 hex>/<key>.kvb`."""

    def __init__(self, root: Path, shape: KVShape, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> None:
        self.root = Path(root) / "blocks"
        self.shape = shape
        self.block_tokens = block_tokens

    def keys_for(self, tokens: Sequence[int], salt: str | None) -> list[str]:
        return block_keys(self.shape.fingerprint, salt, tokens, self.block_tokens)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.kvb"

    def has(self, key: str) -> bool:
        return self.path(key).is_file()

    def write(self, key: str, token_ids: Sequence[int], payload: np.ndarray) -> int:
        return write_kv_file(self.path(key), self.shape, token_ids, payload, {"key": key})

    def read(self, key: str, token_ids: Sequence[int]) -> np.ndarray:
        return read_kv_file(self.path(key), self.shape, token_ids)

    def remove(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def size(self, key: str) -> int:
        try:
            return self.path(key).stat().st_size
        except OSError:
            return 0

    def keys_on_disk(self) -> Iterator[str]:
        if not self.root.is_dir():
            return
        for sub in self.root.iterdir():
            if sub.is_dir():
                for f in sub.iterdir():
                    if f.suffix == ".kvb":
                        yield f.stem

    def remove_temp_files(self) -> int:
        """Crash leftovers: temp files of interrupted writes."""
        n = 0
        if self.root.is_dir():
            for dirpath, _, files in os.walk(self.root):
                for name in files:
                    if name.endswith(".tmp"):
                        Path(dirpath, name).unlink(missing_ok=True)
                        n += 1
        return n
