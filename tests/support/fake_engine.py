"""A small fake `ChatEngine` for GUI tests and the GUI benchmark.

Streams canned text word by word with a delay, honours the cancel token, returns
`GenerationFigures` that tell how the reply started (resumed from disk / memory, or prefilled),
tracks every open / pin / unpin / close / delete call, and keeps "pinned" sessions as small files
under its state directory so that a second instance over the same directory (an application
restart) resumes them from disk. Like the real engine it sends `PrefillProgress` events while it
"prefills" (`prefill_steps` of them, `prefill_delay` apart) and applies `SamplingParams.overflow`
when a history does not fit its `context_window` (reporting `dropped_messages/_tokens`).
Given a `tool_format` (a model whose template teaches tool calls), it takes `tools=` and messages
in the template's terms (assistant `tool_calls`, `tool` results), as the real engine does; without
one it refuses tools with ValueError. `requests` keeps each generation's messages and tools as given.

Its sessions follow the engine contract that tests/engine/test_engine_contract.py runs against
the real engines (this fake too): the same typed errors (`SessionNotOpen`, `SessionBusy`,
`SessionKindConflict`, `CacheSaltMismatch`, `ModelNotReady`) in the same cases; `close` forgets a
session (a pinned one stays on disk, and opening it again resumes it).
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from engine.api import (CacheSaltMismatch, ChatMessage, EngineCapabilities, GenerationFigures,
                        GenerationResult, KVLocation, ModelNotReady, OverflowPolicy, PrefillProgress,
                        SamplingParams, SessionBusy, SessionInfo, SessionKind, SessionKindConflict,
                        SessionNotOpen, StreamEvent, TextChunk)

DEFAULT_REPLY = (
    "Sure! Here is a short answer with **bold** text, a list and some code:\n\n"
    "1. First point\n2. Second point\n\n"
    "```python\ndef greet(name: str) -> str:\n    return f\"Hello, {name}!\"\n```\n\n"
    "| Provider | Speed |\n|---|---|\n| CPU | fine |\n| CUDA | fast |\n\n"
    "See [the docs](https://onnxruntime.ai) for more."
)


def as_chat_message(message: ChatMessage | Mapping[str, Any]) -> ChatMessage:
    """A message in the template's terms as the fake counts it: its text, and its tool calls as JSON."""
    if isinstance(message, ChatMessage):
        return message
    content = str(message.get("content") or "")
    if message.get("tool_calls"):
        content = (content + " " + json.dumps(message["tool_calls"])).strip()
    return ChatMessage(str(message.get("role", "")), content)


def count_tokens(messages: Sequence[ChatMessage]) -> list[str]:
    """The fake tokenization: one token per whitespace-separated word, plus one per message."""
    toks: list[str] = []
    for m in messages:
        toks.append(f"<{m.role}>")
        toks.extend(m.content.split())
    return toks


@dataclass
class _Session:
    kind: SessionKind
    history: list[str] = field(default_factory=list)  # tokens whose KV exists
    location: KVLocation = KVLocation.NONE
    saving: bool = False
    from_disk: bool = False
    save_error: str | None = None
    salt: str | None = None
    generating: bool = False
    saved_tokens: int = 0            # tokens whose KV the file on disk holds


