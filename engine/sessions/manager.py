"""Sessions: one per conversation, each owning a token history and its KV cache.

pinned    — KV on disk in the block store (manifest + shared blocks + private tail), saved
            incrementally in the background; resumes after a restart with no prefill.
regular   — KV in memory, dropped under memory pressure and rebuilt by prefill.
temporary — never on disk; close() frees everything.

This module is the manager: the engine API, the open sessions, per-session locks and streaming.
On disk: engine.sessions.persistence (run on the writer thread, engine.sessions.writer);
manifests: engine.sessions.manifest; block references: engine.sessions.refs; the memory
budget: engine.sessions.budget. The locking rules: docs/DESIGN.md, "Locking".
"""
from __future__ import annotations

import functools
import threading
import time
import types
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from engine.api import (KV_STORE_MODEL, CacheSaltMismatch, CancelToken, ChatMessage, EngineCapabilities,
                        GenerationFigures, GenerationResult, KVLocation, ModelNotReady, SamplingParams,
                        SessionBusy, SessionInfo, SessionKind, SessionKindConflict, SessionNotOpen,
                        StreamEvent)
from engine.generation.chat_history import ChatPlanner
from engine.generation.generate import Generator, common_prefix
from engine.kvstore.blockstore import DEFAULT_BLOCK_TOKENS, BlockStore
from engine.kvstore.prefix_cache import (DEFAULT_DISK_TIER_BYTES, DEFAULT_MAX_AGE_S, DEFAULT_MEMORY_TIER_BYTES,
                                         PrefixCache)
from engine.runtime.model import LoadedModel
from engine.sessions.budget import DEFAULT_MEMORY_BUDGET, MemoryBudget
from engine.sessions.locks import LockTimeout, StateLocks, default_wait_s
from engine.sessions.manifest import ManifestDir
from engine.sessions.persistence import SessionFiles
from engine.sessions.refs import BlockRefs
from engine.sessions.session import Session, SessionError, next_use, store_shape
from engine.sessions.writer import SerialWriter
from engine.text.chat_template import ChatTemplate, NoChatTemplate
from engine.text.logprobs import TokenBytes
from engine.text.tool_calls import detect_format

__all__ = ["DEFAULT_MEMORY_BUDGET", "CacheSaltMismatch", "ModelNotReady", "SessionBusy", "SessionError",
           "SessionKindConflict", "SessionManager", "SessionNotOpen", "store_shape"]

