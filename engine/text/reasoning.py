"""Reasoning models' thinking: splitting a reply into its reasoning and its answer.

Qwen3 and the DeepSeek-R1 distills write `<think>…</think>` before the answer (the R1 distills'
templates open `<think>\\n` in the generation prompt, so their reply holds only the closing tag).
The split is for display only (the GUI shows the reasoning collapsed): the history sent back to
the model holds each reply as the model wrote it, and the model's chat template decides what of it
the prompt shows (Qwen3's splits on `</think>` and keeps the reasoning of the turn in progress;
R1's keeps `content.split('</think>')[-1]`), as transformers renders it.
"""
from __future__ import annotations

from dataclasses import dataclass

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