class FakeEngine:
    provider = "CPUExecutionProvider"
    context_window = 2048
    model_name = "Fake-Model-135M"

    def __init__(self, state_dir: Path | None = None, *, delay: float = 0.004,
                 reply: str | Callable[[Sequence[ChatMessage]], str] = DEFAULT_REPLY,
                 resume_ms: float = 31.0, save_delay: float = 0.15,
                 tokens_per_s: float = 42.5, context_window: int = 2048,
                 prefill_steps: int = 4, prefill_delay: float = 0.0,
                 model_name: str = "Fake-Model-135M", tool_format: str | None = None):
        self.state_dir = Path(state_dir) if state_dir else None
        self.delay = delay
        self.reply = reply
        self.resume_ms = resume_ms
        self.save_delay = save_delay
        self.tokens_per_s = tokens_per_s
        self.context_window = context_window
        self.prefill_steps = prefill_steps
        self.prefill_delay = prefill_delay
        self.model_name = model_name
        self.capabilities = EngineCapabilities(state_dir=self.state_dir, tool_format=tool_format)
        self.requests: list[tuple[list[Any], list[dict[str, Any]] | None]] = []   # messages, tools
        self.prefilling = threading.Event()   # set while the fake prefill runs
        self.release_prefill = threading.Event()  # with hold_prefill: the prefill waits for it
        self.hold_prefill = False
        # Cleared by a test: a save starts its work (save_delay) once this is set (it waits up to 60 s).
        self.saves_may_finish = threading.Event()
        self.saves_may_finish.set()
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.generations: list[list[ChatMessage]] = []   # what the GUI asked for
        self.prompts: list[list[ChatMessage]] = []       # ... and what fitted (overflow policy)
        self.sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._saves: list[threading.Thread] = []
        self.generating = threading.Event()
        self.cancelled_count = 0
        self.shut_down = False
        # Set to an error text (e.g. "[Errno 28] No space left on device") to make pinned saves fail
        # as the real engine reports it: in `info().save_error`, the session still working in memory.
        self.fail_saves: str | None = None

    # --- helpers for tests -------------------------------------------------------------------
    def called(self, name: str) -> list[tuple[Any, ...]]:
        return [args for n, args in self.calls if n == name]

    def _disk(self, session_id: str) -> Path | None:
        return self.state_dir / f"{session_id}.kv.json" if self.state_dir else None

    def disk_files(self) -> list[Path]:
        return sorted(self.state_dir.glob("*.kv.json")) if self.state_dir and self.state_dir.exists() else []

    def _record(self, name: str, *args: Any) -> None:
        with self._lock:
            self.calls.append((name, args))

    # --- ChatEngine ----------------------------------------------------------------------------
    def open(self, session_id: str, kind: SessionKind = SessionKind.REGULAR,
             cache_salt: str | None = None) -> SessionInfo:
        self._record("open", session_id, SessionKind(kind), cache_salt)
        kind = SessionKind(kind)
        temporary = kind is SessionKind.TEMPORARY
        if self.shut_down:
            raise ModelNotReady("the fake engine was shut down")
        disk = self._disk(session_id)
        with self._lock:
            s = self.sessions.get(session_id)
            if s is None:
                if disk is not None and disk.exists():
                    if temporary:
                        raise SessionKindConflict(f"session {session_id} is saved on disk; a temporary "
                                                  "session cannot reuse a persistent session's id")
                    saved = json.loads(disk.read_text())
                    s = _Session(SessionKind.PINNED, history=saved["history"], salt=saved.get("salt"),
                                 saved_tokens=len(saved["history"]))
                    if s.history:
                        s.location, s.from_disk = KVLocation.DISK, True
                else:
                    s = _Session(kind, salt=cache_salt)
            if (s.kind is SessionKind.TEMPORARY) != temporary:
                raise SessionKindConflict(f"session {session_id} is {s.kind.value}; a temporary session "
                                          "cannot become persistent or the other way round")
            if s.salt != cache_salt:
                if s.salt is not None:
                    raise CacheSaltMismatch(f"session {session_id} was made with another cache salt")
                s.salt = cache_salt
            self.sessions[session_id] = s
            change = None if s.kind is kind else kind
        if change is SessionKind.PINNED:
            self.pin(session_id)
        elif change is SessionKind.REGULAR:
            self.unpin(session_id)
        return self.info(session_id)

    def _get(self, session_id: str) -> _Session:
        s = self.sessions.get(session_id)
        if s is None:
            raise SessionNotOpen(f"session {session_id} is not open")
        return s

    def generate(self, session_id: str, messages: Sequence[ChatMessage | Mapping[str, Any]],
                 sampling: SamplingParams | None = None, cancel: Any = None,
                 tools: list[dict[str, Any]] | None = None) -> Iterator[StreamEvent]:
        if tools and self.capabilities.tool_format is None:
            raise ValueError(f"{self.model_name}'s chat template shows the model no tools")
        self.requests.append((list(messages), tools))
        messages = [as_chat_message(m) for m in messages]
        self._record("generate", session_id, list(messages), sampling)
        self.generations.append(list(messages))
        if self.shut_down:
            raise ModelNotReady("the fake engine was shut down")
        with self._lock:
            s = self._get(session_id)
            if s.generating:
                raise SessionBusy(f"session {session_id} is already generating")
            s.generating = True
        try:
            yield from self._generate(session_id, s, messages, sampling, cancel)
        finally:
            s.generating = False

    def _generate(self, session_id: str, s: _Session, messages: Sequence[ChatMessage],
                  sampling: SamplingParams | None, cancel: Any) -> Iterator[StreamEvent]:
        sampling = sampling or SamplingParams()
        messages, dropped, dropped_tokens = self._fit(list(messages), sampling)
        self.prompts.append(list(messages))
        prompt = count_tokens(messages)
        if len(prompt) > self.context_window:   # STOP, or nothing left to drop
            figures = GenerationFigures(
                prompt_tokens=len(prompt), provider=self.provider,
                finish_reason="context_full", context_used=len(prompt),
                context_window=self.context_window)
            yield GenerationResult("", [], figures)
            return
        shared = 0
        for a, b in zip(s.history, prompt, strict=False):   # the common prefix
            if a != b:
                break
            shared += 1
        resume = s.location.value if shared else "none"
        resume_ms = self.resume_ms if (s.from_disk and shared) else 0.0
        s.from_disk = False
        prefilled_now = len(prompt) - shared
        if prefilled_now and self.prefill_steps:
            self.prefilling.set()
            try:
                for step in range(1, self.prefill_steps + 1):
                    if cancel is not None and cancel.is_set():
                        break
                    if self.hold_prefill and step == self.prefill_steps // 2 + 1:
                        self.release_prefill.wait(10)
                    if self.prefill_delay:
                        time.sleep(self.prefill_delay)
                    yield PrefillProgress(prefilled_now * step // self.prefill_steps, prefilled_now)
            finally:
                self.prefilling.clear()
        text = self.reply(messages) if callable(self.reply) else self.reply
        words = text.split(" ")
        out: list[str] = []
        started = time.perf_counter()
        finish = "eos"
        self.generating.set()
        try:
            for n, w in enumerate(words):
                if cancel is not None and cancel.is_set():
                    finish = "cancelled"
                    self.cancelled_count += 1
                    break
                if n == sampling.max_new_tokens:
                    finish = "length"
                    break
                if self.delay:
                    time.sleep(self.delay)
                piece = w if n == 0 else " " + w
                out.append(piece)
                yield TextChunk(piece, [n])
        finally:
            self.generating.clear()
        reply = "".join(out)
        with self._lock:
            s.history = prompt + ["<assistant>"] + reply.split()
            if s.location is KVLocation.NONE or s.kind is not SessionKind.PINNED:
                s.location = KVLocation.MEMORY
        prefilled = len(prompt) - shared
        figures = GenerationFigures(
            prompt_tokens=len(prompt), reused_tokens=shared, prefilled_tokens=prefilled,
            generated_tokens=len(out), ttft_ms=resume_ms + prefilled * 0.5,
            prefill_ms=prefilled * 0.5, resume_ms=resume_ms,
            decode_tokens_per_s=self.tokens_per_s, provider=self.provider, finish_reason=finish,
            resume=resume, context_used=len(s.history), context_window=self.context_window,
            dropped_messages=dropped, dropped_tokens=dropped_tokens)
        _ = started
        if s.kind is SessionKind.PINNED:
            self._save_async(session_id)
        yield GenerationResult(reply, list(range(len(out))), figures)

    def _fit(self, messages: list[ChatMessage], sampling: SamplingParams
             ) -> tuple[list[ChatMessage], int, int]:
        """Apply the overflow policy: drop the oldest turns (keeping the system prompt with
        truncate_middle) until the prompt fits; the latest message always stays."""
        policy = OverflowPolicy(sampling.overflow or OverflowPolicy.TRUNCATE_MIDDLE.value)
        dropped = dropped_tokens = 0
        if policy is OverflowPolicy.STOP:
            return messages, 0, 0
        keep_system = policy is OverflowPolicy.TRUNCATE_MIDDLE and bool(messages) and \
            messages[0].role == "system"
        first = 1 if keep_system else 0
        while len(count_tokens(messages)) > self.context_window and len(messages) - first > 1:
            gone = messages.pop(first)
            dropped += 1
            dropped_tokens += len(count_tokens([gone]))
        return messages, dropped, dropped_tokens

    def _save_async(self, session_id: str) -> None:
        disk = self._disk(session_id)
        s = self.sessions[session_id]
        if disk is None:
            return
        s.saving = True

        def save() -> None:
            self.saves_may_finish.wait(60)
            time.sleep(self.save_delay)
            with self._lock:
                if self.fail_saves:
                    s.save_error = f"saving the session failed: {self.fail_saves}"
                    s.saving = False
                    return
                s.save_error = None
                if s.kind is not SessionKind.PINNED:   # unpinned meanwhile: nothing to keep
                    s.saving = False
                    return
                disk.parent.mkdir(parents=True, exist_ok=True)
                disk.write_text(json.dumps({"history": s.history, "salt": s.salt}))
                s.saved_tokens = len(s.history)
                s.saving = False
                if s.kind is SessionKind.PINNED:
                    s.location = KVLocation.DISK

        t = threading.Thread(target=save, daemon=True)
        self._saves.append(t)
        t.start()

    def pin(self, session_id: str) -> None:
        self._record("pin", session_id)
        with self._lock:
            s = self._get(session_id)
            if s.kind is SessionKind.TEMPORARY:
                raise SessionKindConflict("a temporary session cannot be pinned")
            s.kind = SessionKind.PINNED
        self._save_async(session_id)

    def unpin(self, session_id: str) -> None:
        self._record("unpin", session_id)
        with self._lock:
            s = self._get(session_id)
            if s.kind is not SessionKind.PINNED:
                return
            s.kind = SessionKind.REGULAR
            s.saved_tokens = 0
            in_memory = bool(s.history) and not s.from_disk      # else only on disk, which goes now
            s.location = KVLocation.MEMORY if in_memory else KVLocation.NONE
            if not in_memory:
                s.history = []
        for t in list(self._saves):
            t.join()
        disk = self._disk(session_id)
        if disk is not None:
            disk.unlink(missing_ok=True)

    def close(self, session_id: str) -> None:
        self._record("close", session_id)
        with self._lock:
            self.sessions.pop(session_id, None)   # a pinned one stays on disk

    def delete(self, session_id: str) -> None:
        self._record("delete", session_id)
        with self._lock:
            self.sessions.pop(session_id, None)
        disk = self._disk(session_id)
        if disk is not None:
            disk.unlink(missing_ok=True)

    def info(self, session_id: str) -> SessionInfo:
        with self._lock:
            s = self._get(session_id)
            return SessionInfo(session_id, s.kind, len(s.history), s.location,
                               kv_bytes_memory=len(s.history) * 1000 if s.history else 0,
                               kv_bytes_disk=s.saved_tokens * 1000 if s.kind is SessionKind.PINNED else 0,
                               cache_salt=s.salt, saving=s.saving, save_error=s.save_error)

    def stats(self) -> dict[str, Any]:
        return {"sessions": len(self.sessions)}

    def clear_cache(self) -> int:
        """Like SessionManager.clear_cache: the shared cache goes, pinned sessions keep theirs."""
        self._record("clear_cache")
        return 0

    def revived(self) -> "FakeEngine":
        """This engine as a new one over the same state folder (what the window's engine factory
        makes when it loads a model again): nothing open, what was pinned is on disk."""
        for t in list(self._saves):
            t.join()
        with self._lock:
            self.sessions.clear()
        self.shut_down = False
        return self

    def count_tokens(self, text: str) -> int | None:
        """The fake tokenization of a message's text (one token per word, as `count_tokens`)."""
        return len(text.split())

    def shutdown(self, timeout: float = 10.0) -> None:
        self._record("shutdown", timeout)
        deadline = time.monotonic() + timeout
        for t in list(self._saves):
            t.join(max(0.0, deadline - time.monotonic()))
        self.shut_down = True
