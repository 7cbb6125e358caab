"""Sessions: one per conversation, each owning a token history and its KV cache.

pinned    — KV on disk in the block store (manifest + shared blocks + private tail), saved
            incrementally in the background; resumes after a restart with no prefill.
regular   — KV in memory, dropped under memory pressure and rebuilt by prefill.
temporary — never on disk; close() frees everything.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .api import (KV_STORE_MODEL, KV_STORES, CancelToken, ChatMessage, GenerationFigures, GenerationResult,
                  KVLocation, SamplingParams, SessionInfo, SessionKind, StreamEvent)
from .chat_history import ChatPlanner
from .history import HistoryFormatError, TokenHistory
from .blockstore import DEFAULT_BLOCK_TOKENS, BlockStore
from .generate import Generator, common_prefix
from .kvcache import KVCache
from .kvfile import KVFileError, KVShape, atomic_write, looks_like_kv_file, read_kv_file, write_kv_file
from .locks import LockTimeout, StateLocks, default_wait_s
from .manifest import Manifest, ManifestDir, canonical_id
from .model import LoadedModel
from .prefix_cache import (DEFAULT_DISK_TIER_BYTES, DEFAULT_MAX_AGE_S, DEFAULT_MEMORY_TIER_BYTES,
                           PrefixCache)
from .safefs import UnsafePathError, check_inside, unlink_inside
from .state_refs import DiskRefs

MANIFEST_VERSION = 2            # engine.manifest.VERSION (1 is still read)
BLOCKS_LOCK_WAIT_S = 30.0       # a save or a deletion waits this long for the folder's block lock
LOAD_THREADS = 4                # reads of saved KV in flight at once (I/O-bound: more than the cores)
DEFAULT_MEMORY_BUDGET = 1 << 30


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


class SessionError(Exception):
    """A session operation cannot be done (unknown id, busy, bad kind); the message says why."""


@dataclass
class _Session:
    id: str
    kind: SessionKind
    salt: str | None
    cache: KVCache | None = None
    transcript: list[dict[str, str]] = field(default_factory=list)
    disk_tokens: list[int] = field(default_factory=list)   # tokens the manifest's KV covers
    disk_keys: list[str] = field(default_factory=list)     # its full blocks
    tail_file: str | None = None                           # its private partial block
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
    pending_saves: int = 0
    save_error: str | None = None
    repair_note: str | None = None     # a validation failure found while loading, for the figures
    manifest_error: str | None = None  # the manifest was damaged (moved aside): kept for info()
    # KV saved under another model or KV store setting: unusable here, but kept (and protected
    # from the shared cache's eviction) until this session is saved again, unpinned or deleted,
    # so that switching back finds it intact.
    foreign_keys: list[str] = field(default_factory=list)
    foreign_tail: str | None = None
    # The token ids this session holds and the template text they stand for (engine.history):
    # the source of truth for the next turn's prompt, saved in the manifest.
    history: TokenHistory = field(default_factory=TokenHistory)
    overflow_start: int | None = None  # where the last overflow cut started (kept while it fits)


def _noop() -> None:
    """The job that `drain` waits for."""


class _Writer:
    """The single thread that touches session files: saves never block generation."""

    def __init__(self, before_job: Callable[[], None] = lambda: None) -> None:
        self._before_job = before_job
        self._jobs: queue.Queue[tuple[Callable[[], Any], Future] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="amber-kv-writer", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], Any]) -> Future:
        fut: Future = Future()
        self._jobs.put((job, fut))
        return fut

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, fut = item
            try:
                if job is not _noop:
                    self._before_job()      # marks this process as a writer (not for a drain)
                fut.set_result(job())
            except BaseException as exc:   # reported through the future
                fut.set_exception(exc)

    def drain(self, timeout: float) -> bool:
        """Waits for the jobs queued so far; False when the timeout passed first."""
        from concurrent.futures import TimeoutError as FutureTimeout
        if not self._thread.is_alive():
            return self._jobs.empty()
        try:
            self.submit(_noop).result(timeout)
        except FutureTimeout:
            return False
        return True

    def stop(self, timeout: float) -> None:
        self._jobs.put(None)
        self._thread.join(timeout)


def store_shape(model: LoadedModel, kv_store: str) -> KVShape:
    """What the KV files of this model and store setting hold. A float16 store of a float32 model
    is its own namespace (the fingerprint says so), so its blocks never mix with lossless ones."""
    if kv_store not in KV_STORES:
        raise ValueError(f"unknown KV store '{kv_store}' (choose from {', '.join(KV_STORES)})")
    own = np.dtype(model.kv.dtype).name
    dtype = own if kv_store == KV_STORE_MODEL else kv_store
    fingerprint = model.fingerprint if dtype == own else f"{model.fingerprint}/kv-{dtype}"
    return KVShape(fingerprint, dtype, model.kv.n_layers, model.kv.kv_heads, model.kv.head_dim)


class SessionManager:
    """Sessions over one loaded model, a state directory and a memory budget (thread-safe)."""

    def __init__(self, model: LoadedModel, state_dir: Path | str,
                 memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
                 block_tokens: int = DEFAULT_BLOCK_TOKENS,
                 cache_memory_bytes: int = DEFAULT_MEMORY_TIER_BYTES,
                 cache_disk_bytes: int = DEFAULT_DISK_TIER_BYTES,
                 cache_max_age_s: float = DEFAULT_MAX_AGE_S,
                 clock: Callable[[], float] = time.time,
                 kv_store: str = KV_STORE_MODEL, lock_wait_s: float | None = None) -> None:
        self.model = model
        self.generator = Generator(model)
        self.planner = ChatPlanner(self.generator)
        self.state_dir = Path(state_dir)
        self.memory_budget = memory_budget_bytes
        self.shape = store_shape(model, kv_store)
        self.store = BlockStore(self.state_dir, self.shape, block_tokens)
        self.block_tokens = block_tokens
        self._sessions_dir = self.state_dir / "sessions"
        self._tails_dir = self.state_dir / "tails"
        self._manifests = ManifestDir(self._sessions_dir)
        self.locks = StateLocks(self.state_dir)
        self.lock_wait_s = default_wait_s() if lock_wait_s is None else lock_wait_s
        self._lock = threading.RLock()
        self._open: dict[str, _Session] = {}
        self._refs: dict[str, set[str]] = {}      # block key -> pinned sessions referencing it
        self._disk_refs = DiskRefs(self._manifests)   # ... and what every manifest on disk names
        self._evictions = 0
        self._writer = _Writer(self.locks.hold_process)
        self.prefix = PrefixCache(self.store, self._is_pinned_block, self._lock, memory_bytes=cache_memory_bytes,
                                  disk_bytes=cache_disk_bytes, max_age_s=cache_max_age_s, clock=clock,
                                  deletion_guard=self._deletion_guard)
        self._closed = False
        self.startup_report = self._reconcile()
        self.prefix.start()

    def _is_pinned_block(self, key: str) -> bool:
        with self._lock:
            # Sessions this process holds are authoritative in `_refs`; the others only on disk.
            return bool(self._refs.get(key)) or self._disk_refs.names(key, self.locks.held_sessions())

    def _deletion_guard(self) -> Any:
        """Around every removal of block files: the folder's block lock, exclusive (a save in another
        process holds it shared from its first block to its manifest), and a fresh look at what
        every manifest on disk names, so no process removes a block another one references."""
        if not self.store.root.is_dir():
            return _nothing()       # no blocks to remove (and no lock file for a temporary-only run)
        return self._disk_refs.guard(self.locks.blocks(shared=False, timeout=BLOCKS_LOCK_WAIT_S))

    # ---- ChatEngine surface -------------------------------------------------------------------
    @property
    def provider(self) -> str:
        return self.model.provider_short

    @property
    def context_window(self) -> int:
        return self.model.context_window

    @property
    def model_name(self) -> str:
        return self.model.name

    def open(self, session_id: str | None = None, kind: SessionKind | str | None = None,
             cache_salt: str | None = None) -> SessionInfo:
        """Opens (or creates) a session. An existing pinned/regular session keeps its kind unless
        one is given; a new one is regular unless told otherwise."""
        sid = str(uuid.UUID(session_id)) if session_id else str(uuid.uuid4())
        wanted = SessionKind(kind) if kind is not None else None
        s = self._open_locked(sid, wanted, cache_salt)
        if wanted is not None and wanted != s.kind:
            if SessionKind.TEMPORARY in (wanted, s.kind):
                raise SessionError(f"session {sid} is {s.kind.value}; a temporary session cannot "
                                   "become persistent or the other way round")
            # Outside the lock: unpin waits for the writer, which takes the lock.
            (self.pin if wanted == SessionKind.PINNED else self.unpin)(sid)
        return self.info(sid)

    def _open_locked(self, sid: str, wanted: SessionKind | None, cache_salt: str | None) -> _Session:
        """The open session `sid`, else the one on disk (under this process's session lock), else a
        new one. The cache salt must be the session's own (docs/DESIGN.md, "Cache salt")."""
        while True:
            with self._lock:
                s = self._open.get(sid)
            if s is None and wanted != SessionKind.TEMPORARY:
                self._lock_session(sid)
            with self._lock:
                s = self._open.get(sid)
                if s is None and wanted != SessionKind.TEMPORARY and not self.locks.holds(sid):
                    continue      # released by a close that was finishing: take it again
                if s is None:
                    if wanted == SessionKind.TEMPORARY:
                        if self._manifests.load(sid, repair=False).manifest is not None:
                            raise SessionError(f"session {sid} is saved on disk; a temporary session "
                                               "cannot reuse a persistent session's id")
                        s = _Session(sid, wanted, cache_salt)
                    else:
                        s = self._read_manifest(sid) or _Session(sid, wanted or SessionKind.REGULAR, cache_salt)
                    self._check_salt(s, cache_salt)
                    self._open[sid] = s
                    return s
                self._check_salt(s, cache_salt)
                return s

    def _lock_session(self, sid: str) -> None:
        try:
            self.locks.lock_session(sid, self.lock_wait_s)
        except LockTimeout:
            raise SessionError(f"this chat is open in another Amber process (session {sid}); "
                               "close it there, or try again") from None

    def _check_salt(self, s: _Session, cache_salt: str | None) -> None:
        """A salted session opens only with its own salt: another salt, or none, is refused (the
        stored salt is never silently used instead). An unsalted session given a salt takes it
        from now on (its saved KV, keyed without one, is re-prefilled once and says so)."""
        if s.salt == cache_salt:
            return
        if s.salt is None:
            s.salt = cache_salt
            if s.disk_keys:
                note = "the chat now has a cache salt: its saved KV (keyed without one) is recomputed once"
                s.repair_note = f"{s.repair_note}; {note}" if s.repair_note else note
            return
        why = ("has a cache salt; open it with the same --cache-salt" if cache_salt is None
               else "was made with another cache salt")
        if self._open.get(s.id) is not s:
            self._release_lock_if_closed(s.id)
        raise SessionError(f"session {s.id} {why}")

    def _release_lock_if_closed(self, sid: str) -> None:
        with self._lock:
            if sid not in self._open:
                # The file goes too (a waiter retries on the new one): `locks/` holds open chats only.
                self.locks.unlock_session(sid, remove=True)

    def generate(self, session_id: str, messages: Sequence[ChatMessage | dict],
                 sampling: SamplingParams | None = None, cancel: CancelToken | None = None) -> Iterator[StreamEvent]:
        """Streams a reply to `messages` (the whole conversation, rendered by the chat template).

        The prompt is the token ids the session already holds for the part of the conversation it
        has seen, plus the tokenization of the rest (engine.history); `sampling.overflow` decides
        what is left out when it does not fit the context window (engine.overflow)."""
        s = self._get(session_id)
        job = self.planner.prepare(messages, sampling)     # template and policy errors: now
        return self._stream(s, job, sampling, cancel)

    def generate_tokens(self, session_id: str, prompt_ids: Sequence[int], sampling: SamplingParams | None = None,
                        cancel: CancelToken | None = None) -> Iterator[StreamEvent]:
        return self._stream(self._get(session_id), list(prompt_ids), sampling, cancel)

    def generate_text(self, session_id: str, prompt: str, sampling: SamplingParams | None = None,
                      cancel: CancelToken | None = None) -> Iterator[StreamEvent]:
        """A raw prompt (no chat template)."""
        return self.generate_tokens(session_id, self.generator.encode_prompt(prompt), sampling, cancel)

    def chat(self, session_id: str, user_text: str, system: str | None = None,
             sampling: SamplingParams | None = None, cancel: CancelToken | None = None) -> Iterator[StreamEvent]:
        """One turn of a conversation whose transcript the engine keeps (the CLI's mode)."""
        s = self._get(session_id)
        history = list(s.transcript)
        if system is not None:
            history = [m for m in history if m["role"] != "system"]
            history.insert(0, {"role": "system", "content": system})
        history.append({"role": "user", "content": user_text})
        job = self.planner.prepare(history, sampling)

        def record(result: GenerationResult) -> None:   # before the session is saved
            s.transcript = history + [{"role": "assistant", "content": result.text}]
            if s.kind == SessionKind.REGULAR:
                self._save_async(s)     # pinned sessions are saved with their KV right after
        yield from self._stream(s, job, sampling, cancel, on_result=record)

    def pin(self, session_id: str) -> None:
        """Makes a session persistent: its KV is written in the background."""
        s = self._get(session_id)
        if s.kind == SessionKind.TEMPORARY:
            raise SessionError("a temporary session cannot be pinned")
        with self._lock:
            s.kind = SessionKind.PINNED
        self._save_async(s)

    def unpin(self, session_id: str) -> None:
        """Back to regular: the session's private files go and its block references are released."""
        s = self._get(session_id)
        if s.kind != SessionKind.PINNED:
            return
        with self._lock:
            s.kind = SessionKind.REGULAR
        self._writer.submit(lambda: self._write_regular(s)).result()

    def close(self, session_id: str) -> None:
        """Releases the session's memory. Pinned ones stay on disk; a regular one's full blocks move
        to the shared disk tier; temporary ones vanish entirely."""
        with self._lock:
            s = self._open.pop(session_id, None)
        if s is None:
            return
        with s.lock:   # a generation in flight finishes first (the GUI cancels it before closing)
            cache, s.cache = s.cache, None
            s.transcript = []
            if cache is not None:
                if s.kind == SessionKind.REGULAR:
                    self._spill(s, cache)     # the writer frees the cache when done
                else:
                    cache.clear()
        # Another process may take the chat once the saves queued so far are on disk.
        if s.kind != SessionKind.TEMPORARY:
            self._writer.submit(lambda: self._release_lock_if_closed(s.id))

    def delete(self, session_id: str) -> None:
        """Forgets a session: memory, manifest, private files and block references."""
        try:
            sid = str(uuid.UUID(session_id))
        except (ValueError, TypeError, AttributeError):
            raise SessionError(f"not a session id: {session_id!r}") from None
        if sid not in self._open:
            self._lock_session(sid)     # not while another process has the chat open
        self.close(sid)

        def job() -> None:
            try:
                self._lock_session(sid)     # again, if the close above let it go
                self._delete_files(sid)
            finally:
                with self._lock:
                    if sid not in self._open:
                        self.locks.unlock_session(sid, remove=True)
        self._writer.submit(job).result()

    def info(self, session_id: str) -> SessionInfo:
        s = self._get(session_id)
        mem = s.cache.nbytes if s.cache is not None else 0
        disk = self._disk_bytes(s) if s.kind == SessionKind.PINNED else 0
        where = KVLocation.MEMORY if mem else KVLocation.DISK if disk else KVLocation.NONE
        tokens = len(s.cache) if s.cache is not None else len(s.disk_tokens)
        return SessionInfo(session_id=s.id, kind=s.kind, tokens=tokens, kv_location=where,
                           kv_bytes_memory=mem, kv_bytes_disk=disk, cache_salt=s.salt,
                           saving=s.pending_saves > 0, save_error=s.save_error,
                           manifest_error=s.manifest_error)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            sessions = list(self._open.values())
        live = sum(s.cache.nbytes for s in sessions if s.cache is not None)
        temp = sum(s.cache.nbytes for s in sessions if s.cache is not None and s.kind == SessionKind.TEMPORARY)
        disk_keys = list(self.store.keys_on_disk())
        return {
            "open_sessions": len(sessions),
            "kinds": {k.value: sum(1 for s in sessions if s.kind == k) for k in SessionKind},
            "memory_bytes": live, "memory_budget_bytes": self.memory_budget,
            "temporary_bytes": temp, "over_budget_by_temporary": live > self.memory_budget and temp > 0,
            "evictions": self._evictions,
            "disk_blocks": len(disk_keys), "disk_block_bytes": sum(self.store.size(k) for k in disk_keys),
            "pending_saves": sum(s.pending_saves for s in sessions),
            "block_tokens": self.block_tokens,
            "kv_store_dtype": self.shape.dtype,
            "cache": self.prefix.stats(),
        }

    def clear_cache(self) -> int:
        """Empties the shared prefix cache (both tiers); pinned sessions keep their blocks."""
        self._writer.drain(30)
        try:
            return self.prefix.clear()
        except LockTimeout:
            raise SessionError("the block store is busy (a save in another Amber process); try again") from None

    def cache_gc(self) -> dict[str, int]:
        """One janitor pass now (budget and age)."""
        return self.prefix.enforce()

    def wait_for_saves(self, timeout: float = 30.0) -> bool:
        return self._writer.drain(timeout)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Closes every session, waits (bounded) for pending saves, stops the threads (once)."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            ids = list(self._open)
        for sid in ids:
            self.close(sid)
        try:
            self._writer.drain(timeout)
            self._writer.stop(timeout)
        finally:
            self.prefix.stop(timeout)
            with self._lock:
                self.locks.release_all()

    # ---- listing (CLI) -------------------------------------------------------------------------
    def list_sessions(self) -> list[SessionInfo]:
        """Every session open here or saved in the folder. Saved ones are only looked at (no lock,
        no repair): a chat open in another process, or a damaged manifest, is listed too."""
        with self._lock:
            opened = dict(self._open)
        out = []
        for sid in sorted(set(opened) | set(self._manifests.ids())):
            s = opened.get(sid) or self._read_manifest(sid, repair=False)
            if s is None:
                continue
            if s is opened.get(sid):
                out.append(self.info(sid))
                continue
            disk = self._disk_bytes(s) if s.kind == SessionKind.PINNED else 0
            out.append(SessionInfo(session_id=sid, kind=s.kind, tokens=len(s.disk_tokens),
                                   kv_location=KVLocation.DISK if disk else KVLocation.NONE, kv_bytes_memory=0,
                                   kv_bytes_disk=disk, cache_salt=s.salt, manifest_error=s.manifest_error))
        return out

    def transcript(self, session_id: str) -> list[dict[str, str]]:
        return list(self._get(session_id).transcript)

    # ---- generation ----------------------------------------------------------------------------
    def _get(self, session_id: str) -> _Session:
        with self._lock:
            s = self._open.get(session_id)
        if s is None:
            raise SessionError(f"session {session_id} is not open")
        return s

    def _stream(self, s: _Session, prompt_or_job: Any, sampling: SamplingParams | None,
                cancel: CancelToken | None,
                on_result: Callable[[GenerationResult], None] | None = None) -> Iterator[StreamEvent]:
        """`prompt_or_job`: token ids, or a chat job of the planner (planned here, under the
        session's lock, against the history the session holds now)."""
        if not s.lock.acquire(blocking=False):
            raise SessionError(f"session {s.id} is already generating")
        try:
            if self._open.get(s.id) is not s:
                raise SessionError(f"session {s.id} was closed")
            started = time.perf_counter()
            figures = GenerationFigures()
            plan = None
            if isinstance(prompt_or_job, list):
                prompt = prompt_or_job
            else:
                plan = self.planner.plan(prompt_or_job, s.history, s.overflow_start, figures)
                prompt = plan.ids
                s.overflow_start = plan.overflow_start
            origin = KVLocation.MEMORY
            if s.cache is None:
                s.cache = self.generator.new_cache()
                if s.kind == SessionKind.PINNED and s.disk_tokens:
                    origin = KVLocation.DISK
                    t0 = time.perf_counter()
                    # Buffers sized for this turn at once: growing right after would copy them.
                    max_new = (sampling or SamplingParams()).max_new_tokens
                    self._load_from_disk(s, max(len(prompt), len(s.disk_tokens)) + max_new)
                    figures.resume_ms = (time.perf_counter() - t0) * 1000
            if s.repair_note:
                figures.fallback_reason, s.repair_note = s.repair_note, None
            t0 = time.perf_counter()
            if self._fill_from_shared(s, prompt, figures):
                origin = KVLocation.DISK
            figures.resume_ms += (time.perf_counter() - t0) * 1000 if (
                figures.cache_tokens_memory or figures.cache_tokens_disk) else 0.0
            s.last_used = time.monotonic()
            finished = False
            try:
                for event in self.generator.stream(s.cache, prompt, sampling, cancel, origin=origin,
                                                   figures=figures, started=started):
                    if isinstance(event, GenerationResult):
                        if plan is not None:
                            s.history = self.planner.record(s.history, plan, event.token_ids)
                        if on_result is not None:
                            on_result(event)
                        self._after_generation(s)      # before the result: a caller may stop there
                        finished = True
                    yield event
            finally:
                if not finished and s.cache is not None:
                    self._after_generation(s)          # abandoned mid-stream: keep what was computed
        finally:
            s.lock.release()
        self._enforce_budget(keep=s.id)

    def _after_generation(self, s: _Session) -> None:
        s.last_used = time.monotonic()
        if s.kind != SessionKind.TEMPORARY:
            self._publish(s)
        if s.kind == SessionKind.PINNED:
            self._save_async(s)

    # ---- shared prefix cache -------------------------------------------------------------------
    def _fill_from_shared(self, s: _Session, prompt: list[int], figures: GenerationFigures) -> bool:
        """Extends the session's cache with the longest run of shared blocks matching the prompt;
        True when some came from disk."""
        assert s.cache is not None
        B = self.block_tokens
        n_full = len(prompt) // B
        start = common_prefix(s.cache.tokens, prompt) // B
        if start >= n_full:
            return False
        keys = self.store.keys_for(prompt[:n_full * B], s.salt)[start:]
        if not (self.prefix.has_memory(keys[0]) or self.prefix.has_disk(keys[0])):
            self.prefix.load_chain(keys, [prompt[(start + i) * B:(start + i + 1) * B] for i in range(len(keys))],
                                   lambda *_: None)    # counts the misses
            return False
        s.cache.truncate(start * B)
        s.cache.reserve(n_full * B)
        mem, disk = self.prefix.load_chain(
            keys, [prompt[(start + i) * B:(start + i + 1) * B] for i in range(len(keys))],
            lambda array, toks, tier: s.cache.append_block(array, toks),   # type: ignore[union-attr]
            promote=s.kind != SessionKind.TEMPORARY)
        figures.cache_tokens_memory += mem * B
        figures.cache_tokens_disk += disk * B
        return disk > 0

    def _publish(self, s: _Session) -> None:
        """Offers the session's full blocks to the memory tier (temporary sessions never do)."""
        assert s.cache is not None
        B = self.block_tokens
        tokens = s.cache.tokens
        for i, key in enumerate(self.store.keys_for(tokens, s.salt)):
            if not self.prefix.has_memory(key):
                self.prefix.put_memory(key, tokens[i * B:(i + 1) * B], s.cache.export(i * B, (i + 1) * B))

    def _spill(self, s: _Session, cache: KVCache) -> None:
        """A closed or evicted regular session's full blocks go to the disk tier (in the writer)."""
        B = self.block_tokens
        tokens = list(cache.tokens)
        keys = self.store.keys_for(tokens, s.salt)

        def job() -> None:
            try:
                for i, key in enumerate(keys):
                    if not self.prefix.has_disk(key) and not self.store.has(key):
                        self.store.write(key, tokens[i * B:(i + 1) * B], cache.export(i * B, (i + 1) * B))
                        self.prefix.note_written(key)
            finally:
                cache.clear()
        self._writer.submit(job)

    # ---- disk: load ----------------------------------------------------------------------------
    def _load_from_disk(self, s: _Session, room: int) -> None:
        """Fills the cache from the block store, with buffers for `room` positions; on any failure
        keeps the valid prefix, notes the reason and repairs the store (the rest is re-prefilled
        from the token history)."""
        assert s.cache is not None
        B = self.block_tokens
        expected = self.store.keys_for(s.disk_tokens, s.salt)
        damaged: Path | None = None
        try:
            if expected != s.disk_keys:
                raise KVFileError("the manifest's block list does not match its tokens")
            s.cache.reserve(min(self.context_window, max(room, len(s.disk_tokens) + 1)))
            chunks = [s.disk_tokens[i * B:(i + 1) * B] for i in range(len(s.disk_keys))]
            if s.cache.layout.shared_buffer:
                # Each block is read straight into its place in the buffers, several at a time
                # (reads and checksums release the GIL); positions become valid in order.
                with ThreadPoolExecutor(max_workers=LOAD_THREADS) as pool:
                    reads = [pool.submit(self.store.read_into, key, toks, s.cache.block_views(i * B, len(toks)))
                             for i, (key, toks) in enumerate(zip(s.disk_keys, chunks))]
                    try:
                        for key, toks, fut in zip(s.disk_keys, chunks, reads):
                            damaged = self.store.path(key)
                            fut.result()
                            s.cache.commit_loaded(toks)
                    finally:
                        for fut in reads:
                            fut.cancel()
            else:
                for key, toks in zip(s.disk_keys, chunks):
                    damaged = self.store.path(key)
                    s.cache.append_block(self.store.read(key, toks), toks)
            tail_toks = s.disk_tokens[len(s.disk_keys) * B:]
            if tail_toks:
                if not s.tail_file:
                    damaged = None
                    raise KVFileError("the manifest names no tail file")
                damaged = self._tails_dir / s.tail_file
                try:
                    check_inside(self.state_dir, damaged)      # no symlinked tails folder
                except UnsafePathError as exc:
                    raise KVFileError(str(exc)) from None
                tail = read_kv_file(damaged, self.shape, tail_toks)
                s.cache.append_block(tail, tail_toks)
        except KVFileError as exc:
            note = f"saved KV unusable ({exc}); re-prefilled {len(s.disk_tokens) - len(s.cache)} tokens"
            s.repair_note = f"{s.repair_note}; {note}" if s.repair_note else note   # after a manifest error
            self._repair(s, len(s.cache), damaged)

    def _repair(self, s: _Session, valid_tokens: int, damaged: Path | None) -> None:
        """Removes the damaged file (a damaged block is useless to every session that shares it; the
        next save writes it again) and shortens the manifest to the valid prefix."""
        B = self.block_tokens
        keep = valid_tokens // B
        guard = self._deletion_guard() if damaged is not None and damaged.suffix == ".kvb" else _nothing()
        try:
            with guard, self._lock:
                for key in s.disk_keys[keep:]:
                    self._refs.get(key, set()).discard(s.id)
                s.disk_keys = s.disk_keys[:keep]
                s.disk_tokens = s.disk_tokens[:keep * B]
                s.tail_file = None

                # Removed now, not in the writer: this turn's save must see the block missing and
                # write it again rather than reference the damaged file. Only inside the folder,
                # never through a symlink (names come from untrusted files).
                if damaged is not None:
                    unlink_inside(self.state_dir, damaged, empty_dirs=True)
        except LockTimeout:
            pass    # the damaged file stays; the next save writes the block again or fails clearly
        if damaged is not None and damaged.suffix == ".kvb":
            self.prefix.note_removed(damaged.stem)
        self._writer.submit(lambda: self._write_manifest(s, s.disk_tokens, s.disk_keys, None))

    # ---- disk: save ----------------------------------------------------------------------------
    def _save_async(self, s: _Session) -> None:
        """Snapshots what changed (a memory copy) and queues the file writes."""
        with self._lock:
            if s.kind == SessionKind.TEMPORARY:
                return
            transcript = list(s.transcript)
            if s.kind == SessionKind.REGULAR:
                job: Callable[[], None] = lambda: self._write_regular(s, transcript)
            elif s.cache is None:
                # Pinned but not in memory: what is on disk stays; only the transcript may change.
                job = lambda: self._write_manifest(s, s.disk_tokens, s.disk_keys, s.tail_file)
            else:
                B = self.block_tokens
                tokens = list(s.cache.tokens)
                keys = self.store.keys_for(tokens, s.salt)
                known = set(s.disk_keys)
                # Incremental: only blocks not on disk yet, and the new tail, are copied and written.
                new_blocks = [(k, tokens[i * B:(i + 1) * B], s.cache.export(i * B, (i + 1) * B))
                              for i, k in enumerate(keys) if k not in known and not self.store.has(k)]
                tail_toks = tokens[len(keys) * B:]
                tail = s.cache.export(len(keys) * B, len(tokens)) if tail_toks else None
                for key in keys:     # referenced from now on: the janitor must not take them
                    self._refs.setdefault(key, set()).add(s.id)
                history = s.history
                job = lambda: self._write_pinned(s, tokens, keys, new_blocks, tail_toks, tail, transcript, history)
            s.pending_saves += 1
        self._writer.submit(job).add_done_callback(lambda f: self._saved(s, f))

    def _saved(self, s: _Session, fut: Future) -> None:
        with self._lock:
            s.pending_saves -= 1
            exc = fut.exception()
            s.save_error = None if exc is None else f"saving the session failed: {exc}"

    def _write_pinned(self, s: _Session, tokens: list[int], keys: list[str],
                      new_blocks: list[tuple[str, list[int], np.ndarray]], tail_toks: list[int],
                      tail: np.ndarray | None, transcript: list[dict[str, str]],
                      history: TokenHistory | None = None) -> None:
        if s.kind != SessionKind.PINNED:
            return   # unpinned or deleted while queued
        # Shared from the first block to the manifest: another process's gc or cache clear waits,
        # then sees the manifest naming these blocks (engine/locks.py).
        with self.locks.blocks(shared=True, timeout=BLOCKS_LOCK_WAIT_S):
            for key, toks, payload in new_blocks:
                if not self.store.has(key):
                    self.store.write(key, toks, payload)
                    self.prefix.note_written(key)
            # A block that was on disk at the snapshot may have been evicted by another process
            # since: the manifest then covers only the blocks that are there (the rest of the KV
            # is recomputed on resume; the transcript is complete either way).
            present = next((i for i, k in enumerate(keys) if not self.store.has(k)), len(keys))
            dropped = keys[present:]
            if dropped:
                tokens, keys, tail, tail_toks = tokens[:present * self.block_tokens], keys[:present], None, []
            tail_name = None
            if tail is not None:
                tail_name = f"{s.id}.{uuid.uuid4().hex[:8]}.kvt"
                check_inside(self.state_dir, self._tails_dir / tail_name)   # never through a symlinked folder
                write_kv_file(self._tails_dir / tail_name, self.shape, tail_toks, tail, {"session": s.id})
            old_tail = s.tail_file
            s.transcript = transcript if transcript else s.transcript
            # The manifest goes last: a crash before this line leaves the previous state valid.
            self._write_manifest(s, tokens, keys, tail_name, kind=SessionKind.PINNED, history=history)
        with self._lock:
            for key in s.disk_keys + dropped:
                if key not in keys:
                    self._refs.get(key, set()).discard(s.id)
            for key in keys:
                self._refs.setdefault(key, set()).add(s.id)
            s.disk_tokens, s.disk_keys, s.tail_file = tokens, keys, tail_name
        if old_tail and old_tail != tail_name:
            unlink_inside(self.state_dir, self._tails_dir / old_tail)
        self._drop_foreign(s)       # the manifest no longer names them
        # Blocks this session no longer uses stay as unpinned shared cache (budget and age apply).
        self.prefix.trigger()

    def _drop_foreign(self, s: _Session) -> None:
        """Releases KV saved under another model or store setting (see `_Session.foreign_keys`)
        once the manifest no longer names it; the blocks stay as shared cache."""
        with self._lock:
            self._unreference(s, s.foreign_keys, remove_blocks=False)
            tail, s.foreign_keys, s.foreign_tail = s.foreign_tail, [], None
        if tail:
            unlink_inside(self.state_dir, self._tails_dir / tail)

    def _unreference(self, s: _Session, keys: list[str], remove_blocks: bool) -> list[str]:
        """Drops the session's references to `keys` (call under the manager lock: a concurrent save
        cannot start referencing a block being removed); with `remove_blocks`, removes those no
        other pinned session uses and returns them."""
        for key in keys:
            self._refs.get(key, set()).discard(s.id)
        removed = [key for key in keys if remove_blocks and not self._is_pinned_block(key)]
        for key in removed:
            self.store.remove(key)
        return removed

    def _write_regular(self, s: _Session, transcript: list[dict[str, str]] | None = None) -> None:
        """A regular session keeps only its manifest (transcript); pinned files are released."""
        self._release_files(s)
        if transcript is not None:
            s.transcript = transcript
        if s.transcript:
            self._write_manifest(s, [], [], None, kind=SessionKind.REGULAR)
        else:
            self._manifests.remove(s.id)

    def _release_files(self, s: _Session, remove_blocks: bool = False) -> None:
        """Drops the session's block references and its private tail. Unpinning leaves the blocks to
        the shared cache (budget and age apply); deleting removes those no other pinned session uses
        (in this process or, by their manifests, in any other)."""
        with self._deletion_guard() if remove_blocks else _nothing(), self._lock:
            removed = self._unreference(s, s.disk_keys + s.foreign_keys, remove_blocks)
            tails = [t for t in (s.tail_file, s.foreign_tail) if t]
            s.tail_file = s.foreign_tail = None
            s.disk_keys, s.disk_tokens, s.foreign_keys = [], [], []
        for key in removed:
            self.prefix.note_removed(key)
        if not remove_blocks:
            self.prefix.trigger()
        for tail in tails:
            unlink_inside(self.state_dir, self._tails_dir / tail)

    def _delete_files(self, session_id: str) -> None:
        s = self._read_manifest(session_id, repair=False) or _Session(session_id, SessionKind.REGULAR, None)
        s.kind = SessionKind.TEMPORARY   # stops queued saves of this session
        self._release_files(s, remove_blocks=True)
        self._manifests.remove(session_id)
        for stray in self._tails_dir.glob(f"{session_id}.*") if self._tails_dir.is_dir() else []:
            unlink_inside(self.state_dir, stray)

    def _write_manifest(self, s: _Session, tokens: list[int], keys: list[str], tail: str | None,
                        kind: SessionKind | None = None, history: TokenHistory | None = None) -> None:
        check_inside(self.state_dir, self._manifests.path(s.id))
        history = history if history is not None else s.history
        self._manifests.write(Manifest(
            s.id, (kind or s.kind).value, self.shape.fingerprint, s.salt, self.block_tokens, list(tokens),
            list(keys), tail, list(s.transcript), time.time(),
            history=history.to_json() if history.ids else None))    # token-exact history (engine.history)

    def _read_manifest(self, sid: str, repair: bool = True) -> _Session | None:
        """The session as its manifest describes it (engine.manifest validates every field). A
        damaged manifest is moved aside (with `repair`) and the previous version used; the reason
        is kept in `manifest_error` and becomes the next turn's fallback_reason. None: no manifest."""
        loaded = self._manifests.load(sid, repair=repair)
        m = loaded.manifest
        if m is None:
            if loaded.error is None:
                return None
            s = _Session(sid, SessionKind.REGULAR, None)
        else:
            s = _Session(sid, SessionKind(m.kind), m.cache_salt, transcript=list(m.transcript))
        if loaded.error is not None:
            s.manifest_error = f"damaged manifest: {loaded.error}"
            s.repair_note = s.manifest_error
        if m is None:
            return s
        same_model = m.fingerprint == self.shape.fingerprint
        if m.history is not None and m.fingerprint.split("/")[0] == self.model.fingerprint:
            try:   # the same tokenizer made it (a KV store change keeps it valid)
                s.history = TokenHistory.from_json(m.history, self.planner.vocab_size)
            except HistoryFormatError:
                pass   # the next turn tokenizes the conversation afresh
        same_layout = m.block_tokens == self.block_tokens
        if s.kind == SessionKind.PINNED:
            if same_model and same_layout:
                s.disk_tokens, s.disk_keys, s.tail_file = m.tokens, m.blocks, m.tail
            elif m.tokens:
                s.foreign_keys, s.foreign_tail = m.blocks, m.tail
                if not same_model and m.fingerprint.split("/")[0] == self.model.fingerprint:
                    why = "saved with another KV store setting"
                else:
                    why = "made by another model" if not same_model else "an older store format"
                note = f"saved KV unusable ({why}); re-prefilled from the history"
                s.repair_note = f"{s.repair_note}; {note}" if s.repair_note else note
        return s

    def _disk_bytes(self, s: _Session) -> int:
        total = sum(self.store.size(k) for k in s.disk_keys)
        if s.tail_file:
            try:
                total += (self._tails_dir / s.tail_file).stat().st_size
            except OSError:
                pass
        return total

    # ---- memory budget -------------------------------------------------------------------------
    def _enforce_budget(self, keep: str | None = None) -> None:
        """Drops least-recently-used idle sessions' KV until live KV fits the budget. Pinned ones are
        on disk already; regular ones are rebuilt by prefill; temporary ones are never dropped."""
        with self._lock:
            live = [s for s in self._open.values() if s.cache is not None]
            total = sum(s.cache.nbytes for s in live)   # type: ignore[union-attr]
            for s in sorted(live, key=lambda x: x.last_used):
                if total <= self.memory_budget:
                    break
                if s.id == keep or s.kind == SessionKind.TEMPORARY or s.pending_saves:
                    continue
                if not s.lock.acquire(blocking=False):
                    continue
                try:
                    cache, s.cache = s.cache, None
                    assert cache is not None
                    total -= cache.nbytes
                    if s.kind == SessionKind.REGULAR:
                        self._spill(s, cache)     # to the shared disk tier
                    else:
                        cache.clear()             # pinned: already on disk
                    self._evictions += 1
                finally:
                    s.lock.release()

    # ---- startup -------------------------------------------------------------------------------
    def _reconcile(self) -> dict[str, int]:
        """Crash leftovers: temp files, tails and blocks no live manifest refers to. Files another
        live process may still rename or reference are left alone: temp files whose writer's pid
        lock is held, tails of a chat open in another process (engine/locks.py)."""
        report = {"temp_files": 0, "orphan_tails": 0, "bad_manifests": 0}
        live_tails: set[str] = set()
        keep_sessions: set[str] = set()          # damaged, no previous version: keep its files
        for folder in (self._sessions_dir, self._manifests.prev):
            report["temp_files"] += self._remove_dead_temp_files(folder.glob(".*.tmp") if folder.is_dir() else [])
        for sid in self._manifests.ids():
            s = self._read_manifest(sid, repair=False)
            if s is None:
                continue
            if s.manifest_error:
                report["bad_manifests"] += 1
                keep_sessions.add(sid)
            for key in s.disk_keys + s.foreign_keys:
                self._refs.setdefault(key, set()).add(s.id)
            live_tails.update(t for t in (s.tail_file, s.foreign_tail) if t)
        with self._lock:
            for s in self._open.values():
                live_tails.update(t for t in (s.tail_file, s.foreign_tail) if t)
                keep_sessions.add(s.id)
        if self._tails_dir.is_dir():
            for f in self._tails_dir.iterdir():
                if f.name.endswith(".tmp"):
                    report["temp_files"] += self._remove_dead_temp_files([f])
                    continue
                if f.name in live_tails:
                    continue
                owner = f.name.split(".", 1)[0]
                if owner in keep_sessions or (canonical_id(owner) and self.locks.session_live_elsewhere(owner)):
                    continue      # a live writer's fresh tail: its manifest is about to name it
                if unlink_inside(self.state_dir, f):
                    report["orphan_tails" if f.suffix == ".kvt" else "temp_files"] += 1
        report["temp_files"] += self.store.remove_temp_files(self.locks.pid_alive)
        # Unreferenced blocks are the shared cache's disk tier, kept within its budget and age;
        # files that are not Amber KV blocks at all are strays.
        try:
            with self._deletion_guard():
                report["stray_blocks"] = self.store.remove_misplaced_files()
                for key in list(self.store.keys_on_disk()):
                    if not self._is_pinned_block(key) and not looks_like_kv_file(self.store.path(key)):
                        self.store.remove(key)
                        report["stray_blocks"] += 1
        except LockTimeout:
            report["stray_blocks"] = 0
        self.locks.remove_stale_pid_locks()
        self.prefix.rebuild_index()
        swept = self.prefix.enforce()
        report["expired_blocks"], report["evicted_blocks"] = swept["expired"], swept["evicted"]
        return report

    def _remove_dead_temp_files(self, paths: Any) -> int:
        """Temp files (`.<name>.<pid>.tmp`) whose writer is gone; a live writer's stay."""
        n = 0
        for tmp in paths:
            pid = tmp.name.rsplit(".", 2)[-2] if tmp.name.count(".") >= 2 else ""
            if pid.isdigit() and self.locks.pid_alive(int(pid)):
                continue
            if unlink_inside(self.state_dir, tmp):
                n += 1
        return n

    def gc(self) -> dict[str, int]:
        """Runs the startup reconciliation again (CLI `sessions gc`)."""
        self._writer.drain(30)
        with self._lock:
            self._refs.clear()
        return self._writer.submit(self._reconcile).result()
