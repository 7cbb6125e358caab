"""The engine's token log-probabilities in OpenAI's two shapes: chat's `logprobs.content` (token,
logprob, bytes, top_logprobs) and the completions' legacy lists (tokens, token_logprobs,
top_logprobs, text_offset). Values are the model's own (engine.text.logprobs)."""
from __future__ import annotations

import codecs
from typing import Any, Callable, Sequence

from engine.api import TokenLogprob

TokenBytes = Callable[[int], bytes]


def token_text(raw: bytes) -> str:
    """A token's text; bytes that are only part of a character are written as `\\xNN` escapes."""
    return raw.decode("utf-8", "backslashreplace")


def chat_logprobs(token_bytes: TokenBytes, entries: Sequence[TokenLogprob]) -> dict[str, Any]:
    """A choice's (or a chunk's) `logprobs`: `{"content": [...], "refusal": None}`."""
    def one(token_id: int, logprob: float) -> dict[str, Any]:
        raw = token_bytes(token_id)
        return {"token": token_text(raw), "logprob": logprob, "bytes": list(raw)}
    return {"content": [{**one(e.token_id, e.logprob), "top_logprobs": [one(t, lp) for t, lp in e.top]}
                        for e in entries], "refusal": None}


class LegacyLogprobs:
    """One completion choice's `logprobs` in the legacy shape; `text_offset` counts characters
    from the start of the choice's text and carries on across calls (a stream's chunks)."""

    def __init__(self, token_bytes: TokenBytes) -> None:
        self.token_bytes = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._chars = 0

    def shape(self, entries: Sequence[TokenLogprob]) -> dict[str, Any]:
        tokens: list[str] = []
        token_logprobs: list[float] = []
        top_logprobs: list[dict[str, float]] = []
        offsets: list[int] = []
        for e in entries:
            raw = self.token_bytes(e.token_id)
            offsets.append(self._chars)
            self._chars += len(self._decoder.decode(raw))
            tokens.append(token_text(raw))
            token_logprobs.append(e.logprob)
            # OpenAI's: the `logprobs` most likely tokens, and always the sampled one.
            top = {token_text(self.token_bytes(t)): lp for t, lp in e.top}
            top.setdefault(tokens[-1], e.logprob)
            top_logprobs.append(top)
        return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs,
                "text_offset": offsets}
