"""The KV cache of one sequence: per-layer key/value buffers and the tokens they hold."""
from __future__ import annotations

import numpy as np

from .model import KVLayout

MIN_CAPACITY = 256


class KVCache:
    """Holds `len(tokens)` positions of keys and values for every layer.

    With a GroupQueryAttention graph the buffers are preallocated [1, kv_heads, capacity, head_dim]
    and bound as both past and present, so a decode step writes one row in place; capacity grows
    geometrically. With a plain optimum graph the buffers are exactly [1, kv_heads, len, head_dim],
    replaced by each step's presents.
    """

    def __init__(self, layout: KVLayout, capacity: int = 0) -> None:
        self.layout = layout
        self.tokens: list[int] = []
        self.keys: list[np.ndarray] = []
        self.values: list[np.ndarray] = []
        self._ort_values: list[tuple[object, object]] | None = None   # cached OrtValue views
        self._alloc(capacity if layout.shared_buffer else 0)

    # ---- size -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    @property
    def nbytes(self) -> int:
        """Bytes held in memory (the whole capacity, not only the valid positions)."""
        return sum(a.nbytes for a in self.keys) + sum(a.nbytes for a in self.values)

    def _shape(self, n: int) -> tuple[int, int, int, int]:
        return (1, self.layout.kv_heads, n, self.layout.head_dim)

    def _alloc(self, capacity: int) -> None:
        n = self.layout.n_layers
        self.keys = [np.zeros(self._shape(capacity), self.layout.dtype) for _ in range(n)]
        self.values = [np.zeros(self._shape(capacity), self.layout.dtype) for _ in range(n)]
        self._ort_values = None

    def reserve(self, needed: int) -> None:
        """Makes room for `needed` positions (shared-buffer graphs), doubling as it grows."""
        if not self.layout.shared_buffer or needed <= self.capacity:
            return
        new_cap = max(MIN_CAPACITY, self.capacity)
        while new_cap < needed:
            new_cap *= 2
        n = len(self.tokens)
        old_k, old_v = self.keys, self.values
        self._alloc(new_cap)
        for dst, src in zip(self.keys + self.values, old_k + old_v):
            dst[:, :, :n] = src[:, :, :n]

    # ---- contents ---------------------------------------------------------------------------
    def truncate(self, n: int) -> None:
        """Keeps the first n positions (regenerate / edit reuse the shared prefix)."""
        n = max(0, min(n, len(self.tokens)))
        del self.tokens[n:]
        if not self.layout.shared_buffer:
            self.keys = [k[:, :, :n] for k in self.keys]
            self.values = [v[:, :, :n] for v in self.values]

    def clear(self) -> None:
        """Frees every buffer."""
        self.tokens = []
        self._alloc(0)

    def export(self, start: int, end: int) -> np.ndarray:
        """Positions [start, end) of every layer as one array [layers, 2, kv_heads, n, head_dim]."""
        out = np.empty((self.layout.n_layers, 2, self.layout.kv_heads, end - start, self.layout.head_dim),
                       self.layout.dtype)
        for i in range(self.layout.n_layers):
            out[i, 0] = self.keys[i][0, :, start:end]
            out[i, 1] = self.values[i][0, :, start:end]
        return out

    def append_block(self, block: np.ndarray, tokens: list[int]) -> None:
        """Appends positions loaded from disk or another cache (shape as `export` returns)."""
        n0, n = len(self.tokens), block.shape[3]
        if self.layout.shared_buffer:
            self.reserve(n0 + n)
            for i in range(self.layout.n_layers):
                self.keys[i][0, :, n0:n0 + n] = block[i, 0]
                self.values[i][0, :, n0:n0 + n] = block[i, 1]
        else:
            self.keys = [np.concatenate([self.keys[i], block[i, 0][None]], axis=2) for i in range(self.layout.n_layers)]
            self.values = [np.concatenate([self.values[i], block[i, 1][None]], axis=2)
                           for i in range(self.layout.n_layers)]
        self.tokens.extend(tokens)

    def ort_values(self) -> list[tuple[object, object]]:
        """OrtValues over the buffers (no copy), rebuilt only when the buffers were reallocated."""
        if self._ort_values is None:
            import onnxruntime as ort
            self._ort_values = [(ort.OrtValue.ortvalue_from_numpy(k), ort.OrtValue.ortvalue_from_numpy(v))
                                for k, v in zip(self.keys, self.values)]
        return self._ort_values

    def set_presents(self, keys: list[np.ndarray], values: list[np.ndarray]) -> None:
        """Plain graphs: the step's presents become the cache."""
        self.keys, self.values = keys, values
        self._ort_values = None
