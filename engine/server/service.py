"""What the endpoints share: the engine, the limits, the scheduler, and running one generation."""
from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Mapping, Sequence, cast

from starlette.requests import Request

from engine.api import (ChatEngine, ChatMessage, FinishReason, GenerationResult, ModelNotReady, SamplingParams,
                        SessionError, SessionKind, TextChunk, TokenEngine)
from engine.text.tool_calls import ToolFormat
from .auth import Caller, KeyRing
from .errors import ApiError
from .scheduler import END, Job, Scheduler
from .tools import ToolRequest, tool_format

DEFAULT_MAX_BODY_BYTES = 4 << 20       # 4 MiB: far more text than any context window holds
DEFAULT_MAX_NEW_TOKENS = 4096          # when a request sets no max_tokens
DEFAULT_BODY_TIMEOUT_S = 30.0          # from the request's head to its body's last byte (4 MiB: ample)
# Every server also answers to this model name: whatever model it serves now (clients keep
# working when the user switches models; /v1/models lists the real id).
DEFAULT_MODEL_ALIAS = "default"


@dataclass
class ServerConfig:
    """Limits and keys; the engine and the state folder are given to `create_app` beside it."""
    api_keys: Sequence[str] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_prompt_tokens: int | None = None      # None: the model's context window (minus one)
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    max_active: int = 4
    max_queued: int = 32
    max_open_chains: int = 16                 # stored response chains kept open in memory (LRU)
    max_in_flight: int = 128                  # requests being handled at once; beyond: 503
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S    # a body still arriving after this: 408
    model_aliases: Sequence[str] = field(default_factory=tuple)


def finish_reason(reason: str) -> str:
    """Amber's finish reason in OpenAI's words."""
    return {FinishReason.LENGTH.value: "length", FinishReason.CONTEXT_FULL.value: "length"}.get(reason, "stop")


def amber_figures(result: GenerationResult, queue_ms: float, **extra: Any) -> dict[str, Any]:
    """Amber's own figures for one response (as llama.cpp's server returns `timings`)."""
    f = result.figures
    out = {"reused_tokens": f.reused_tokens, "prefilled_tokens": f.prefilled_tokens, "prompt_tokens": f.prompt_tokens,
           "generated_tokens": f.generated_tokens, "ttft_ms": round(f.ttft_ms, 3), "prefill_ms": round(f.prefill_ms, 3),
           "resume_ms": round(f.resume_ms, 3), "resume": f.resume, "cache_tokens_memory": f.cache_tokens_memory,
           "cache_tokens_disk": f.cache_tokens_disk, "decode_tokens_per_s": round(f.decode_tokens_per_s, 2),
           "queue_ms": round(queue_ms, 3), "provider": f.provider, "finish_reason": f.finish_reason,
           "fallback_reason": f.fallback_reason, "context_window": f.context_window}
    out.update(extra)
    return out


def chat_usage(result: GenerationResult) -> dict[str, Any]:
    f = result.figures
    return {"prompt_tokens": f.prompt_tokens, "completion_tokens": f.generated_tokens,
            "total_tokens": f.prompt_tokens + f.generated_tokens,
            "prompt_tokens_details": {"cached_tokens": f.reused_tokens},
            "completion_tokens_details": {"reasoning_tokens": 0}}


def to_api_error(exc: BaseException) -> ApiError:
    """An engine exception as the client's error: bad input is a 4xx, never a 500."""
    # The server imports no engine implementation at load (it serves any ChatEngine).
    from engine.runtime.model import ModelRunError  # noqa: PLC0415
    from engine.text.chat_template import ChatTemplateError, NoChatTemplate  # noqa: PLC0415
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ModelNotReady):
        return ApiError(503, str(exc), code="model_not_ready")
    if isinstance(exc, SessionError):
        return ApiError(409, str(exc), code="session_busy")
    if isinstance(exc, NoChatTemplate):     # a base model: "<model> has no chat template; use /v1/completions"
        return ApiError(400, str(exc), "model", code="no_chat_template")
    if isinstance(exc, ChatTemplateError):
        return ApiError(400, f"the messages cannot be rendered by the model's chat template: {exc}", "messages")
    if isinstance(exc, ModelRunError):      # the served model itself fails (a crafted graph)
        return ApiError(500, str(exc), code="model_error")
    if isinstance(exc, ValueError):
        return ApiError(400, str(exc))
    return ApiError(500, f"internal error: {type(exc).__name__}: {exc}")


