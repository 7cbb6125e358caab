"""Sessions: one per conversation, each owning a token history and its KV cache.

pinned    — KV on disk in the block store (manifest + shared blocks + private tail), saved
            incrementally in the background; resumes after a restart with no prefill.
regular   — KV in memory, dropped under memory pressure and rebuilt by prefill.
temporary — never on disk; close() frees everything.
"""
from __future__ import annotations

import json
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
from .model import LoadedModel
from .prefix_cache import (DEFAULT_DISK_TIER_BYTES, DEFAULT_MAX_AGE_S, DEFAULT_MEMORY_TIER_BYTES,
                           PrefixCache)

MANIFEST_VERSION = 1
LOAD_THREADS = 4                # reads of saved KV in flight at once (I/O-bound: more than the cores)
DEFAULT_MEMORY_BUDGET = 1 << 30


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
    # KV saved under another model or KV store setting: unusable here, but kept (and protected
    # from the shared cache's eviction) until this session is saved again, unpinned or deleted,
    # so that switching back finds it intact.
    foreign_keys: list[str] = field(default_factory=list)
    foreign_tail: str | None = None
    # The token ids this session holds and the template text they stand for (engine.history):
    # the source of truth for the next turn's prompt, saved in the manifest.
    history: TokenHistory = field(default_factory=TokenHistory)
    overflow_start: int | None = None  # where the last overflow cut started (kept while it fits)


