"""What is said about a turn's figures, in words (no Qt): the short figures under a reply,
prompt-processing progress, the overflow notice, and `LiveTurn` — the figures of the turn in
progress, kept by the replies controller and shown by the bubble and the status bar."""
from __future__ import annotations

import time
from typing import Any


def count(n: int, noun: str = "token") -> str:
    """“1 token”, “2,048 tokens”."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def short_figures(f: dict[str, Any] | None) -> str:
    if not f:
        return ""
    bits = []
    if f.get("decode_tokens_per_s"):
        bits.append(f"{float(f['decode_tokens_per_s']):.1f} tok/s")
    if f.get("generated_tokens"):
        bits.append(count(int(f["generated_tokens"])))
    if f.get("finish_reason") == "cancelled":
        bits.append("stopped")
    elif f.get("finish_reason") == "length":
        bits.append("length limit")
    elif f.get("finish_reason") == "context_full":
        bits.append("context full")
    return " · ".join(bits)


def prefill_text(done: int, total: int) -> str:
    """“Processing prompt 42 %” (of the tokens this turn computes)."""
    pct = int(100 * done / total) if total > 0 else 0
    return f"Processing prompt {max(0, min(100, pct))} %"


def overflow_notice(figures: dict[str, Any] | None) -> str:
    """The notice for a reply whose history did not fit: which turns the engine left out."""
    if not figures:
        return ""
    n = int(figures.get("dropped_messages") or 0)
    if n <= 0:
        return ""
    toks = int(figures.get("dropped_tokens") or 0)
    what = f"{n} older message{'s' if n != 1 else ''}"
    if toks:
        what += f" ({count(toks)})"
    return f"{what} left out to fit the context window"


class LiveTurn:
    """The figures of the turn in progress (UI thread): prefill progress, tokens, tok/s."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.prefill: tuple[int, int] | None = None
        self.tokens = 0
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None

    def on_prefill(self, done: int, total: int) -> None:
        self.prefill = (done, total)

    def on_chunk(self, n_tokens: int) -> None:
        now = time.perf_counter()
        if self.first_token_at is None:
            self.first_token_at = now
        self.last_token_at = now
        self.tokens += max(1, n_tokens)

    @property
    def decoding(self) -> bool:
        return self.first_token_at is not None

    def tokens_per_s(self) -> float | None:
        """Decode speed so far (tokens after the first over the time since it)."""
        if self.first_token_at is None or self.last_token_at is None or self.tokens < 2:
            return None
        dt = self.last_token_at - self.first_token_at
        return (self.tokens - 1) / dt if dt > 0 else None

    def figures(self) -> dict[str, Any]:
        """A figures dict for `status.short_figures` / the status bar, as far as known now."""
        return {"generated_tokens": self.tokens, "decode_tokens_per_s": self.tokens_per_s() or 0.0}

    def summary(self) -> str:
        if not self.decoding:
            return prefill_text(*self.prefill) if self.prefill else "Waiting for the first token…"
        return short_figures(self.figures())
