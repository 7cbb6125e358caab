"""The generation loop: prompt → reuse the cached prefix → prefill → stream sampled tokens."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from engine.api import (CancelToken, ChatMessage, FinishReason, GenerationFigures, GenerationResult,
                        KVLocation, PrefillProgress, SamplingParams, StreamEvent)
from engine.text.bos import BosPrefix, bos_prefix
from engine.text.chat_template import ChatTemplate, load_chat_template
from engine.text.constraints import ConstraintCompiler, ConstraintMatcher
from engine.generation.reply import Reply
from engine.runtime.kvcache import KVCache
from engine.runtime.model import LoadedModel
from engine.runtime.runner import PREFILL_CHUNK, Runner
from engine.text.sampling import resolve_sampling


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x, y = np.asarray(a[:n]), np.asarray(b[:n])
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if diff.size else n


class Generator:
    """Turns prompts into token streams over caller-owned `KVCache`s (one model, any caches)."""

    def __init__(self, model: LoadedModel) -> None:
        self.model = model
        self.runner = Runner(model)
        self._template: ChatTemplate | None = None
        self._constraints: ConstraintCompiler | None = None
        self._constraints_lock = threading.Lock()

    @property
    def template(self) -> ChatTemplate:
        if self._template is None:
            self._template = load_chat_template(self.model.path, self.model.name)
        return self._template

    @property
    def constraints(self) -> ConstraintCompiler:
        """The model's constraint compiler, built on first use (its token trie takes ~0.6 s)."""
        with self._constraints_lock:
            if self._constraints is None:
                self._constraints = ConstraintCompiler(self.model.tokenizer, self.model.eos_token_ids)
            return self._constraints

    @functools.cached_property
    def bos(self) -> BosPrefix:
        """Whether (and with which token) this model's prompts start with a BOS."""
        return bos_prefix(self.model.tokenizer, self.model.tokenizer_config)

    def chat_text(self, messages: Sequence[ChatMessage | Mapping[str, Any]],
                  tools: list[dict[str, Any]] | None = None) -> str:
        """The chat template's rendering with the generation prompt, starting with exactly one BOS
        where the model wants one (ChatTemplateError on failure; NoChatTemplate for a base model)."""
        return self.bos.text(self.template.render(messages, add_generation_prompt=True, tools=tools))

    def new_cache(self) -> KVCache:
        return self.runner.new_cache()

    def encode_chat(self, messages: Sequence[ChatMessage | Mapping[str, Any]],
                    tools: list[dict[str, Any]] | None = None) -> list[int]:
        """`chat_text` tokenized as HF tokenizes a rendered template: without adding special tokens,
        since the text holds them. `tools` (JSON schemas, as HF's) select the model's `tool_use`
        template when it ships one."""
        return self.model.tokenizer.encode(self.chat_text(messages, tools), add_special_tokens=False).ids

    def encode_prompt(self, text: str) -> list[int]:
        """A raw completion prompt: its text as written, after exactly one BOS where the model wants one."""
        return self.bos.ids(self.model.tokenizer.encode(text, add_special_tokens=False).ids)

    def stream(self, cache: KVCache, prompt_ids: Sequence[int], sampling: SamplingParams | None = None,
               cancel: CancelToken | None = None, *, origin: KVLocation = KVLocation.MEMORY,
               figures: GenerationFigures | None = None, started: float | None = None) -> Iterator[StreamEvent]:
        """Streams `PrefillProgress` (at the start, between prefill chunks and at the end of the
        prefill), `TextChunk`s, then one `GenerationResult`.

        The cache keeps the longest prefix it shares with `prompt_ids` and is extended in place;
        afterwards it holds the prompt and every generated token whose KV was computed: all of them
        after EOS, all but the last otherwise (also after cancellation). `origin` says where the cache's content
        came from, for the figures. `started` (perf_counter) is when the caller began, so that time
        to first token includes loading saved KV.
        """
        for _, event in self.stream_choices(cache, prompt_ids, [sampling or SamplingParams()], cancel,
                                            origin=origin, figures=figures, started=started):
            yield event

    def stream_choices(self, cache: KVCache, prompt_ids: Sequence[int], samplings: Sequence[SamplingParams],
                       cancel: CancelToken | None = None, *, origin: KVLocation = KVLocation.MEMORY,
                       figures: GenerationFigures | None = None,
                       started: float | None = None) -> Iterator[tuple[int, StreamEvent]]:
        """`len(samplings)` replies to one prompt, as (choice index, event): the prompt is prefilled
        once (its `PrefillProgress` reported as choice 0's), its KV copied for every further choice,
        and the choices' one-token steps then run together (`Runner.forward_rows`: one batched run
        where the runner batches decode steps). Each choice samples with its own parameters (its own
        seed) and ends on its own conditions, with its own `GenerationResult`.

        `cache` is choice 0's (as `stream`'s: it keeps the prompt and choice 0's reply); the
        others' copies are dropped at the end. Choice 0's figures are `figures` and count the
        prefill; the others' count the prompt as reused (they start from its copy)."""
        started = started if started is not None else time.perf_counter()
        if not samplings:
            raise ValueError("no choices asked for")
        # ValueError on bad values, before any work.
        settings = [resolve_sampling(s, self.model.generation_config) for s in samplings]
        prompt = [int(t) for t in prompt_ids]
        window = self.model.context_window
        fig = figures or GenerationFigures()
        fig.prompt_tokens, fig.provider, fig.context_window = len(prompt), self.model.provider_short, window

        if not prompt:
            raise ValueError("empty prompt")
        # Compiled before any work, so a format the model cannot follow fails before any output.
        constraints: list[ConstraintMatcher | None] = [None if s.constraint is None
                                                       else self.constraints.matcher(s.constraint)
                                                       for s in samplings]
        replies = [Reply(self.model, prompt, s, st, c, fig if i == 0 else dataclasses.replace(fig), started)
                   for i, (s, st, c) in enumerate(zip(samplings, settings, constraints, strict=True))]
        if len(prompt) >= window:
            # Nothing is cut from the history silently: the caller is told the context is full.
            for i, reply in enumerate(replies):
                reply.reason = FinishReason.CONTEXT_FULL
                yield i, reply.finish()[1]
            return

        reused = min(common_prefix(cache.tokens, prompt), len(prompt) - 1)   # logits need ≥ 1 new token
        cache.truncate(reused)
        # Room for the prompt and the whole reply now: growing mid-reply would copy the cache.
        longest = max(s.max_new_tokens for s in samplings)
        cache.reserve(min(window, len(prompt) + longest))
        fig.reused_tokens = reused
        fig.resume = origin.value if reused else KVLocation.NONE.value

        def is_cancelled() -> bool:
            return cancel is not None and cancel.is_set()
        t_prefill = time.perf_counter()
        todo = prompt[reused:]
        logits = None
        yield 0, PrefillProgress(0, len(todo))
        # Chunk by chunk here (not inside the runner) so that progress can be streamed between them.
        chunk = min(PREFILL_CHUNK, self.runner.chunk_len(cache, len(todo)))
        for start in range(0, len(todo), chunk):
            if start:
                if is_cancelled():
                    logits = None
                    break
                yield 0, PrefillProgress(start, len(todo))
            logits = self.runner.forward(cache, todo[start:start + chunk])
        if logits is not None:
            yield 0, PrefillProgress(len(todo), len(todo))
        fig.prefill_ms = (time.perf_counter() - t_prefill) * 1000
        fig.prefilled_tokens = len(cache) - reused
        if logits is None:
            for i, reply in enumerate(replies):
                reply.reason = FinishReason.CANCELLED
                yield i, reply.finish()[1]
            return
        for reply in replies[1:]:       # the others start from a copy of the prompt's KV
            reply.figures.reused_tokens, reply.figures.prefilled_tokens = len(prompt), 0
            reply.figures.resume = KVLocation.MEMORY.value
            reply.figures.cache_tokens_memory = reply.figures.cache_tokens_disk = 0
            reply.figures.prefill_ms = 0.0
        caches = [cache] + [self._copy(cache, min(window, len(prompt) + longest)) for _ in replies[1:]]
        rows = [logits] * len(replies)
        live = list(range(len(replies)))
        # Each row's decode loop (its steps may be batched with other sessions', and with each
        # other's): a row that ends leaves it at once, so the others run without it.
        loops = [contextlib.ExitStack() for _ in replies]
        try:
            for i in live:
                loops[i].enter_context(self.runner.decoding(caches[i]))
            while live:
                stepping = []
                for i in live:
                    reply = replies[i]
                    text = reply.take(rows[i], len(caches[i]), window)
                    if text is not None:
                        yield i, text
                    if reply.reason is None and is_cancelled():     # seen within one step
                        reply.reason = FinishReason.CANCELLED
                    if reply.reason is None:
                        stepping.append(i)
                        continue
                    loops[i].close()
                    tail, result = reply.finish()
                    if tail is not None:
                        yield i, tail
                    yield i, result
                live = stepping
                if live:
                    out = self.runner.forward_rows([caches[i] for i in live], [replies[i].token for i in live])
                    for i, row in zip(live, out, strict=True):
                        rows[i] = row
        finally:
            for loop in loops:
                loop.close()

    def _copy(self, cache: KVCache, capacity: int) -> KVCache:
        """A new cache holding what `cache` holds, with room for `capacity` positions."""
        copy = self.new_cache()
        copy.reserve(capacity)
        copy.append_block(cache.export(0, len(cache)), list(cache.tokens))
        return copy


def collect(events: Iterator[StreamEvent]) -> GenerationResult:
    """Drains a stream and returns its result."""
    result = None
    for event in events:
        if isinstance(event, GenerationResult):
            result = event
    assert result is not None, "a stream always ends with a GenerationResult"
    return result
