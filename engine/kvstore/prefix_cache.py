"""The shared prefix cache: full KV blocks reused across sessions, in a memory and a disk tier.

Keys come from the block store's hash chain, so a hit needs the same model, the same `cache_salt`
and the same tokens from the start. The memory tier is an LRU of block arrays under a byte
budget. The disk tier is the block store's folder; its index lives in memory and is rebuilt from
the folder at startup (a block file's mtime is its last use), so a crash between a block write
and an index update cannot leave them disagreeing. Blocks referenced by pinned sessions are
exempt from eviction and expiry. A janitor thread enforces the disk budget and age.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterable, Protocol, Sequence

import numpy as np

from engine.kvstore.blockstore import BlockStore
from engine.kvstore.kvfile import KVFileError

DEFAULT_MEMORY_TIER_BYTES = 1 << 30
DEFAULT_DISK_TIER_BYTES = 4 << 30
DEFAULT_MAX_AGE_S = 14 * 24 * 3600
JANITOR_INTERVAL_S = 30.0
JANITOR_DELAY_S = 0.2     # after a write, the janitor runs within this delay (well under a second)


@dataclass
class TierStats:
    bytes: int = 0
    blocks: int = 0
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    expirations: int = 0
    pinned_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class _MemBlock:
    tokens: list[int]
    array: np.ndarray
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.array.setflags(write=False)   # shared by readers: never mutated in place
        self.nbytes = self.array.nbytes


class BlockReferences(Protocol):
    """What the cache asks before removing a block file (implemented by engine.sessions.refs.BlockRefs)."""

    def is_pinned(self, key: str) -> bool:
        """Does a pinned session (in this process or, by its manifest, in another) reference it?"""
        ...

    def deletion_guard(self) -> ContextManager[Any]:
        """Held around every removal of block files (the folder's block lock, exclusive)."""
        ...

    def no_new_references(self) -> ContextManager[Any]:
        """Held while checking "not pinned" and removing: no save can reference the block meanwhile."""
        ...


class NoReferences:
    """No pinned sessions: every block may go (a cache on its own, as in tests)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def is_pinned(self, key: str) -> bool:
        return False

    def deletion_guard(self) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def no_new_references(self) -> ContextManager[Any]:
        return self._lock


class PrefixCache:
    def __init__(self, store: BlockStore, refs: BlockReferences | None = None,
                 memory_bytes: int = DEFAULT_MEMORY_TIER_BYTES, disk_bytes: int = DEFAULT_DISK_TIER_BYTES,
                 max_age_s: float = DEFAULT_MAX_AGE_S, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        # Who references which block, and the rules for removing one (docs/DESIGN.md, "Locking").
        self.refs: BlockReferences = refs if refs is not None else NoReferences()
        self.memory_budget = memory_bytes
        self.disk_budget = disk_bytes
        self.max_age_s = max_age_s
        self.clock = clock
        self._lock = threading.Lock()
        self._mem: OrderedDict[str, _MemBlock] = OrderedDict()
        self._disk: dict[str, tuple[int, float]] = {}     # key -> (bytes, last use)
        self.memory = TierStats()
        self.disk = TierStats()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rebuild_index()

    # ---- memory tier ---------------------------------------------------------------------------
    def get_memory(self, key: str) -> _MemBlock | None:
        with self._lock:
            block = self._mem.get(key)
            if block is not None:
                self._mem.move_to_end(key)
            return block

    def put_memory(self, key: str, tokens: Sequence[int], array: np.ndarray) -> None:
        with self._lock:
            if key in self._mem:
                self._mem.move_to_end(key)
                return
            block = _MemBlock(list(tokens), array)
            if block.nbytes > self.memory_budget:
                return
            self._mem[key] = block
            self.memory.bytes += block.nbytes
            while self.memory.bytes > self.memory_budget and self._mem:
                _, old = self._mem.popitem(last=False)
                self.memory.bytes -= old.nbytes
                self.memory.evictions += 1

    def has_memory(self, key: str) -> bool:
        with self._lock:
            return key in self._mem

    # ---- disk tier -----------------------------------------------------------------------------
    def rebuild_index(self) -> None:
        """The disk index from the folder itself (startup, after a crash, after `clear`)."""
        index: dict[str, tuple[int, float]] = {}
        for key in self.store.keys_on_disk():
            try:
                st = self.store.path(key).stat()
            except OSError:
                continue
            index[key] = (st.st_size, st.st_mtime)
        with self._lock:
            self._disk = index

    def has_disk(self, key: str) -> bool:
        with self._lock:
            return key in self._disk

    def note_written(self, key: str) -> None:
        """A block file was written (by a session save or a spill): index it, wake the janitor."""
        now = self.clock()
        path = self.store.path(key)
        try:
            os.utime(path, (now, now))
            size = path.stat().st_size
        except OSError:
            return
        with self._lock:
            self._disk[key] = (size, now)
        self.trigger()

    def note_removed(self, key: str) -> None:
        with self._lock:
            self._disk.pop(key, None)

    def _touch(self, key: str) -> None:
        now = self.clock()
        try:
            os.utime(self.store.path(key), (now, now))
        except OSError:
            pass
        with self._lock:
            if key in self._disk:
                self._disk[key] = (self._disk[key][0], now)

    def read_disk(self, key: str, tokens: Sequence[int], trace: bool = True) -> np.ndarray:
        """Reads and validates a block; a bad file is removed (it is only a cache) and re-raised.
        Without `trace` (a temporary session) nothing on disk changes: no mtime, no removal."""
        try:
            array = self.store.read(key, tokens)
        except KVFileError:
            if trace:
                try:
                    self._remove_unpinned(key)
                except TimeoutError:
                    pass        # the block lock stayed busy: the next reader or gc removes it
            raise
        if trace:
            self._touch(key)
        return array

    # ---- lookup --------------------------------------------------------------------------------
    def load_chain(self, keys: Sequence[str], token_blocks: Sequence[Sequence[int]],
                   on_block: Callable[[np.ndarray, list[int], str], None], promote: bool = True) -> tuple[int, int]:
        """Feeds the longest run of available blocks, in order, to `on_block(array, tokens, tier)`.
        Blocks read from disk join the memory tier when `promote` (never for temporary sessions);
        without `promote` the reads leave no trace on disk either (no mtime update: a temporary
        chat must not show, nor extend the blocks' expiry).
        Returns (blocks from memory, blocks from disk). Misses count the blocks left to compute."""
        from_mem = from_disk = 0
        for i, (key, toks) in enumerate(zip(keys, token_blocks)):
            block = self.get_memory(key)
            if block is not None and block.tokens == list(toks):
                on_block(block.array, list(toks), "memory")
                if promote and self.has_disk(key):
                    self._touch(key)     # the disk copy's last use follows the memory hits
                from_mem += 1
                continue
            if self.has_disk(key):
                try:
                    array = self.read_disk(key, toks, trace=promote)
                except KVFileError:
                    array = None
                if array is not None:
                    on_block(array, list(toks), "disk")
                    if promote:
                        self.put_memory(key, toks, array)
                    from_disk += 1
                    continue
            with self._lock:
                self.memory.misses += len(keys) - i
                self.disk.misses += len(keys) - i
            break
        with self._lock:
            self.memory.hits += from_mem
            self.disk.hits += from_disk
        return from_mem, from_disk

    # ---- janitor -------------------------------------------------------------------------------
    def enforce(self) -> dict[str, int]:
        """Expires old unpinned blocks, then evicts least recently used ones over the disk budget."""
        try:
            with self.refs.deletion_guard():
                return self._enforce()
        except TimeoutError:
            return {"expired": 0, "evicted": 0}     # another process held the block lock throughout

    def _enforce(self) -> dict[str, int]:
        now = self.clock()
        with self._lock:
            entries = sorted(self._disk.items(), key=lambda kv: kv[1][1])   # oldest use first
        unpinned = [(k, size, used) for k, (size, used) in entries if not self.refs.is_pinned(k)]
        total = sum(size for _, size, _ in unpinned)
        expired = evicted = 0
        for key, size, used in unpinned:
            too_old = now - used > self.max_age_s
            if not too_old and total <= self.disk_budget:
                break
            if self._remove_unpinned(key):
                total -= size
                if too_old:
                    expired += 1
                else:
                    evicted += 1
        with self._lock:
            self.disk.expirations += expired
            self.disk.evictions += evicted
        return {"expired": expired, "evicted": evicted}

    def _remove_unpinned(self, key: str) -> bool:
        with self.refs.deletion_guard(), self.refs.no_new_references():   # atomic with respect to a save that would reference it
            if self.refs.is_pinned(key):
                return False
            self.store.remove(key)
        self.note_removed(key)
        return True

    def clear(self, keep: Iterable[str] = ()) -> int:
        """Drops both tiers except pinned blocks; returns how many block files were removed."""
        with self._lock:
            self._mem.clear()
            self.memory.bytes = 0
            keys = list(self._disk)
        with self.refs.deletion_guard():
            removed = sum(1 for k in keys if self._remove_unpinned(k))
        return removed

    def trigger(self) -> None:
        self._wake.set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="amber-cache-janitor", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            woke = self._wake.wait(JANITOR_INTERVAL_S)
            if self._stop.is_set():
                return
            if woke:
                time.sleep(JANITOR_DELAY_S)   # let a burst of writes land, then one pass
                self._wake.clear()
            try:
                self.enforce()
            except OSError:
                pass    # a vanished file or a full disk: the next pass tries again

    def stats(self) -> dict[str, dict[str, int]]:
        with self._lock:
            disk_items = list(self._disk.items())
            mem = TierStats(**self.memory.as_dict())
            mem.blocks = len(self._mem)
            dsk = TierStats(**self.disk.as_dict())
        pinned = [size for k, (size, _) in disk_items if self.refs.is_pinned(k)]
        dsk.blocks = len(disk_items)
        dsk.bytes = sum(size for _, (size, _) in disk_items)
        dsk.pinned_bytes = sum(pinned)
        return {"memory": mem.as_dict(), "disk": dsk.as_dict()}