_Session = Session


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
        self.budget = MemoryBudget(memory_budget_bytes)
        self.shape = store_shape(model, kv_store)
        self.store = BlockStore(self.state_dir, self.shape, block_tokens)
        self.block_tokens = block_tokens
        self._manifests = ManifestDir(self.state_dir / "sessions")
        self.locks = StateLocks(self.state_dir)
        self.lock_wait_s = default_wait_s() if lock_wait_s is None else lock_wait_s
        # The manager's lock: the open sessions, every session's fields but its cache during a
        # generation, and this process's block references (docs/DESIGN.md, "Locking").
        self._lock = threading.RLock()
        self._open: dict[str, Session] = {}
        self.refs = BlockRefs(self._manifests, self.locks, self.store.root, self._lock)
        self._evictions = 0
        self._prefilled = 0         # prompt tokens prefilled by every generation (stats())
        self._writer = SerialWriter(self.locks.hold_process)
        self.prefix = PrefixCache(self.store, self.refs, memory_bytes=cache_memory_bytes,
                                  disk_bytes=cache_disk_bytes, max_age_s=cache_max_age_s, clock=clock)
        self.disk = SessionFiles(model, self.planner, self.state_dir, self.shape, self.store, self._manifests,
                                 self.locks, self.refs, self.prefix, self._writer, self._lock,
                                 lambda: list(self._open.values()))
        self._closed = False
        self.startup_report = self.disk.reconcile()
        self.prefix.start()

    @property
    def memory_budget(self) -> int:
        return self.budget.bytes

    @memory_budget.setter
    def memory_budget(self, value: int) -> None:
        self.budget.bytes = value

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

    @property
    def batches_decode(self) -> bool:
        """Sessions decoding at once from different threads share each step's run (one ONNX
        Runtime call for all: engine.runtime.batcher), so callers may drive them in parallel."""
        runner = self.generator.runner
        return runner.batcher is not None and runner.batch_decode

    @property
    def capabilities(self) -> EngineCapabilities:
        return EngineCapabilities(batches_decode=self.batches_decode, token_prompts=True,
                                  state_dir=self.state_dir,
                                  provider_fallback=self.model.provider_fallback_reason,
                                  tool_format=self._tool_format)

    @functools.cached_property
    def _tool_format(self) -> str | None:
        try:
            template = self.generator.template
        except NoChatTemplate:      # a base model: no chat, so no tools either
            return None
        fmt = detect_format(template)
        return fmt.name if fmt is not None else None

    # ---- TokenEngine surface ------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return int(self.model.tokenizer.get_vocab_size(with_added_tokens=True))

    @property
    def model_fingerprint(self) -> str:
        return self.model.fingerprint

    def token_bytes(self, token_id: int) -> bytes:
        return self._token_bytes(token_id)

    @functools.cached_property
    def _token_bytes(self) -> TokenBytes:
        return TokenBytes(self.model.tokenizer)

    def encode_chat(self, messages: Sequence[ChatMessage | Mapping[str, Any]],
                    tools: list[dict[str, Any]] | None = None) -> list[int]:
        return self.generator.encode_chat(messages, tools)

    @property
    def chat_template(self) -> ChatTemplate:
        return self.generator.template

    def encode_prompt(self, prompt: str) -> list[int]:
        return self.generator.encode_prompt(prompt)

    def open(self, session_id: str | None = None, kind: SessionKind | str | None = None,
             cache_salt: str | None = None) -> SessionInfo:
        """Opens (or creates) a session. An existing pinned/regular session keeps its kind unless
        one is given; a new one is regular unless told otherwise."""
        self._check_running()
        sid = str(uuid.UUID(session_id)) if session_id else str(uuid.uuid4())
        wanted = SessionKind(kind) if kind is not None else None
        s = self._open_locked(sid, wanted, cache_salt)
        if wanted is not None and wanted != s.kind:
            if SessionKind.TEMPORARY in (wanted, s.kind):
                raise SessionKindConflict(f"session {sid} is {s.kind.value}; a temporary session cannot "
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
                            raise SessionKindConflict(f"session {sid} is saved on disk; a temporary session "
                                               "cannot reuse a persistent session's id")
                        s = _Session(sid, wanted, cache_salt)
                    else:
                        s = self.disk.read_manifest(sid) or _Session(sid, wanted or SessionKind.REGULAR, cache_salt)
                    self._check_salt(s, cache_salt)
                    self._open[sid] = s
                    return s
                self._check_salt(s, cache_salt)
                return s

    def _lock_session(self, sid: str) -> None:
        try:
            self.locks.lock_session(sid, self.lock_wait_s)
        except LockTimeout:
            raise SessionBusy(f"this chat is open in another Amber process (session {sid}); "
                               "close it there, or try again") from None
        except OSError as exc:     # locks/ unusable: a symlink, a read-only folder, ...
            raise SessionError(f"this chat cannot be locked (session {sid}): {exc.strerror or exc}") from None

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
        raise CacheSaltMismatch(f"session {s.id} {why}")

    def _release_lock_if_closed(self, sid: str) -> None:
        with self._lock:
            if sid not in self._open:
                # The file goes too (a waiter retries on the new one): `locks/` holds open chats only.
                self.locks.unlock_session(sid, remove=True)

    def generate(self, session_id: str, messages: Sequence[ChatMessage | Mapping[str, Any]],
                 sampling: SamplingParams | None = None, cancel: CancelToken | None = None,
                 tools: list[dict[str, Any]] | None = None) -> Iterator[StreamEvent]:
        """Streams a reply to `messages` (the whole conversation, rendered by the chat template;
        `tools`: function schemas the template shows the model, as HF's apply_chat_template).

        The prompt is the token ids the session already holds for the part of the conversation it
        has seen, plus the tokenization of the rest (engine.generation.history); `sampling.overflow` decides
        what is left out when it does not fit the context window (engine.generation.overflow)."""
        self._check_running()
        if tools and self._tool_format is None:
            raise ValueError(f"{self.model_name}'s chat template shows the model no tools")
        s = self._get(session_id)
        job = self.planner.prepare(messages, sampling, tools=tools)     # template and policy errors: now
        return self._stream(s, job, sampling, cancel)

    def generate_tokens(self, session_id: str, prompt_ids: Sequence[int], sampling: SamplingParams | None = None,
                        cancel: CancelToken | None = None) -> Iterator[StreamEvent]:
        self._check_running()
        s = self._get(session_id)
        return self._stream(s, list(prompt_ids), sampling, cancel)

    def generate_choices(self, session_id: str, prompt_ids: Sequence[int], samplings: Sequence[SamplingParams],
                         cancel: CancelToken | None = None) -> Iterator[tuple[int, StreamEvent]]:
        """`len(samplings)` replies to one prompt (engine.generation.generate.stream_choices): the
        prompt prefilled once, the replies decoded together. The session keeps choice 0's."""
        self._check_running()
        if not samplings:
            raise ValueError("no choices asked for")
        s = self._get(session_id)
        return self._stream(s, list(prompt_ids), samplings[0], cancel, choices=list(samplings))

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
            with self._lock:
                s.transcript = history + [{"role": "assistant", "content": result.text}]
            if s.kind == SessionKind.REGULAR:
                self.disk.save_async(s)     # pinned sessions are saved with their KV right after
        yield from self._stream(s, job, sampling, cancel, on_result=record)

    def pin(self, session_id: str) -> None:
        """Makes a session persistent: its KV is written in the background."""
        s = self._get(session_id)
        if s.kind == SessionKind.TEMPORARY:
            raise SessionKindConflict("a temporary session cannot be pinned")
        with self._lock:
            s.kind = SessionKind.PINNED
        self.disk.save_async(s)

    def unpin(self, session_id: str) -> None:
        """Back to regular: the session's private files go and its block references are released."""
        s = self._get(session_id)
        if s.kind != SessionKind.PINNED:
            return
        with self._lock:
            s.kind = SessionKind.REGULAR
        self._writer.submit(lambda: self.disk.write_regular(s)).result()

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
                    self.disk.spill(s, cache)     # the writer frees the cache when done
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
                self.disk.delete_files(sid)
            finally:
                with self._lock:
                    if sid not in self._open:
                        self.locks.unlock_session(sid, remove=True)
        self._writer.submit(job).result()

    def info(self, session_id: str) -> SessionInfo:
        s = self._get(session_id)
        mem = s.cache.nbytes if s.cache is not None else 0
        disk = self.disk.disk_bytes(s) if s.kind == SessionKind.PINNED else 0
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
            "prefilled_tokens": self._prefilled,    # prompt tokens computed by every generation so far
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
            raise SessionBusy("the block store is busy (a save in another Amber process); try again") from None

    def count_tokens(self, text: str) -> int | None:
        """The model's tokenizer over `text` (no special tokens: what a message adds to a prompt)."""
        return len(self.model.tokenizer.encode(text, add_special_tokens=False).ids)

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
            s = opened.get(sid) or self.disk.read_manifest(sid, repair=False)
            if s is None:
                continue
            if s is opened.get(sid):
                out.append(self.info(sid))
                continue
            disk = self.disk.disk_bytes(s) if s.kind == SessionKind.PINNED else 0
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
            raise SessionNotOpen(f"session {session_id} is not open")
        return s

    def _check_running(self) -> None:
        if self._closed:
            raise ModelNotReady(f"the engine for {self.model.name} was shut down")

    def _stream(self, s: _Session, prompt_or_job: Any, sampling: SamplingParams | None,
                cancel: CancelToken | None,
                on_result: Callable[[GenerationResult], None] | None = None,
                choices: list[SamplingParams] | None = None) -> Iterator[Any]:
        """`prompt_or_job`: token ids, or a chat job of the planner (planned here, under the
        session's lock, against the history the session holds now). With `choices` (token ids
        only): (choice index, event) pairs of that many replies; after the last result the
        session holds choice 0's."""
        if not s.lock.acquire(blocking=False):
            raise SessionBusy(f"session {s.id} is already generating")
        try:
            if self._open.get(s.id) is not s:
                raise SessionNotOpen(f"session {s.id} was closed")
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
                    max_new = max(p.max_new_tokens for p in choices or [sampling or SamplingParams()])
                    self.disk.load_from_disk(s, max(len(prompt), len(s.disk_tokens)) + max_new)
                    figures.resume_ms = (time.perf_counter() - t0) * 1000
            if s.repair_note:
                figures.fallback_reason, s.repair_note = s.repair_note, None
            t0 = time.perf_counter()
            if self._fill_from_shared(s, prompt, figures):
                origin = KVLocation.DISK
            figures.resume_ms += (time.perf_counter() - t0) * 1000 if (
                figures.cache_tokens_memory or figures.cache_tokens_disk) else 0.0
            s.last_used = next_use()
            finished = False
            events: Iterator[Any]
            if choices is None:
                events = self.generator.stream(s.cache, prompt, sampling, cancel, origin=origin,
                                               figures=figures, started=started)
            else:
                events = self.generator.stream_choices(s.cache, prompt, choices, cancel, origin=origin,
                                                       figures=figures, started=started)
            results = 0
            try:
                for event in events:
                    result = event[1] if isinstance(event, tuple) else event
                    if isinstance(result, GenerationResult):
                        results += 1
                        with self._lock:
                            self._prefilled += result.figures.prefilled_tokens
                        if plan is not None:
                            s.history = self.planner.record(s.history, plan, result.token_ids)
                        if on_result is not None:
                            on_result(result)
                        if results == (1 if choices is None else len(choices)):
                            self._after_generation(s)      # before the result: a caller may stop there
                            finished = True
                    yield event
            finally:
                # Abandoned mid-stream: the decode loop ends now (its cache leaves the batch pool,
                # engine.runtime.kvpool), before the session's lock lets another turn touch it.
                if isinstance(events, types.GeneratorType):
                    events.close()
                if not finished and s.cache is not None:
                    self._after_generation(s)          # abandoned mid-stream: keep what was computed
        finally:
            s.lock.release()
        self._enforce_budget(keep=s.id)

    def _after_generation(self, s: _Session) -> None:
        s.last_used = next_use()
        # A device cache's blocks are copied in the writer, from the save's snapshot when pinned
        # (never a download on this thread); host arrays are copied here, at once.
        on_device = s.cache is not None and s.cache.on_device
        if s.kind != SessionKind.TEMPORARY and not (on_device and s.kind == SessionKind.PINNED):
            self._publish(s)
        if s.kind == SessionKind.PINNED:
            self.disk.save_async(s, publish=on_device)

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
        if s.cache.on_device:
            self.disk.publish_async(s)
        else:
            self.disk.publish_blocks(s.cache, s.cache.tokens, s.salt)

    # ---- memory budget -------------------------------------------------------------------------
    def _enforce_budget(self, keep: str | None = None) -> None:
        """Drops least-recently-used idle sessions' KV until live KV fits the budget (the policy:
        engine.sessions.budget). Pinned ones are on disk already; regular ones are rebuilt by
        prefill; temporary ones are never dropped."""
        with self._lock:
            total = self.budget.live_bytes(self._open.values())
            for s in self.budget.candidates(list(self._open.values()), keep):
                if total <= self.budget.bytes:
                    break
                if not s.lock.acquire(blocking=False):
                    continue
                try:
                    cache, s.cache = s.cache, None
                    assert cache is not None
                    total -= cache.nbytes
                    if s.kind == SessionKind.REGULAR:
                        self.disk.spill(s, cache)     # to the shared disk tier
                    else:
                        cache.clear()                 # pinned: already on disk
                    self._evictions += 1
                finally:
                    s.lock.release()

    # ---- clean-up ------------------------------------------------------------------------------
    def gc(self) -> dict[str, int]:
        """Runs the startup reconciliation again (CLI `sessions gc`)."""
        self._writer.drain(30)
        with self._lock:
            self.refs.clear()
        return dict(self._writer.submit(self.disk.reconcile).result())
