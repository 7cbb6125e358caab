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

from .manifest import ManifestDir


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