class Service:
    """The engine behind the endpoints (owned by whoever made it; the server only borrows it)."""

    def __init__(self, engine: ChatEngine, state_dir: Path, config: ServerConfig, keys: KeyRing) -> None:
        self.engine = engine
        self.state_dir = Path(state_dir)
        self.config = config
        self.keys = keys
        # Generations on threads of their own when the engine batches their decode steps.
        self.scheduler = Scheduler(config.max_active, config.max_queued,
                                   parallel=engine.capabilities.batches_decode)
        self.created = int(time.time())

    @property
    def tokens(self) -> TokenEngine | None:
        """The engine as a `TokenEngine` when it takes token prompts (Amber's SessionManager)."""
        return cast(TokenEngine, self.engine) if self.engine.capabilities.token_prompts else None

    # ---- models and limits --------------------------------------------------------------------
    @property
    def model_id(self) -> str:
        return self.engine.model_name

    def check_model(self, name: str) -> None:
        if name not in (self.model_id, DEFAULT_MODEL_ALIAS) and name not in self.config.model_aliases:
            raise ApiError(404, f"the model '{name[:200]}' does not exist (this server serves '{self.model_id}')",
                           "model", "model_not_found")

    @functools.cached_property
    def system_fingerprint(self) -> str:
        """OpenAI's `system_fingerprint`: from the model's fingerprint (its graph, weights and
        tokenizer; the model's name for an engine without one), so a client sees when the model
        behind the same name changed."""
        tokens = self.tokens
        basis = tokens.model_fingerprint if tokens is not None else self.model_id
        return "fp_" + hashlib.sha256(basis.encode()).hexdigest()[:12]

    @property
    def token_bytes(self) -> Callable[[int], bytes] | None:
        """Each token id's bytes; None for an engine without a tokenizer here (no logprobs)."""
        tokens = self.tokens
        return None if tokens is None else tokens.token_bytes

    def check_options(self, logprobs: int | None, bias: dict[int, float] | None) -> None:
        """The options that need the model's tokenizer: a clear 400 where they cannot be served."""
        tokens = self.tokens
        if logprobs is not None and tokens is None:
            raise ApiError(400, "this engine does not report log-probabilities", "logprobs")
        if bias and tokens is None:
            raise ApiError(400, "this engine does not apply 'logit_bias'", "logit_bias")
        if bias and tokens is not None:
            vocab = tokens.vocab_size
            bad = [t for t in bias if t >= vocab]
            if bad:
                raise ApiError(400, f"'logit_bias' names token id {bad[0]}; the vocabulary has {vocab}", "logit_bias")

    def caller(self, request: Request) -> Caller:
        return self.keys.caller(request.headers.get("authorization"))

    def prompt_limit(self) -> int:
        window = self.engine.context_window - 1
        cap = self.config.max_prompt_tokens
        return window if cap is None else min(cap, window)

    def checked_length(self, prompt: list[int] | None) -> int:
        """The prompt's length once `check_prompt` accepts it; for an engine without a tokenizer
        here (None: a remote engine, which checks the length itself) the least a prompt has, 1, so
        the reply's budget stays inside the context window."""
        if prompt is None:
            return 1
        self.check_prompt(len(prompt))
        return len(prompt)

    def check_prompt(self, n_tokens: int) -> None:
        """Raised on the engine thread (after tokenizing), answered as a 400 before any byte is sent."""
        if n_tokens == 0:
            raise ApiError(400, "the prompt is empty")
        limit = self.prompt_limit()
        if n_tokens > limit:
            raise ApiError(400, f"the prompt has {n_tokens} tokens; this server accepts at most {limit}",
                           code="context_length_exceeded")

    def new_tokens(self, wanted: int | None, prompt_tokens: int) -> int:
        room = max(1, self.engine.context_window - prompt_tokens)
        return max(1, min(wanted or self.config.max_new_tokens, self.config.max_new_tokens, room))

    # ---- generations ----------------------------------------------------------------------------
    def stateless(self, caller_salt: str, encode: Callable[[], list[int] | None], wanted: int | None,
                  sampling: Callable[[int], SamplingParams],
                  messages: Sequence[ChatMessage] | None = None,
                  kind: SessionKind = SessionKind.REGULAR) -> Callable[[threading.Event], Iterator[Any]]:
        """A request without state: a regular session under the caller's salt, closed at the end, so
        its prefix stays in the shared cache (of that salt only) for the next request; or a temporary
        one (nothing on disk, nothing published)."""
        engine, tokens = self.engine, self.tokens

        def start(cancel: threading.Event) -> Iterator[Any]:
            prompt = encode()
            params = sampling(self.new_tokens(wanted, self.checked_length(prompt)))

            def generate(sid: str) -> Iterator[Any]:
                if tokens is not None and prompt is not None:
                    return tokens.generate_tokens(sid, prompt, params, cancel)
                # a ChatEngine without token prompts (a remote one): chat messages only
                return engine.generate(sid, list(messages or []), params, cancel)
            return self._in_new_session(caller_salt, kind, generate)
        return start

    def _in_new_session(self, caller_salt: str, kind: SessionKind,
                        generate: Callable[[str], Iterator[Any]]) -> Iterator[Any]:
        """A session opened now (under the caller's salt) for one generation, closed when it ends."""
        sid = str(uuid.uuid4())
        self.engine.open(sid, kind, cache_salt=caller_salt)

        def run() -> Iterator[Any]:
            try:
                yield from generate(sid)
            finally:
                self.engine.close(sid)
        return run()

    def stateless_choices(self, caller_salt: str, encode: Callable[[], list[int] | None], wanted: int | None,
                          samplings: Sequence[Callable[[int], SamplingParams]],
                          kind: SessionKind = SessionKind.REGULAR) -> Callable[[threading.Event], Iterator[Any]]:
        """As `stateless`, for a request's `n` choices as ONE generation (an engine with token
        prompts: `TokenEngine.generate_choices`): the prompt prefilled once, the choices decoded
        together; its events are (choice index, event)."""
        tokens = self.tokens
        if tokens is None:
            raise ApiError(500, "this engine decodes a request's choices one by one")

        def start(cancel: threading.Event) -> Iterator[Any]:
            prompt = encode()
            budget = self.new_tokens(wanted, self.checked_length(prompt))
            params = [sampling(budget) for sampling in samplings]
            assert prompt is not None      # a TokenEngine's prompts are token ids
            return self._in_new_session(caller_salt, kind,
                                        lambda sid: tokens.generate_choices(sid, prompt, params, cancel))
        return start

    def encode_chat(self, messages: Sequence[ChatMessage | Mapping[str, Any]],
                    tools: list[dict[str, Any]] | None = None) -> Callable[[], list[int] | None]:
        """The prompt's token ids, computed on the engine thread (`tools`: shown by the template);
        None from an engine without a tokenizer here (`checked_length`)."""
        tokens = self.tokens
        if tokens is None:
            return lambda: None
        return lambda: tokens.encode_chat(messages, tools)

    def tool_format(self, request: ToolRequest) -> ToolFormat | None:
        """The tool-call format of the served model's template for a request's tools (a 400 when
        it has none, or the engine does not render templates here)."""
        if request.offered is None:
            return None
        tokens = self.tokens
        if tokens is None:
            raise ApiError(400, "this engine does not take 'tools'", "tools", "tools_not_supported")
        from engine.text.chat_template import ChatTemplateError  # noqa: PLC0415 - as to_api_error
        try:
            template = tokens.chat_template
        except ChatTemplateError as exc:     # none at all (a base model), or one that does not load
            raise to_api_error(exc) from None
        return tool_format(template, self.model_id, request)

    def encode_text(self, prompt: str | list[int]) -> Callable[[], list[int]]:
        tokens = self.tokens
        if tokens is None:
            raise ApiError(400, "this engine serves chat only (no raw completions)")
        if isinstance(prompt, list):
            vocab = tokens.vocab_size

            def ids() -> list[int]:
                bad = [t for t in prompt if not 0 <= t < vocab]
                if bad:
                    raise ApiError(400, f"the prompt has token ids outside [0, {vocab}): {bad[0]}", "prompt")
                return list(prompt)
            return ids
        text = prompt
        return lambda: tokens.encode_prompt(text)

    async def submit(self, caller: Caller, start: Callable[[threading.Event], Iterator[Any]],
                     request: Request, choices: int = 1) -> "Run":
        """`choices` > 1: `start` makes (choice index, event) pairs of that many replies."""
        job = Job(start, caller.namespace, asyncio.get_running_loop())
        self.scheduler.submit(job)
        return Run(job, request, choices)

    def close(self) -> None:
        self.scheduler.close()