class _Writer:
    """The single thread that touches session files: saves never block generation."""

    def __init__(self) -> None:
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
                fut.set_result(job())
            except BaseException as exc:   # reported through the future
                fut.set_exception(exc)

    def drain(self, timeout: float) -> bool:
        """Waits for the jobs queued so far; False when the timeout passed first."""
        from concurrent.futures import TimeoutError as FutureTimeout
        if not self._thread.is_alive():
            return self._jobs.empty()
        try:
            self.submit(lambda: None).result(timeout)
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
                 kv_store: str = KV_STORE_MODEL) -> None:
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
        self._lock = threading.RLock()
        self._open: dict[str, _Session] = {}
        self._refs: dict[str, set[str]] = {}      # block key -> pinned sessions referencing it
        self._evictions = 0
        self._writer = _Writer()
        self.prefix = PrefixCache(self.store, self._is_pinned_block, self._lock, memory_bytes=cache_memory_bytes,
                                  disk_bytes=cache_disk_bytes, max_age_s=cache_max_age_s, clock=clock)
        self._closed = False
        self.startup_report = self._reconcile()
        self.prefix.start()

    def _is_pinned_block(self, key: str) -> bool:
        with self._lock:
            return bool(self._refs.get(key))

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
        with self._lock:
            s = self._open.get(sid)
            if s is None:
                s = self._read_manifest(sid) or _Session(sid, wanted or SessionKind.REGULAR, cache_salt)
                self._open[sid] = s
        if wanted is not None and wanted != s.kind:
            if SessionKind.TEMPORARY in (wanted, s.kind):
                raise SessionError(f"session {sid} is {s.kind.value}; a temporary session cannot "
                                   "become persistent or the other way round")
            # Outside the lock: unpin waits for the writer, which takes the lock.
            (self.pin if wanted == SessionKind.PINNED else self.unpin)(sid)
        return self.info(sid)

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

    def delete(self, session_id: str) -> None:
        """Forgets a session: memory, manifest, private files and block references."""
        self.close(session_id)
        self._writer.submit(lambda: self._delete_files(session_id)).result()

    def info(self, session_id: str) -> SessionInfo:
        s = self._get(session_id)
        mem = s.cache.nbytes if s.cache is not None else 0
        disk = self._disk_bytes(s) if s.kind == SessionKind.PINNED else 0
        where = KVLocation.MEMORY if mem else KVLocation.DISK if disk else KVLocation.NONE
        tokens = len(s.cache) if s.cache is not None else len(s.disk_tokens)
        return SessionInfo(session_id=s.id, kind=s.kind, tokens=tokens, kv_location=where,
                           kv_bytes_memory=mem, kv_bytes_disk=disk, cache_salt=s.salt,
                           saving=s.pending_saves > 0, save_error=s.save_error)

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
        return self.prefix.clear()

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

    # ---- listing (CLI) -------------------------------------------------------------------------
    def list_sessions(self) -> list[SessionInfo]:
        ids = set(self._open)
        if self._sessions_dir.is_dir():
            ids |= {p.stem for p in self._sessions_dir.glob("*.json")}
        out = []
        for sid in sorted(ids):
            try:
                if sid not in self._open:
                    self.open(sid)
                out.append(self.info(sid))
            except SessionError:
                continue
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
                tail = read_kv_file(damaged, self.shape, tail_toks)
                s.cache.append_block(tail, tail_toks)
        except KVFileError as exc:
            s.repair_note = f"saved KV unusable ({exc}); re-prefilled {len(s.disk_tokens) - len(s.cache)} tokens"
            self._repair(s, len(s.cache), damaged)

    def _repair(self, s: _Session, valid_tokens: int, damaged: Path | None) -> None:
        """Removes the damaged file (a damaged block is useless to every session that shares it; the
        next save writes it again) and shortens the manifest to the valid prefix."""
        B = self.block_tokens
        keep = valid_tokens // B
        with self._lock:
            for key in s.disk_keys[keep:]:
                self._refs.get(key, set()).discard(s.id)
            s.disk_keys = s.disk_keys[:keep]
            s.disk_tokens = s.disk_tokens[:keep * B]
            s.tail_file = None

            # Removed now, not in the writer: this turn's save must see the block missing and
            # write it again rather than reference the damaged file.
            if damaged is not None:
                damaged.unlink(missing_ok=True)
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
        for key, toks, payload in new_blocks:
            if not self.store.has(key):
                self.store.write(key, toks, payload)
                self.prefix.note_written(key)
        tail_name = None
        if tail is not None:
            tail_name = f"{s.id}.{uuid.uuid4().hex[:8]}.kvt"
            write_kv_file(self._tails_dir / tail_name, self.shape, tail_toks, tail, {"session": s.id})
        old_tail = s.tail_file
        s.transcript = transcript if transcript else s.transcript
        # The manifest goes last: a crash before this line leaves the previous state valid.
        self._write_manifest(s, tokens, keys, tail_name, kind=SessionKind.PINNED, history=history)
        with self._lock:
            for key in s.disk_keys:
                if key not in keys:
                    self._refs.get(key, set()).discard(s.id)
            for key in keys:
                self._refs.setdefault(key, set()).add(s.id)
            s.disk_tokens, s.disk_keys, s.tail_file = tokens, keys, tail_name
        if old_tail and old_tail != tail_name:
            (self._tails_dir / old_tail).unlink(missing_ok=True)
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
            (self._tails_dir / tail).unlink(missing_ok=True)

    def _unreference(self, s: _Session, keys: list[str], remove_blocks: bool) -> list[str]:
        """Drops the session's references to `keys` (call under the manager lock: a concurrent save
        cannot start referencing a block being removed); with `remove_blocks`, removes those no
        other pinned session uses and returns them."""
        for key in keys:
            self._refs.get(key, set()).discard(s.id)
        removed = [key for key in keys if remove_blocks and not self._refs.get(key)]
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
            (self._sessions_dir / f"{s.id}.json").unlink(missing_ok=True)

    def _release_files(self, s: _Session, remove_blocks: bool = False) -> None:
        """Drops the session's block references and its private tail. Unpinning leaves the blocks to
        the shared cache (budget and age apply); deleting removes those no other pinned session uses."""
        with self._lock:
            removed = self._unreference(s, s.disk_keys + s.foreign_keys, remove_blocks)
            tails = [t for t in (s.tail_file, s.foreign_tail) if t]
            s.tail_file = s.foreign_tail = None
            s.disk_keys, s.disk_tokens, s.foreign_keys = [], [], []
        for key in removed:
            self.prefix.note_removed(key)
        if not remove_blocks:
            self.prefix.trigger()
        for tail in tails:
            (self._tails_dir / tail).unlink(missing_ok=True)

    def _delete_files(self, session_id: str) -> None:
        s = self._read_manifest(session_id) or _Session(session_id, SessionKind.REGULAR, None)
        s.kind = SessionKind.TEMPORARY   # stops queued saves of this session
        self._release_files(s, remove_blocks=True)
        (self._sessions_dir / f"{session_id}.json").unlink(missing_ok=True)
        for stray in self._tails_dir.glob(f"{session_id}.*") if self._tails_dir.is_dir() else []:
            stray.unlink(missing_ok=True)

    def _write_manifest(self, s: _Session, tokens: list[int], keys: list[str], tail: str | None,
                        kind: SessionKind | None = None, history: TokenHistory | None = None) -> None:
        history = history if history is not None else s.history
        data = {"version": MANIFEST_VERSION, "session_id": s.id, "kind": (kind or s.kind).value,
                "fingerprint": self.shape.fingerprint, "cache_salt": s.salt, "block_tokens": self.block_tokens,
                "tokens": tokens, "blocks": keys, "tail": tail, "transcript": s.transcript,
                "updated": time.time()}
        if history is not None and history.ids:
            data["history"] = history.to_json()     # the token-exact history (engine.history)
        atomic_write(self._sessions_dir / f"{s.id}.json", [json.dumps(data).encode()])

    def _read_manifest(self, sid: str) -> _Session | None:
        path = self._sessions_dir / f"{sid}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None
        s = _Session(sid, SessionKind(data.get("kind", "regular")), data.get("cache_salt"),
                     transcript=list(data.get("transcript") or []))
        same_model = data.get("fingerprint") == self.shape.fingerprint
        if data.get("history") is not None and str(data.get("fingerprint", "")).split("/")[0] == self.model.fingerprint:
            try:   # the same tokenizer made it (a KV store change keeps it valid)
                s.history = TokenHistory.from_json(data["history"], self.planner.vocab_size)
            except HistoryFormatError:
                pass   # the next turn tokenizes the conversation afresh
        same_layout = data.get("block_tokens") == self.block_tokens and data.get("version") == MANIFEST_VERSION
        if s.kind == SessionKind.PINNED:
            if same_model and same_layout:
                s.disk_tokens = [int(t) for t in data.get("tokens", [])]
                s.disk_keys = list(data.get("blocks", []))
                s.tail_file = data.get("tail")
            elif data.get("tokens"):
                s.foreign_keys = [str(k) for k in data.get("blocks") or []]
                s.foreign_tail = data.get("tail")
                saved = str(data.get("fingerprint", ""))
                if not same_model and saved.split("/")[0] == self.model.fingerprint:
                    why = "saved with another KV store setting"
                else:
                    why = "made by another model" if not same_model else "an older store format"
                s.repair_note = f"saved KV unusable ({why}); re-prefilled from the history"
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
        """Crash leftovers: temp files, tails and blocks no live manifest refers to."""
        report = {"temp_files": 0, "orphan_tails": 0, "bad_manifests": 0}
        live_tails: set[str] = set()
        if self._sessions_dir.is_dir():
            for tmp in self._sessions_dir.glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
                report["temp_files"] += 1
            for path in self._sessions_dir.glob("*.json"):
                s = self._read_manifest(path.stem)
                if s is None:
                    report["bad_manifests"] += 1
                    continue
                for key in s.disk_keys + s.foreign_keys:
                    self._refs.setdefault(key, set()).add(s.id)
                live_tails.update(t for t in (s.tail_file, s.foreign_tail) if t)
        if self._tails_dir.is_dir():
            for f in self._tails_dir.iterdir():
                if f.name not in live_tails:
                    f.unlink(missing_ok=True)
                    report["orphan_tails" if f.suffix == ".kvt" else "temp_files"] += 1
        report["temp_files"] += self.store.remove_temp_files()
        # Unreferenced blocks are the shared cache's disk tier, kept within its budget and age;
        # files that are not Amber KV blocks at all are strays.
        report["stray_blocks"] = self.store.remove_misplaced_files()
        for key in list(self.store.keys_on_disk()):
            if not self._refs.get(key) and not looks_like_kv_file(self.store.path(key)):
                self.store.remove(key)
                report["stray_blocks"] += 1
        self.prefix.rebuild_index()
        swept = self.prefix.enforce()
        report["expired_blocks"], report["evicted_blocks"] = swept["expired"], swept["evicted"]
        return report

    def gc(self) -> dict[str, int]:
        """Runs the startup reconciliation again (CLI `sessions gc`)."""
        self._writer.drain(30)
        with self._lock:
            self._refs.clear()
        return self._writer.submit(self._reconcile).result()
