"""Reasoning models' thinking: splitting a reply into its reasoning and its answer.

Qwen3 and the DeepSeek-R1 distills write `<think>…</think>` before the answer (the R1 distills'
templates open `<think>\\n` in the generation prompt, so their reply holds only the closing tag).
The GUI shows the reasoning collapsed; the history sent back keeps it only when the model's
template does not say otherwise. Qwen3's template splits each assistant message on `</think>` (or
takes `message.reasoning_content`) and writes the reasoning back only for the turns after the last
user query; R1's writes `content.split('</think>')[-1]`. So for templates that know about reasoning
(they mention `</think>` or `reasoning_content`) an assistant message goes to the template as its
answer plus `reasoning_content`, exactly as transformers users pass it; for any other template
the reply is sent as the model wrote it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OPEN, CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class Reply:
    """A reply split at its thinking. `reasoning` is None when the reply has none; `thinking` is
    True while the reasoning is still open (a streaming or cut-off reply)."""
    reasoning: str | None
    content: str
    thinking: bool = False


def split_reasoning(text: str) -> Reply:
    """Splits `<think>reasoning</think>answer` (the opening tag optional: it may be in the prompt).

    Only thinking at the start counts (after whitespace): a `<think>` quoted in the middle of an
    answer is the answer's. An opening tag without its close is reasoning still being written."""
    stripped = text.lstrip()
    if stripped.startswith(OPEN):
        body = stripped[len(OPEN):]
        end = body.find(CLOSE)
        if end < 0:
            return Reply(body.strip("\n"), "", thinking=True)
        return Reply(body[:end].strip("\n"), body[end + len(CLOSE):].lstrip("\n"))
    end = text.find(CLOSE)
    if end >= 0 and OPEN not in text[:end]:
        return Reply(text[:end].strip("\n"), text[end + len(CLOSE):].lstrip("\n"))
    return Reply(None, text)


def template_knows_reasoning(template_source: str) -> bool:
    """Whether a chat template handles reasoning itself (Qwen3, DeepSeek-R1 and their kind)."""
    return CLOSE in template_source or "reasoning_content" in template_source


def for_template(message: dict[str, Any], knows_reasoning: bool) -> dict[str, Any]:
    """The assistant message as the template should see it: answer + `reasoning_content` for a
    template that knows reasoning (it decides which turns keep it), unchanged otherwise."""
    if not knows_reasoning or message.get("role") != "assistant" or "reasoning_content" in message:
        return message
    content = message.get("content")
    if not isinstance(content, str):
        return message
    reply = split_reasoning(content)
    if reply.reasoning is None:
        return message
    return {**message, "content": reply.content, "reasoning_content": reply.reasoning}
