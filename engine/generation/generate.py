"""The generation loop: prompt → reuse the cached prefix → prefill → stream sampled tokens."""
from __future__ import annotations

import threading
import time
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from engine.api import (CancelToken, ChatMessage, FinishReason, GenerationFigures, GenerationResult,
                  KVLocation, PrefillProgress, SamplingParams, StreamEvent, TextChunk, TokenLogprob)
from engine.text.chat_template import ChatTemplate, load_chat_template
from engine.text.constraints import ConstraintCompiler, ConstraintMatcher
from engine.text.detokenize import IncrementalDecoder, StopStringMatcher
from engine.text.logprobs import token_logprob
from engine.runtime.kvcache import KVCache
from engine.runtime.model import LoadedModel
from engine.runtime.runner import PREFILL_CHUNK, Runner
from engine.text.sampling import Sampler, resolve_sampling


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

    def new_cache(self) -> KVCache:
        return self.runner.new_cache()

    def encode_chat(self, messages: Sequence[ChatMessage | Mapping[str, Any]],
                    tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Renders the chat template (ChatTemplateError on failure) and tokenizes it as HF does:
        without adding special tokens, since the template already wrote them. `tools` (JSON
        schemas, as HF's) select the model's `tool_use` template when it ships one."""
        text = self.template.render(messages, add_generation_prompt=True, tools=tools)
        return self.model.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_prompt(self, text: str) -> list[int]:
        return self.model.tokenizer.encode(text, add_special_tokens=True).ids

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
        started = started if started is not None else time.perf_counter()
        sampling = sampling or SamplingParams()
        settings = resolve_sampling(sampling, self.model.generation_config)   # ValueError on bad values
        prompt = [int(t) for t in prompt_ids]
        window = self.model.context_window
        fig = figures or GenerationFigures()
        fig.prompt_tokens, fig.provider, fig.context_window = len(prompt), self.model.provider_short, window

        def finish(reason: FinishReason, text: str, tokens: list[int],
                   logprobs: list[TokenLogprob] | None = None) -> GenerationResult:
            fig.finish_reason = reason.value
            fig.generated_tokens = len(tokens)
            fig.context_used = len(prompt) + len(tokens)
            return GenerationResult(text=text, token_ids=tokens, figures=fig, logprobs=logprobs or [])

        if not prompt:
            raise ValueError("empty prompt")
        # Compiled before any work, so a format the model cannot follow fails before any output.
        constraint: ConstraintMatcher | None = (None if sampling.constraint is None
                                                else self.constraints.matcher(sampling.constraint))
        if len(prompt) >= window:
            # Nothing is cut from the history silently: the caller is told the context is full.
            yield finish(FinishReason.CONTEXT_FULL, "", [])
            return

        reused = min(common_prefix(cache.tokens, prompt), len(prompt) - 1)   # logits need ≥ 1 new token
        cache.truncate(reused)
        # Room for the prompt and the whole reply now: growing mid-reply would copy the cache.
        cache.reserve(min(window, len(prompt) + sampling.max_new_tokens))
        fig.reused_tokens = reused
        fig.resume = origin.value if reused else KVLocation.NONE.value
        def is_cancelled() -> bool:
            return cancel is not None and cancel.is_set()
        t_prefill = time.perf_counter()
        todo = prompt[reused:]
        logits = None
        yield PrefillProgress(0, len(todo))
        # Chunk by chunk here (not inside the runner) so that progress can be streamed between them.
        chunk = min(PREFILL_CHUNK, self.runner.chunk_len(cache, len(todo)))
        for start in range(0, len(todo), chunk):
            if start:
                if is_cancelled():
                    logits = None
                    break
                yield PrefillProgress(start, len(todo))
            logits = self.runner.forward(cache, todo[start:start + chunk])
        if logits is not None:
            yield PrefillProgress(len(todo), len(todo))
        fig.prefill_ms = (time.perf_counter() - t_prefill) * 1000
        fig.prefilled_tokens = len(cache) - reused
        if logits is None:
            yield finish(FinishReason.CANCELLED, "", [])
            return

        sampler = Sampler(settings)
        history = np.empty(len(prompt) + sampling.max_new_tokens + 1, dtype=np.int64)
        history[:len(prompt)] = prompt
        n_hist = len(prompt)
        decoder = IncrementalDecoder(self.model.tokenizer, prompt_tail=prompt[-8:],
                                     keep_special=sampling.keep_special)
        matcher = StopStringMatcher(sampling.stop)
        eos = set(self.model.eos_token_ids)
        generated: list[int] = []
        pieces: list[str] = []
        # Log-probabilities travel with the text of their tokens: those whose text a stop string
        # swallowed are dropped with it. EOS has none (it is no part of the reply).
        top = sampling.logprobs
        pending: list[TokenLogprob] = []
        delivered: list[TokenLogprob] = []
        reason = FinishReason.LENGTH
        t_first = 0.0
        # Other sessions decoding at the same time may share each step's run (engine.runtime.batcher).
        with self.runner.decoding(cache):
            while True:
                # The grammar's mask first: logit_bias and penalties then act on the tokens it allows.
                token = sampler.sample(logits if constraint is None else constraint.mask(logits), history[:n_hist])
                if not generated:
                    t_first = time.perf_counter()
                    fig.ttft_ms = (t_first - started) * 1000
                if constraint is not None:
                    constraint.advance(token)      # EOS too: refused unless the reply is complete
                if token in eos:
                    reason = FinishReason.EOS
                    break
                generated.append(token)
                history[n_hist] = token
                n_hist += 1
                if top is not None:
                    pending.append(token_logprob(logits, token, top))
                text, stopped = matcher.feed(decoder.push(token))
                if text:
                    pieces.append(text)
                    delivered += pending
                    yield TextChunk(text, [token], pending)
                    pending = []
                if stopped:
                    reason = FinishReason.STOP
                    break
                if constraint is not None and constraint.done:
                    reason = FinishReason.EOS      # the format is complete: only EOS could follow
                    break
                if len(generated) >= sampling.max_new_tokens:
                    reason = FinishReason.LENGTH
                    break
                if len(cache) + 1 >= window:
                    reason = FinishReason.CONTEXT_FULL
                    break
                if is_cancelled():
                    reason = FinishReason.CANCELLED
                    break
                logits = self.runner.forward(cache, [token])
                assert logits is not None     # without between_chunks it never stops early
        if reason != FinishReason.STOP:
            tail, stopped = matcher.feed(decoder.flush())
            tail += "" if stopped else matcher.flush()
            if stopped:
                reason = FinishReason.STOP
            if tail or pending:
                pieces.append(tail)
                delivered += pending
                yield TextChunk(tail, [], pending)
        decode_s = time.perf_counter() - t_first if t_first else 0.0
        if len(generated) > 1 and decode_s > 0:
            fig.decode_tokens_per_s = (len(generated) - 1) / decode_s
        yield finish(reason, "".join(pieces), generated, delivered)


def collect(events: Iterator[StreamEvent]) -> GenerationResult:
    """Drains a stream and returns its result."""
    result = None
    for event in events:
        if isinstance(event, GenerationResult):
            result = event
    assert result is not None, "a stream always ends with a GenerationResult"
    return result
