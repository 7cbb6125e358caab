"""What the manifests on disk reference: the other processes' pinned blocks.

A process knows its own sessions' references in memory; blocks that a session of another process
pinned after this one started are known only from that session's manifest. Before any block is
removed, the deleter takes the folder's block lock (exclusive) and refreshes this set, re-reading
only the manifests that changed since the last look.
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Iterator

from engine.sessions.manifest import ManifestDir


class DiskRefs:
    def __init__(self, manifests: ManifestDir) -> None:
        self.manifests = manifests
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[tuple[Any, ...], frozenset[str]]] = {}   # sid -> (stat, keys)
        self._by_key: dict[str, set[str]] = {}                             # key -> sessions
        self._fresh = threading.local()

    @staticmethod
    def _sig(*paths: Any) -> tuple[Any, ...]:
        out: list[Any] = []
        for path in paths:
            try:
                st = os.lstat(path)
                out.append((st.st_ino, st.st_size, st.st_mtime_ns))
            except OSError:
                out.append(None)
        return tuple(out)

    def refresh(self) -> None:
        """Re-reads the manifests that changed (the current one, or the previous version when the
        current one is unusable: what a resume would use)."""
        seen: dict[str, tuple[tuple[Any, ...], frozenset[str]]] = {}
        for sid in self.manifests.ids():
            sig = self._sig(self.manifests.path(sid), self.manifests.prev / f"{sid}.json")
            old = self._seen.get(sid)
            if old is not None and old[0] == sig:
                seen[sid] = old
                continue
            m = self.manifests.load(sid, repair=False).manifest
            seen[sid] = (sig, frozenset(m.blocks) if m is not None and m.kind == "pinned" else frozenset())
        by_key: dict[str, set[str]] = {}
        for sid, (_, keys) in seen.items():
            for key in keys:
                by_key.setdefault(key, set()).add(sid)
        with self._lock:
            self._seen, self._by_key = seen, by_key

    def names(self, key: str, ignore: Any = ()) -> bool:
        """Does a manifest on disk (as of the last refresh) of a session not in `ignore` name it?"""
        with self._lock:
            return any(sid not in ignore for sid in self._by_key.get(key, ()))

    @contextlib.contextmanager
    def guard(self, lock: Any) -> Iterator[None]:
        """`lock` held, the references refreshed once per outermost guard of this thread."""
        with lock:
            depth = getattr(self._fresh, "depth", 0)
            if depth == 0:
                self.refresh()
            self._fresh.depth = depth + 1
            try:
                yield
            finally:
                self._fresh.depth = depth


BLOCKS_LOCK_WAIT_S = 30.0       # a save or a deletion waits this long for the folder's block lock


class BlockRefs:
    """Which pinned sessions reference which shared block, and the rules for removing one.

    This process's own sessions are authoritative here (`add`/`discard`, under `lock`, the
    manager's); other processes' sessions are known from their manifests (`DiskRefs`). The prefix
    cache gets this object (engine.kvstore.prefix_cache.BlockReferences), not the manager's lock."""

    def __init__(self, manifests: ManifestDir, locks: Any, store_root: Any, lock: threading.RLock) -> None:
        self.lock = lock
        self.locks = locks                  # engine.sessions.locks.StateLocks
        self.store_root = store_root        # the block store's folder
        self.disk = DiskRefs(manifests)
        self._by_key: dict[str, set[str]] = {}     # block key -> this process's pinned sessions

    def add(self, key: str, sid: str) -> None:
        """Call under `lock`."""
        self._by_key.setdefault(key, set()).add(sid)

    def discard(self, key: str, sid: str) -> None:
        """Call under `lock`."""
        self._by_key.get(key, set()).discard(sid)

    def clear(self) -> None:
        """Call under `lock` (gc rebuilds them from the manifests)."""
        self._by_key.clear()

    def is_pinned(self, key: str) -> bool:
        with self.lock:
            # Sessions this process holds are authoritative in `_by_key`; the others only on disk.
            return bool(self._by_key.get(key)) or self.disk.names(key, self.locks.held_sessions())

    def deletion_guard(self) -> Any:
        """Around every removal of block files: the folder's block lock, exclusive (a save in another
        process holds it shared from its first block to its manifest), and a fresh look at what
        every manifest on disk names, so no process removes a block another one references."""
        if not self.store_root.is_dir():
            return contextlib.nullcontext()   # no blocks to remove (and no lock file for a temporary-only run)
        return self.disk.guard(self.locks.blocks(shared=False, timeout=BLOCKS_LOCK_WAIT_S))

    def no_new_references(self) -> Any:
        """The lock under which references are added: "not pinned" and the removal happen under it."""
        return self.lock
