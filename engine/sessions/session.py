"""One session's state (the manager's record of it), its error, and what its KV files hold."""
from __future__ import annotations

import contextlib
import itertools
import threading
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from engine.api import KV_STORE_MODEL, KV_STORES, SessionError, SessionKind
from engine.generation.history import TokenHistory
from engine.kvstore.kvfile import KVShape
from engine.runtime.kvcache import KVCache
from engine.runtime.model import LoadedModel

LOAD_THREADS = 4                # reads of saved KV in flight at once (I/O-bound: more than the cores)
_USES = itertools.count()


def next_use() -> int:
    """A stamp that orders uses: a later use gets a greater one. A counter, not a clock: two uses
    never tie (a coarse clock's would), so least-recently-used is always one session."""
    return next(_USES)


@contextlib.contextmanager
def nothing() -> Iterator[None]:
    yield


__all__ = ["LOAD_THREADS", "Session", "SessionError", "nothing", "store_shape"]


@dataclass
class Session:
    """Fields change under the manager's lock, or under `lock` (this session's generation), or in
    the writer thread for the fields only the writer sets (docs/DESIGN.md, "Locking")."""

    id: str
    kind: SessionKind
    salt: str | None
    cache: KVCache | None = None
    transcript: list[dict[str, str]] = field(default_factory=list)
    disk_tokens: list[int] = field(default_factory=list)   # tokens the manifest's KV covers
    disk_keys: list[str] = field(default_factory=list)     # its full blocks
    tail_file: str | None = None                           # its private partial block
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: int = field(default_factory=next_use)   # next_use() at open and at each turn
    pending_saves: int = 0
    save_error: str | None = None
    repair_note: str | None = None     # a validation failure found while loading, for the figures
    manifest_error: str | None = None  # the manifest was damaged (moved aside): kept for info()
    # KV saved under another model or KV store setting: unusable here, but kept (and protected
    # from the shared cache's eviction) until this session is saved again, unpinned or deleted,
    # so that switching back finds it intact.
    foreign_keys: list[str] = field(default_factory=list)
    foreign_tail: str | None = None
    # The token ids this session holds and the template text they stand for (engine.generation.history):
    # the source of truth for the next turn's prompt, saved in the manifest.
    history: TokenHistory = field(default_factory=TokenHistory)
    overflow_start: int | None = None  # where the last overflow cut started (kept while it fits)


def store_shape(model: LoadedModel, kv_store: str) -> KVShape:
    """What the KV files of this model and store setting hold. A float16 store of a float32 model
    is its own namespace (the fingerprint says so), so its blocks never mix with lossless ones."""
    if kv_store not in KV_STORES:
        raise ValueError(f"unknown KV store '{kv_store}' (choose from {', '.join(KV_STORES)})")
    own = np.dtype(model.kv.dtype).name
    dtype = own if kv_store == KV_STORE_MODEL else kv_store
    fingerprint = model.fingerprint if dtype == own else f"{model.fingerprint}/kv-{dtype}"
    return KVShape(fingerprint, dtype, model.kv.n_layers, model.kv.kv_heads, model.kv.head_dim)
