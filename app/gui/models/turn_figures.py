"""What is said about a turn's figures, in words (no Qt): the short figures under a reply,
prompt-processing progress, the overflow notice, and `LiveTurn` — the figures of the turn in
progress, kept by the replies controller and shown by the bubble and the status bar."""
from __future__ import annotations

import itertools
import math
import time
from typing import Any, Callable


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


def prefill_text(done: int, total: int, eta_s: float | None = None) -> str:
    """“Reading prompt… 2,048 / 7,670 tokens, about 45 s left” (the tokens this turn computes;
    the time left once a rate has been measured)."""
    done = max(0, min(done, total))
    if total > 0 and done == total:
        return f"Read the prompt ({total:,} tokens); the reply starts…"
    text = f"Reading prompt… {done:,} / {total:,} tokens"
    left = time_left(eta_s)
    return f"{text}, {left}" if left else text


def time_left(eta_s: float | None) -> str:
    """“about 45 s left”, “about 3 min left”; "" while unknown."""
    if eta_s is None or not math.isfinite(eta_s):
        return ""
    if eta_s < 5:
        return "almost done"
    if eta_s < 60:
        step = 1 if eta_s < 10 else 5
        return f"about {max(step, int(round(eta_s / step)) * step)} s left"
    if eta_s < 90:
        return "about 1 min left"
    return f"about {int(round(eta_s / 60))} min left"


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


def _fit_cost(chunks: list[tuple[tuple[int, int], float]]) -> tuple[float | None, float]:
    """Least squares for seconds per token = a + b·position, both ≥ 0, from chunks
    ((first position, end position), seconds); (None, 0) without data."""
    xs = [p1 - p0 for (p0, p1), _ in chunks]                  # tokens
    ys = [(p1 * p1 - p0 * p0) / 2 for (p0, p1), _ in chunks]  # their positions, summed
    ds = [d for _, d in chunks]
    if not xs or sum(xs) <= 0:
        return None, 0.0
    sxx, syy = sum(x * x for x in xs), sum(y * y for y in ys)
    sxy = sum(x * y for x, y in zip(xs, ys, strict=True))
    sxd, syd = sum(x * d for x, d in zip(xs, ds, strict=True)), sum(y * d for y, d in zip(ys, ds, strict=True))
    det = sxx * syy - sxy * sxy
    if len(chunks) >= 2 and det > 1e-9 * sxx * syy:
        a, b = (sxd * syy - syd * sxy) / det, (syd * sxx - sxd * sxy) / det
        if a >= 0 and b >= 0:
            return a, b
    return sum(ds) / sum(xs), 0.0          # too little, or too noisy, to see growth: a flat rate


class LiveTurn:
    """The figures of the turn in progress (UI thread): prefill progress, tokens, tok/s."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.started = clock()
        self.prefill: tuple[int, int] | None = None
        self.prefill_reports: list[tuple[float, int]] = []   # (when, done) of each report
        self.tokens = 0
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None

    def on_prefill(self, done: int, total: int) -> None:
        now = self.clock()
        if self.prefill is not None and total != self.prefill[1]:
            self.prefill_reports = []       # another prompt (a retry): measure afresh
        self.prefill = (done, total)
        self.prefill_reports.append((now, done))

    def prefill_eta(self) -> float | None:
        """Seconds of prompt processing left, counting down between reports (None until two
        reports apart). Each token costs more the further into the context it sits (attention
        reads every earlier one), so the time per token is fitted as a + b·position over the
        chunks measured so far, and the rest of the prompt is costed with it. The first chunk
        also pays for warming up: it is left out once there are two others."""
        if self.prefill is None or len(self.prefill_reports) < 2:
            return None
        done, total = self.prefill
        pairs = list(itertools.pairwise(self.prefill_reports))
        chunks = [((p0, p1), t1 - t0) for (t0, p0), (t1, p1) in pairs if p1 > p0 and t1 >= t0]
        if len(chunks) >= 3:
            chunks = chunks[1:]
        a, b = _fit_cost(chunks)
        if a is None:
            return None
        left = a * (total - done) + b * (total * total - done * done) / 2
        return max(0.0, left - (self.clock() - self.prefill_reports[-1][0]))

    @property
    def prefilling(self) -> bool:
        return self.prefill is not None and not self.decoding

    def on_chunk(self, n_tokens: int) -> None:
        now = self.clock()
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
            if self.prefill is None:
                return "Waiting for the first token…"
            return prefill_text(*self.prefill, self.prefill_eta())
        return short_figures(self.figures())