class Run:
    """One submitted generation seen from the event loop: its text chunks, then its result; or,
    for a request's choices generated as one (`choices` > 1), each choice's, by choice index."""

    def __init__(self, job: Job, request: Request, choices: int = 1) -> None:
        self.job = job
        self.choices = choices
        self.submitted = time.perf_counter()
        self.first_event_at: float | None = None
        self.results: dict[int, GenerationResult] = {}
        self._watch = asyncio.ensure_future(self._watch_disconnect(request))
        self._pending: list[Any] = []

    @property
    def result(self) -> GenerationResult | None:
        return self.results.get(0)

    async def _watch_disconnect(self, request: Request) -> None:
        # After the body is read, the next ASGI message is the disconnect.
        with contextlib.suppress(Exception):
            while True:
                message = await request.receive()
                if message.get("type") == "http.disconnect":
                    self.job.cancel.set()
                    return

    @property
    def queue_ms(self) -> float:
        """How long the request waited for the engine thread (behind other requests)."""
        started = self.job.started_at
        return 0.0 if started is None else max(0.0, (started - self.submitted) * 1000)

    async def _next(self) -> Any:
        item = self._pending.pop(0) if self._pending else await self.job.events.get()
        if self.first_event_at is None:
            self.first_event_at = time.perf_counter()
        if isinstance(item, BaseException):
            raise to_api_error(item)
        return item

    def _indexed(self, item: Any) -> tuple[int, Any]:
        """(choice index, event) of an engine event."""
        return (int(item[0]), item[1]) if self.choices > 1 and isinstance(item, tuple) else (0, item)

    async def first(self) -> None:
        """Waits for the first text or the result (errors before any output raise ApiError here)."""
        while True:
            item = await self._next()
            if item is END:
                raise ApiError(500, "the generation ended without a result")
            if isinstance(self._indexed(item)[1], (TextChunk, GenerationResult)):
                self._pending.insert(0, item)
                return

    async def events(self) -> AsyncIterator[TextChunk | GenerationResult]:
        """Text chunks and the result; cancels the generation if the consumer stops early."""
        async for _, event in self.indexed():
            yield event

    async def indexed(self) -> AsyncIterator[tuple[int, TextChunk | GenerationResult]]:
        """(choice index, text chunk or result) as they come; cancels the generation if the
        consumer stops before every result."""
        try:
            while True:
                item = await self._next()
                if item is END:
                    return
                index, event = self._indexed(item)
                if isinstance(event, GenerationResult):
                    self.results[index] = event
                    yield index, event
                elif isinstance(event, TextChunk):
                    yield index, event
        finally:
            self.stop_watching()
            if len(self.results) < self.choices:
                self.job.cancel.set()

    async def collect(self) -> GenerationResult:
        async for _ in self.events():
            pass
        if self.result is None:
            raise ApiError(500, "the generation ended without a result")
        return self.result

    async def collect_all(self) -> list[GenerationResult]:
        """Every choice's result, by choice index."""
        async for _ in self.indexed():
            pass
        if len(self.results) < self.choices:
            raise ApiError(500, "the generation ended without a result")
        return [self.results[i] for i in range(self.choices)]

    def stop_watching(self) -> None:
        self._watch.cancel()

    def cancel(self) -> None:
        self.job.cancel.set()
        self.stop_watching()
