"""The KV cache of one sequence: per-layer key/value buffers and the tokens they hold."""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import numpy as np
import onnxruntime as ort

from engine.onnx.halfcast import half_to_float
from engine.runtime.model import KVLayout

MIN_CAPACITY = 256


def bind_kv_shared(binding: Any, layout: KVLayout, values: Any) -> None:
    """Binds each layer's (key, value) OrtValues as both past and present of `binding`: a step
    writes its new positions into the same buffers (shared-buffer GroupQueryAttention graphs)."""
    for (pk, pv), (ok, ov), (k, v) in zip(layout.past_names, layout.present_names, values, strict=True):
        binding.bind_ortvalue_input(pk, k)
        binding.bind_ortvalue_input(pv, v)
        binding.bind_ortvalue_output(ok, k)
        binding.bind_ortvalue_output(ov, v)
# A device cache whose OrtValues are separate CPU allocations, copied to and from host arrays
# exactly as on CUDA: the device code paths (download off-thread, in-place upload, the binding
# kept) run for real on a CPU (tests, bench/suites/gpu_check.py).
STAGED = "cpu-staged"
# A write that would overwrite positions a pending snapshot still has to copy waits at most this
# long (the writer thread copies before any file I/O); then the snapshot is dropped (its save fails
# with a message) rather than the generation hanging.
SNAPSHOT_WAIT_S = 60.0

Pair = tuple[Any, Any]      # (keys, values) of one layer: OrtValues on a device

# Every device buffer a cache allocated and still holds (weakly): gpu_check and the tests count them.
_device_buffers: weakref.WeakSet[Any] = weakref.WeakSet()


def live_device_buffers() -> int:
    """How many device KV buffers (OrtValues, two per layer and cache) are alive in this process."""
    return len(_device_buffers)


class SnapshotLost(RuntimeError):
    """A snapshot's positions were overwritten before they were copied (it waited too long)."""


