"""A chat turn's prompt: token-exact history (engine.generation.history) + the overflow policy
(engine.generation.overflow).

`ChatPlanner.prepare` checks what can be checked before a session is touched (the chat template
renders, the policy is known); `plan` runs under the session's lock and returns the prompt ids;
`record` extends the session's history with the prompt and the reply the model gave.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from engine.api import ChatMessage, GenerationFigures, OverflowPolicy, SamplingParams
from engine.generation.generate import Generator
from engine.generation.history import PromptPlan, TokenHistory, plan_prompt, reply_marks
from engine.generation.overflow import fit_messages, parse_policy, reply_room


@dataclass
class ChatJob:
    messages: list[dict[str, Any]]
    rendered: str                 # the whole conversation's rendering (with the generation prompt)
    policy: OverflowPolicy
    max_new_tokens: int
    tools: list[dict[str, Any]] | None = None   # function schemas: the model's tool_use template


@dataclass
class ChatPlan:
    prompt: PromptPlan
    overflow_start: int | None    # where the cut started (None: nothing left out)

    @property
    def ids(self) -> list[int]:
        return self.prompt.ids


def _as_dict(message: ChatMessage | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(message, ChatMessage):
        return message.to_dict()
    if isinstance(message, Mapping):
        return dict(message)
    raise TypeError(f"a chat message must be a ChatMessage or a mapping, got {type(message)!r}")


class ChatPlanner:
    """Prompts for chat turns over one model's template and tokenizer."""

    def __init__(self, generator: Generator) -> None:
        self.generator = generator
        self.tokenizer = generator.model.tokenizer
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)

    def _encode(self, text: str) -> list[int]:
        # As HF tokenizes a rendered template: no special tokens added, the template wrote them.
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def _render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        return self.generator.chat_text(messages, tools)

    def prepare(self, messages: Sequence[ChatMessage | Mapping[str, Any]],
                sampling: SamplingParams | None, tools: list[dict[str, Any]] | None = None) -> ChatJob:
        """ChatTemplateError / ValueError now, before the stream starts."""
        sampling = sampling or SamplingParams()
        msgs = [_as_dict(m) for m in messages]
        return ChatJob(msgs, self._render(msgs, tools), parse_policy(sampling.overflow), sampling.max_new_tokens,
                       tools)

    def plan(self, job: ChatJob, history: TokenHistory, sticky_start: int | None,
             figures: GenerationFigures) -> ChatPlan:
        """The prompt ids; fills `figures.dropped_messages` / `dropped_tokens`."""
        full = plan_prompt(history, job.rendered, self._encode, self._decode)
        window = self.generator.model.context_window
        room = reply_room(window, job.max_new_tokens)
        if job.policy == OverflowPolicy.STOP or len(full.ids) + room <= window:
            return ChatPlan(full, None)
        plans: dict[tuple[int, ...], PromptPlan] = {}

        def plan_of(kept: list[dict[str, Any]]) -> PromptPlan:
            key = tuple(map(id, kept))
            if key not in plans:
                text = job.rendered if len(kept) == len(job.messages) else self._render(kept, job.tools)
                plans[key] = plan_prompt(history, text, self._encode, self._decode)
            return plans[key]

        fit = fit_messages(job.messages, job.policy, window, room, lambda kept: len(plan_of(kept).ids),
                           sticky_start=sticky_start)
        if not fit.dropped_messages:
            return ChatPlan(full, None)
        kept = plan_of(fit.messages)
        figures.dropped_messages = fit.dropped_messages
        figures.dropped_tokens = max(0, len(full.ids) - len(kept.ids))
        return ChatPlan(kept, fit.start)

    def record(self, history: TokenHistory, plan: ChatPlan, reply_ids: Sequence[int]) -> TokenHistory:
        """The history after this turn: the prompt, then the reply's ids and text, with marks at
        the prompt's end and wherever the reply's text is complete."""
        p = plan.prompt
        n, c = p.keep
        suffix_text = p.text[c:]
        prompt_tail = p.ids[-8:] if p.ids else []
        reply_text, marks = reply_marks(self.tokenizer, prompt_tail, reply_ids)
        base_n, base_c = len(p.suffix_ids), len(suffix_text)
        inner = [(base_n, base_c)] + [(base_n + dn, base_c + dc) for dn, dc in marks]
        return history.extend(p.keep, list(p.suffix_ids) + [int(t) for t in reply_ids],
                              suffix_text + reply_text, inner)
