"""How long a reasoning model thought, in words (no Qt): measured while a reply streams, or
estimated for a stored reply from its turn's figures (the reasoning's share of the reply's
characters times its generation time)."""
from __future__ import annotations

from typing import Any

from .message import Reply


def seconds_text(seconds: float) -> str:
    """“3 s”, “0.4 s”, “2 min 5 s”."""
    if seconds < 1:
        return f"{max(seconds, 0.1):.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest} s"


def estimated_seconds(reply: Reply, figures: dict[str, Any] | None) -> float | None:
    """The thinking time of a stored reply, from its figures: generation time x the reasoning's
    share of the text (None when the figures do not tell)."""
    if not figures or reply.reasoning is None:
        return None
    tokens = float(figures.get("generated_tokens") or 0)
    rate = float(figures.get("decode_tokens_per_s") or 0)
    total = len(reply.reasoning) + len(reply.content)
    if tokens <= 0 or rate <= 0 or total <= 0:
        return None
    return tokens / rate * len(reply.reasoning) / total
