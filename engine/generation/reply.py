"""One reply's decoding state: the sampler, the detokenizer, stop strings, the output format and
the figures, fed one step's logits at a time. `Generator.stream` drives one; `stream_choices`
drives several over copies of one prefilled prompt, stepped together."""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from engine.api import FinishReason, GenerationFigures, GenerationResult, SamplingParams, TextChunk, TokenLogprob
from engine.runtime.model import LoadedModel
from engine.text.constraints import ConstraintMatcher
from engine.text.detokenize import IncrementalDecoder, StopStringMatcher
from engine.text.logprobs import token_logprob
from engine.text.sampling import ResolvedSampling, Sampler


class Reply:
    """Samples a reply token by token (`take`), then says how it ended (`finish`)."""

    def __init__(self, model: LoadedModel, prompt: Sequence[int], sampling: SamplingParams,
                 settings: ResolvedSampling, constraint: ConstraintMatcher | None,
                 figures: GenerationFigures, started: float) -> None:
        self.sampling, self.constraint, self.figures, self.started = sampling, constraint, figures, started
        self.prompt_len = len(prompt)
        self.sampler = Sampler(settings)
        self.history = np.empty(len(prompt) + sampling.max_new_tokens + 1, dtype=np.int64)
        self.history[:len(prompt)] = prompt
        self.n_hist = len(prompt)
        self.decoder = IncrementalDecoder(model.tokenizer, prompt_tail=list(prompt[-8:]),
                                          keep_special=sampling.keep_special)
        self.matcher = StopStringMatcher(sampling.stop)
        self.eos = set(model.eos_token_ids)
        self.generated: list[int] = []
        self.pieces: list[str] = []
        # Log-probabilities travel with the text of their tokens: those whose text a stop string
        # swallowed are dropped with it. EOS has none (it is no part of the reply).
        self.pending: list[TokenLogprob] = []
        self.delivered: list[TokenLogprob] = []
        self.reason: FinishReason | None = None     # set once the reply has ended
        self.token = -1             # the token to feed next (while `reason` is None)
        self.t_first = 0.0

    def take(self, logits: np.ndarray, cache_len: int, window: int) -> TextChunk | None:
        """Samples from `logits` (the cache holds `cache_len` positions): the text it completes,
        if any. Afterwards either `reason` is set, or `token` is the next step's input (unless the
        caller, cancelled, sets `reason` to CANCELLED: after the text was delivered)."""
        constraint, sampling = self.constraint, self.sampling
        # The grammar's mask first: logit_bias and penalties then act on the tokens it allows.
        token = self.sampler.sample(logits if constraint is None else constraint.mask(logits),
                                    self.history[:self.n_hist])
        if not self.generated and not self.t_first:
            self.t_first = time.perf_counter()
            self.figures.ttft_ms = (self.t_first - self.started) * 1000
        if constraint is not None:
            constraint.advance(token)      # EOS too: refused unless the reply is complete
        if token in self.eos:
            self.reason = FinishReason.EOS
            return None
        self.generated.append(token)
        self.history[self.n_hist] = token
        self.n_hist += 1
        if sampling.logprobs is not None:
            self.pending.append(token_logprob(logits, token, sampling.logprobs))
        out = None
        text, stopped = self.matcher.feed(self.decoder.push(token))
        if text:
            self.pieces.append(text)
            self.delivered += self.pending
            out = TextChunk(text, [token], self.pending)
            self.pending = []
        if stopped:
            self.reason = FinishReason.STOP
        elif constraint is not None and constraint.done:
            self.reason = FinishReason.EOS      # the format is complete: only EOS could follow
        elif len(self.generated) >= sampling.max_new_tokens:
            self.reason = FinishReason.LENGTH
        elif cache_len + 1 >= window:
            self.reason = FinishReason.CONTEXT_FULL
        self.token = token
        return out

    def finish(self) -> tuple[TextChunk | None, GenerationResult]:
        """The text still held back (a partial character, a possible stop string's start), if any,
        and the result."""
        reason = self.reason or FinishReason.CANCELLED
        tail_chunk = None
        if reason != FinishReason.STOP:
            tail, stopped = self.matcher.feed(self.decoder.flush())
            tail += "" if stopped else self.matcher.flush()
            if stopped:
                reason = FinishReason.STOP
            if tail or self.pending:
                self.pieces.append(tail)
                self.delivered += self.pending
                tail_chunk = TextChunk(tail, [], self.pending)
                self.pending = []
        fig = self.figures
        decode_s = time.perf_counter() - self.t_first if self.t_first else 0.0
        if len(self.generated) > 1 and decode_s > 0:
            fig.decode_tokens_per_s = (len(self.generated) - 1) / decode_s
        fig.finish_reason = reason.value
        fig.generated_tokens = len(self.generated)
        fig.context_used = self.prompt_len + len(self.generated)
        return tail_chunk, GenerationResult(text="".join(self.pieces), token_ids=self.generated, figures=fig,
                                            logprobs=self.delivered)
