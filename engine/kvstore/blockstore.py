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
from typing import Callable, Iterator, Sequence

import numpy as np

from engine.kvstore.kvfile import KVFileError, KVShape, read_kv_file, read_kv_into, write_kv_file
from engine.base.safefs import UnsafePathError, check_inside, is_regular, make_folder, unlink_inside

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
    """Block files on disk: `blocks/<2 hex>/<key>.kvb`. Nothing is read, written or removed
    through a symlinked folder below the state folder (`blocks/` itself included)."""

    def __init__(self, root: Path, shape: KVShape, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> None:
        self.state = Path(root)
        self.root = self.state / "blocks"
        self.shape = shape
        self.block_tokens = block_tokens

    def keys_for(self, tokens: Sequence[int], salt: str | None) -> list[str]:
        return block_keys(self.shape.fingerprint, salt, tokens, self.block_tokens)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.kvb"

    def has(self, key: str) -> bool:
        return is_regular(self.path(key))      # a folder, FIFO or symlink there is no block

    def write(self, key: str, token_ids: Sequence[int], payload: np.ndarray) -> int:
        make_folder(self.state, self.path(key).parent)      # never into a symlinked folder
        return write_kv_file(self.path(key), self.shape, token_ids, payload, {"key": key})

    def _checked(self, key: str) -> Path:
        """The key's path, refused unless it is a bare key inside the store with no symlinked folder."""
        path = self.path(key)
        if len(key) != 40 or not all(c in "0123456789abcdef" for c in key):
            raise KVFileError(f"{path.name}: not a block key")
        try:
            check_inside(self.state, path)
        except UnsafePathError as exc:
            raise KVFileError(str(exc)) from None
        return path

    def read(self, key: str, token_ids: Sequence[int]) -> np.ndarray:
        return read_kv_file(self._checked(key), self.shape, token_ids)

    def read_into(self, key: str, token_ids: Sequence[int], views: Sequence[np.ndarray]) -> None:
        read_kv_into(self._checked(key), self.shape, token_ids, views)

    def remove(self, key: str) -> None:
        unlink_inside(self.state, self.path(key), empty_dirs=True)

    def size(self, key: str) -> int:
        try:
            return self.path(key).stat().st_size
        except OSError:
            return 0

    def _block_files(self) -> Iterator[Path]:
        if self.root.is_dir():
            for dirpath, _, files in os.walk(self.root):
                for name in files:
                    if name.endswith(".kvb"):
                        yield Path(dirpath, name)

    def _is_key_path(self, path: Path) -> bool:
        key = path.stem
        return len(key) == 40 and all(c in "0123456789abcdef" for c in key) and path == self.path(key)

    def keys_on_disk(self) -> Iterator[str]:
        """Keys of the well-formed block files (name = key, in its two-letter folder)."""
        for path in self._block_files():
            if self._is_key_path(path):
                yield path.stem

    def remove_misplaced_files(self) -> int:
        """`.kvb` files that are not named and placed as a block key would be: strays."""
        n = 0
        for path in self._block_files():
            if not self._is_key_path(path) and unlink_inside(self.state, path):
                n += 1
        return n

    def remove_temp_files(self, pid_alive: Callable[[int], bool] = lambda pid: False) -> int:
        """Crash leftovers: temp files (`.<name>.<pid>.tmp`) of interrupted writes, unless their
        writer is still alive (`pid_alive`): then the file is a write in progress."""
        n = 0
        if self.root.is_dir():
            for dirpath, _, files in os.walk(self.root):
                for name in files:
                    if name.endswith(".tmp"):
                        pid = name.rsplit(".", 2)[-2] if name.count(".") >= 2 else ""
                        if pid.isdigit() and pid_alive(int(pid)):
                            continue
                        if unlink_inside(self.state, Path(dirpath, name)):
                            n += 1
        return n
