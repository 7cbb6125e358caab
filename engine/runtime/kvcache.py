"""The KV cache of one sequence: per-layer key/value buffers and the tokens they hold."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort

from engine.runtime.halfcast import half_to_float
from engine.runtime.model import KVLayout

MIN_CAPACITY = 256


class KVCache:
    """Holds `len(tokens)` positions of keys and values for every layer.

    With a GroupQueryAttention graph the buffers are preallocated [1, kv_heads, capacity, head_dim]
    and bound as both past and present, so a decode step writes one row in place; capacity grows
    geometrically. With a plain optimum graph the buffers are exactly [1, kv_heads, len, head_dim],
    replaced by each step's presents.

    `device="cuda"` keeps the buffers on the GPU between steps (shared-buffer graphs): the host
    copy exists only while something reads or writes it on the host (saving, loading, growing),
    and is freed again once uploaded.
    """

    def __init__(self, layout: KVLayout, capacity: int = 0, device: str = "cpu") -> None:
        self.layout = layout
        self.device = device if layout.shared_buffer else "cpu"
        self.tokens: list[int] = []
        self._keys: list[np.ndarray] | None = []
        self._values: list[np.ndarray] | None = []
        self._capacity = 0
        self._ort_values: list[tuple[object, object]] | None = None   # bound to the session
        self.binding: Any = None    # an (untyped) onnxruntime IOBinding with the KV bound, reused across steps
        self.logits_out: np.ndarray | None = None   # where that binding's steps write their logits
        self.pool_owner: object | None = None   # the batch pool whose slot holds the buffers (kvpool)
        self._home_capacity = 0                 # the capacity it had before joining that pool
        self._alloc(capacity if layout.shared_buffer else 0)

    # ---- host view (downloads from the device when needed) -------------------------------------
    @property
    def keys(self) -> list[np.ndarray]:
        self._to_host()
        assert self._keys is not None
        return self._keys

    @property
    def values(self) -> list[np.ndarray]:
        self._to_host()
        assert self._values is not None
        return self._values

    def _to_host(self) -> None:
        if self._keys is None:   # only on a device: the device holds the truth
            assert self._ort_values is not None
            self._keys = [k.numpy() for k, _ in self._ort_values]     # type: ignore[attr-defined]
            self._values = [v.numpy() for _, v in self._ort_values]   # type: ignore[attr-defined]

    def _host_changed(self) -> None:
        """The host arrays were modified: the bound OrtValues must be rebuilt (uploaded)."""
        self._ort_values = None
        self.binding = None     # the runner's IOBinding over those OrtValues

    # ---- size -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def nbytes(self) -> int:
        """Bytes the buffers hold (the whole capacity, not only the valid positions)."""
        per = self.layout.kv_heads * self.layout.head_dim * np.dtype(self.layout.dtype).itemsize
        if self.layout.shared_buffer:
            return 2 * self.layout.n_layers * self._capacity * per
        return 2 * self.layout.n_layers * len(self.tokens) * per

    def _shape(self, n: int) -> tuple[int, int, int, int]:
        return (1, self.layout.kv_heads, n, self.layout.head_dim)

    def _alloc(self, capacity: int) -> None:
        # One arena for every layer's keys and values: numpy backs allocations of 4 MiB and more
        # with transparent huge pages, and a layer's buffer alone is often smaller than that. With
        # 4 KiB pages, first-touch faults dominated loading a saved session (63 of 71 ms for 2048
        # tokens with the files in the page cache).
        n = self.layout.n_layers
        arena = np.zeros((2, n) + self._shape(capacity), self.layout.dtype)
        self._keys = list(arena[0])
        self._values = list(arena[1])
        self._capacity = capacity
        self.pool_owner = None      # buffers of its own again (a pool's slot is left behind)
        self._host_changed()

    def reserve(self, needed: int) -> None:
        """Makes room for `needed` positions (shared-buffer graphs): the first time just that much
        (rounded up to MIN_CAPACITY: a fresh buffer costs a page fault per page touched), then at
        least doubling, so that a growing chat is copied O(log n) times."""
        if not self.layout.shared_buffer or needed <= self._capacity:
            return
        new_cap = max(-(-needed // MIN_CAPACITY) * MIN_CAPACITY, 2 * self._capacity)
        n = len(self.tokens)
        old_k, old_v = self.keys, self.values
        self._alloc(new_cap)
        assert self._keys is not None and self._values is not None
        for dst, src in zip(self._keys + self._values, old_k + old_v, strict=True):
            dst[:, :, :n] = src[:, :, :n]

    # ---- contents ---------------------------------------------------------------------------
    def truncate(self, n: int) -> None:
        """Keeps the first n positions (regenerate / edit reuse the shared prefix)."""
        n = max(0, min(n, len(self.tokens)))
        del self.tokens[n:]
        if not self.layout.shared_buffer:
            self._keys = [k[:, :, :n] for k in self.keys]
            self._values = [v[:, :, :n] for v in self.values]
            self._host_changed()

    def clear(self) -> None:
        """Frees every buffer (host and device)."""
        self.tokens = []
        self._ort_values = None
        self._alloc(0)

    def export(self, start: int, end: int) -> np.ndarray:
        """Positions [start, end) of every layer as one array [layers, 2, kv_heads, n, head_dim]."""
        out: np.ndarray = np.empty((self.layout.n_layers, 2, self.layout.kv_heads, end - start, self.layout.head_dim),
                       self.layout.dtype)
        keys, values = self.keys, self.values
        for i in range(self.layout.n_layers):
            out[i, 0] = keys[i][0, :, start:end]
            out[i, 1] = values[i][0, :, start:end]
        return out

    def append_block(self, block: np.ndarray, tokens: list[int]) -> None:
        """Appends positions loaded from disk or another cache (shape as `export` returns)."""
        if block.dtype == np.float16 and np.dtype(self.layout.dtype) == np.float32:
            block = half_to_float(block)    # a float16 store's block: ~15x numpy's cast
        n0, n = len(self.tokens), block.shape[3]
        if self.layout.shared_buffer:
            self.reserve(n0 + n)
            keys, values = self.keys, self.values
            for i in range(self.layout.n_layers):
                keys[i][0, :, n0:n0 + n] = block[i, 0]
                values[i][0, :, n0:n0 + n] = block[i, 1]
        else:
            keys, values = self.keys, self.values
            self._keys = [np.concatenate([keys[i], block[i, 0][None]], axis=2) for i in range(self.layout.n_layers)]
            self._values = [np.concatenate([values[i], block[i, 1][None]], axis=2)
                            for i in range(self.layout.n_layers)]
        self._host_changed()
        self.tokens.extend(tokens)

    def block_views(self, start: int, n: int) -> list[np.ndarray]:
        """Writable views of positions [start, start+n) in KV-file payload order (layer, key/value,
        head), for reading saved KV straight into the buffers (shared-buffer graphs; call
        `reserve` first and `commit_loaded` after)."""
        assert self.layout.shared_buffer and start + n <= self._capacity
        keys, values = self.keys, self.values
        return [arr[0, h, start:start + n] for i in range(self.layout.n_layers)
                for arr in (keys[i], values[i]) for h in range(self.layout.kv_heads)]

    def commit_loaded(self, tokens: list[int]) -> None:
        """The positions after the current ones, filled through `block_views`, are now valid."""
        self._host_changed()
        self.tokens.extend(tokens)

    def ort_values(self) -> list[tuple[object, object]]:
        """OrtValues bound as past and present: views of the host arrays on CPU (no copy); on a GPU,
        device buffers uploaded once and then kept there between steps."""
        if self._ort_values is None:
            keys, values = self.keys, self.values
            if self.device == "cpu":
                self._ort_values = [(ort.OrtValue.ortvalue_from_numpy(k), ort.OrtValue.ortvalue_from_numpy(v))
                                    for k, v in zip(keys, values, strict=True)]
            else:
                self._ort_values = [(ort.OrtValue.ortvalue_from_numpy(k, self.device, 0),
                                     ort.OrtValue.ortvalue_from_numpy(v, self.device, 0))
                                    for k, v in zip(keys, values, strict=True)]
                self._keys = self._values = None    # the device copy is now the only one
        return self._ort_values

    def device_written(self) -> None:
        """A step wrote into the bound buffers: on a GPU any host copy is now stale."""
        if self.device != "cpu":
            self._keys = self._values = None

    def set_presents(self, keys: list[np.ndarray], values: list[np.ndarray]) -> None:
        """Plain graphs: the step's presents become the cache."""
        self._keys, self._values = keys, values
        self._host_changed()

    # ---- batched decoding (engine.runtime.kvpool) -------------------------------------------
    def adopt(self, keys: list[np.ndarray], values: list[np.ndarray], owner: object) -> None:
        """Moves the valid positions into the given [1, kv_heads, cap, head_dim] views (a slot of a
        batch pool's buffers, cap >= len) and uses them as the cache's buffers from now on."""
        assert self.layout.shared_buffer and self.device == "cpu"
        n = len(self.tokens)
        for dst, src in zip(keys + values, self.keys + self.values, strict=True):
            dst[:, :, :n] = src[:, :, :n]
        self._keys, self._values = list(keys), list(values)
        if self.pool_owner is None:     # not when moving within a pool that grew
            self._home_capacity = max(self._capacity, n)    # what it had reserved (see rehome)
        self._capacity = keys[0].shape[2]
        self.pool_owner = owner
        self._host_changed()

    def rehome(self) -> None:
        """Leaves a pool's slot: the valid positions move to buffers of the cache's own, as large as
        it had reserved before joining (the pool's may be larger, sized for another session)."""
        old_k, old_v, n = self.keys, self.values, len(self.tokens)
        self._alloc(max(-(-n // MIN_CAPACITY) * MIN_CAPACITY, self._home_capacity))
        assert self._keys is not None and self._values is not None
        for dst, src in zip(self._keys + self._values, old_k + old_v, strict=True):
            dst[:, :, :n] = src[:, :, :n]