class KVSnapshot:
    """Positions [0, n) of a cache as they were when taken: references to its buffers, not a copy.

    A shared-buffer step writes only at `len(tokens)`, so those positions stay valid while the
    cache keeps generating; the copy is made by whoever exports (the writer thread). Until then
    the cache makes any write below n wait (`KVCache._await_writable`); buffers replaced or freed
    meanwhile stay alive through these references. `release` (or the end of a `with`) lets go.
    """

    def __init__(self, cache: KVCache, tokens: list[int], host: tuple[list[np.ndarray], list[np.ndarray]] | None,
                 device: list[Pair] | None, guarded: bool = True) -> None:
        self.tokens = tokens
        self.n = len(tokens)
        self._cache: KVCache | None = cache if guarded else None
        self._host = host
        self._device = device
        self.source: object = host[0] if host is not None else device   # what a write must not touch
        self.broken = False

    def __enter__(self) -> KVSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _fetch(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The host arrays: on a device, downloaded now (the only device→host copy of a save);
        the device buffers are let go at once."""
        if self._host is None:
            cache = self._cache
            if self._device is None or cache is None:
                raise SnapshotLost("the snapshot was already released")
            self._host = ([cache.download(k) for k, _ in self._device], [cache.download(v) for _, v in self._device])
            self._check()
            self._device = None
            self._let_go()
        return self._host

    def _check(self) -> None:
        if self.broken:
            raise SnapshotLost(f"the KV changed before it was copied (the writer was busy for over "
                               f"{SNAPSHOT_WAIT_S:.0f} s)")

    def export(self, start: int, end: int) -> np.ndarray:
        """Positions [start, end) (within [0, n)) as `KVCache.export` returns them, copied."""
        assert 0 <= start <= end <= self.n
        keys, values = self._fetch()
        out = _export(keys, values, start, end)
        self._check()
        return out

    def _let_go(self) -> None:
        cache, self._cache = self._cache, None
        if cache is not None:
            cache.unguard(self)

    def release(self) -> None:
        self._let_go()
        self._host = None
        self._device = None


def _export(keys: list[np.ndarray], values: list[np.ndarray], start: int, end: int) -> np.ndarray:
    k0 = keys[0]
    out: np.ndarray = np.empty((len(keys), 2, k0.shape[1], end - start, k0.shape[3]), k0.dtype)
    for i, (k, v) in enumerate(zip(keys, values, strict=True)):
        out[i, 0] = k[0, :, start:end]
        out[i, 1] = v[0, :, start:end]
    if KVCache.transfer_hook is not None:
        KVCache.transfer_hook("export", out.nbytes)
    return out


class KVCache:
    """Holds `len(tokens)` positions of keys and values for every layer.

    With a GroupQueryAttention graph the buffers are preallocated [1, kv_heads, capacity, head_dim]
    and bound as both past and present, so a decode step writes one row in place; capacity grows
    geometrically. With a plain optimum graph the buffers are exactly [1, kv_heads, len, head_dim],
    replaced by each step's presents.

    `device="cuda"` (or `STAGED`) keeps the buffers on the device between steps (shared-buffer
    graphs), allocated once per capacity and kept bound: the host arrays are staging that exists
    only while something reads or writes them on the host (saving, loading, growing); what changed
    there is uploaded into the same device buffers (`update_inplace`) and the staging freed.
    """

    # Called with ("download" | "upload" | "export", bytes) on every KV copy: tests record the
    # thread that copies, gpu_check what a save costs the generating thread. None: no cost.
    transfer_hook: Callable[[str, int], None] | None = None

    def __init__(self, layout: KVLayout, capacity: int = 0, device: str = "cpu") -> None:
        self.layout = layout
        self.device = device if layout.shared_buffer else "cpu"
        self.tokens: list[int] = []
        self._keys: list[np.ndarray] | None = []
        self._values: list[np.ndarray] | None = []
        self._capacity = 0
        self._ort_values: list[Pair] | None = None   # bound to the session
        self._dirty_from: int | None = None          # device: host staging newer from this position
        self.binding: Any = None    # an (untyped) onnxruntime IOBinding with the KV bound, reused across steps
        self.logits_out: np.ndarray | None = None   # where that binding's steps write their logits
        self.step_inputs: Any = None    # the runner's decode-step input buffers (runner._DecodeInputs)
        self._guards: list[KVSnapshot] = []          # pending snapshots
        self._cond = threading.Condition()
        self.waiting = 0                             # writers waiting for a snapshot (tests look)
        self.pool_owner: object | None = None   # the batch pool whose slot holds the buffers (kvpool)
        self._home_capacity = 0                 # the capacity it had before joining that pool
        self._alloc(capacity if layout.shared_buffer else 0)

    @property
    def on_device(self) -> bool:
        return self.device != "cpu"

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
            self._keys = [self.download(k) for k, _ in self._ort_values]
            self._values = [self.download(v) for _, v in self._ort_values]

    def download(self, ov: Any) -> np.ndarray:
        """A device buffer's contents as a new host array."""
        arr: np.ndarray = ov.numpy()
        if self.device == STAGED:
            arr = arr.copy()        # a CPU OrtValue's numpy() is a view; a device's is a copy
        if KVCache.transfer_hook is not None:
            KVCache.transfer_hook("download", arr.nbytes)
        return arr

    def _upload(self, ov: Any, arr: np.ndarray) -> None:
        ov.update_inplace(arr)      # same address: the binding stays valid
        if KVCache.transfer_hook is not None:
            KVCache.transfer_hook("upload", arr.nbytes)

    def _host_changed(self, start: int = 0) -> None:
        """The host arrays changed from position `start` on: on CPU the bound views are rebuilt when
        the arrays were replaced; on a device the change is uploaded before the next step."""
        if self.on_device:
            self._dirty_from = start if self._dirty_from is None else min(start, self._dirty_from)
        else:
            self._ort_values = None
            self.binding = None     # the runner's IOBinding over those OrtValues

    def _drop_device(self) -> None:
        """Lets go of the device buffers and the binding over them (freed unless a snapshot holds them)."""
        self._ort_values = None
        self.binding = None
        self.logits_out = None

    # ---- snapshots ------------------------------------------------------------------------------
    def snapshot(self) -> KVSnapshot:
        """A handle on positions [0, len) for a copy made later on another thread (cheap: no copy)."""
        tokens = list(self.tokens)      # first: the buffers read next hold at least these positions
        host = (self._keys, self._values) if self._keys is not None and self._values is not None else None
        # Plain graphs never overwrite in place: nothing to guard.
        snap = KVSnapshot(self, tokens, host, None if host is not None else self._ort_values,
                          guarded=self.layout.shared_buffer)
        if self.layout.shared_buffer:
            with self._cond:
                self._guards.append(snap)
            now = self.tokens
            if now[:snap.n] != tokens:
                # Taken off the generating thread (pin() during a turn) as a truncate ran: only
                # the prefix both agree on is certain to be what the buffers hold.
                keep = next((i for i, (a, b) in enumerate(zip(now, tokens, strict=False)) if a != b),
                            min(len(now), len(tokens)))
                snap.tokens, snap.n = tokens[:keep], keep
        return snap

    def unguard(self, snap: KVSnapshot) -> None:
        """`snap` no longer needs the buffers (KVSnapshot calls this once it has copied or is released)."""
        with self._cond:
            if snap in self._guards:
                self._guards.remove(snap)
                self._cond.notify_all()

    def _await_writable(self, pos: int, target: object) -> None:
        """Waits until no pending snapshot of `target` (a host key list or the device buffers) still
        needs positions from `pos` on. A normal decode step writes at len(tokens) ≥ every snapshot's
        n: it never waits; only truncate-then-write (regenerate, edit) can."""
        if not self._guards:
            return
        with self._cond:
            self.waiting += 1
            try:
                def clear() -> bool:
                    return not any(g.source is target and g.n > pos for g in self._guards)
                if not self._cond.wait_for(clear, SNAPSHOT_WAIT_S):
                    for g in [g for g in self._guards if g.source is target and g.n > pos]:
                        g.broken = True     # its export fails; the generation goes on
                        self._guards.remove(g)
            finally:
                self.waiting -= 1

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
        if self.on_device:
            self._drop_device()     # device buffers are per capacity: new ones on the next step
            self._dirty_from = 0
        else:
            self._host_changed()

    def reserve(self, needed: int) -> None:
        """Makes room for `needed` positions (shared-buffer graphs): the first time just that much
        (rounded up to MIN_CAPACITY: a fresh buffer costs a page fault per page touched), then at
        least doubling, so that a growing chat is copied O(log n) times. The old buffers are not
        written: a pending snapshot keeps them alive until it is copied."""
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
        """Keeps the first n positions (regenerate / edit reuse the shared prefix). Nothing is
        overwritten yet: the next write below a pending snapshot's end waits for it."""
        n = max(0, min(n, len(self.tokens)))
        del self.tokens[n:]
        if not self.layout.shared_buffer:
            self._keys = [k[:, :, :n] for k in self.keys]
            self._values = [v[:, :, :n] for v in self.values]
            self._host_changed()

    def clear(self) -> None:
        """Frees every buffer (host and device; a pending snapshot's stay alive until it is copied)."""
        self.tokens = []
        self._drop_device()
        self._alloc(0)

    def export(self, start: int, end: int) -> np.ndarray:
        """Positions [start, end) of every layer as one array [layers, 2, kv_heads, n, head_dim]."""
        return _export(self.keys, self.values, start, end)

    def append_block(self, block: np.ndarray, tokens: list[int]) -> None:
        """Appends positions loaded from disk or another cache (shape as `export` returns)."""
        if block.dtype == np.float16 and np.dtype(self.layout.dtype) == np.float32:
            block = half_to_float(block)    # a float16 store's block: ~15x numpy's cast
        n0, n = len(self.tokens), block.shape[3]
        if self.layout.shared_buffer:
            self.reserve(n0 + n)
            keys, values = self.keys, self.values
            self._await_writable(n0, keys)
            for i in range(self.layout.n_layers):
                keys[i][0, :, n0:n0 + n] = block[i, 0]
                values[i][0, :, n0:n0 + n] = block[i, 1]
            if self.on_device:
                self._host_changed(n0)      # written in place: CPU views stay valid
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
        self._await_writable(start, keys)
        if self.on_device:
            self._host_changed(start)
        return [arr[0, h, start:start + n] for i in range(self.layout.n_layers)
                for arr in (keys[i], values[i]) for h in range(self.layout.kv_heads)]

    def commit_loaded(self, tokens: list[int]) -> None:
        """The positions after the current ones, filled through `block_views`, are now valid."""
        if self.on_device:
            self._host_changed(len(self.tokens))
        self.tokens.extend(tokens)

    def ort_values(self) -> list[Pair]:
        """OrtValues bound as past and present: views of the host arrays on CPU (no copy); on a
        device, buffers allocated once per capacity, into which host changes are uploaded in place
        (the binding over them stays valid), kept there between steps."""
        if not self.on_device:
            if self._ort_values is None:
                self._ort_values = [(ort.OrtValue.ortvalue_from_numpy(k), ort.OrtValue.ortvalue_from_numpy(v))
                                    for k, v in zip(self.keys, self.values, strict=True)]
            return self._ort_values
        if self._ort_values is None:
            where = "cpu" if self.device == STAGED else self.device
            shape, dtype = self._shape(self._capacity), self.layout.dtype
            self._ort_values = [(ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, where, 0),
                                 ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, where, 0))
                                for _ in range(self.layout.n_layers)]
            for pair in self._ort_values:
                _device_buffers.update(pair)
            self.binding = None
            self._dirty_from = 0        # fresh buffers: everything goes up
        if self._dirty_from is not None:
            # Uploading rewrites whole buffers; below `_dirty_from` with the bytes they already hold.
            self._await_writable(self._dirty_from, self._ort_values)
            for (k, v), hk, hv in zip(self._ort_values, self.keys, self.values, strict=True):
                self._upload(k, hk)
                self._upload(v, hv)
            self._dirty_from = None
            self._keys = self._values = None    # the device copy is now the only one
        return self._ort_values

    def before_step(self) -> None:
        """A step is about to write at len(tokens) into the bound buffers: waits for a pending
        snapshot that still needs that position (only after a truncate)."""
        if self._guards:
            self._await_writable(len(self.tokens), self._ort_values if self.on_device else self._keys)

    def device_written(self) -> None:
        """A step wrote into the bound buffers: on a device any host copy is now stale."""
        if self.on_device:
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
        self._keys, self._values = keys, values     # these lists: the pool knows them (snapshots)
        if self.pool_owner is None:     # not when moving within a pool that grew
            self._home_capacity = max(self._capacity, n)    # what it had reserved (see rehome)
        self._capacity = keys[0].shape[2]
        self.pool_owner = owner
        self._host_changed()

    def guarded(self, source: object) -> bool:
        """Whether a pending snapshot still reads `source` (a key list this cache had as buffers)."""
        with self._cond:
            return any(g.source is source for g in self._guards)

    def rehome(self) -> None:
        """Leaves a pool's slot: the valid positions move to buffers of the cache's own, as large as
        it had reserved before joining (the pool's may be larger, sized for another session)."""
        old_k, old_v, n = self.keys, self.values, len(self.tokens)
        self._alloc(max(-(-n // MIN_CAPACITY) * MIN_CAPACITY, self._home_capacity))
        assert self._keys is not None and self._values is not None
        for dst, src in zip(self._keys + self._values, old_k + old_v, strict=True):
            dst[:, :, :n] = src[:, :, :n]
