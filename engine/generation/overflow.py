"""Long chats: which messages a turn keeps when the conversation no longer fits the context window.

Policies (`OverflowPolicy`), as LM Studio offers them:
  stop             the turn is refused (finish_reason context_full), as before;
  truncate_middle  the leading system message(s) stay, then the latest turns that fit with room
                   for the reply (the default: the conversation keeps going);
  rolling          only the latest turns that fit.

A cut always starts at a user message, so the kept history never opens with a reply. Two things
keep the cut cheap across turns: when it has to move it moves with slack (room for a few more
turns), and a cut that still fits is kept as it is (sticky), so the next turns extend the same
prefix and reuse its KV instead of re-prefilling everything after the system prompt.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from engine.api import OverflowPolicy

# Room kept for the reply: max_new_tokens, but never more than this share of the window.
REPLY_ROOM_SHARE = 4          # window // 4
# When the cut moves, it leaves this share of the window free beyond the reply's room.
SLACK_SHARE = 8               # window // 8


def parse_policy(value: Any) -> OverflowPolicy:
    """The policy named by `value`; ValueError naming the choices otherwise."""
    try:
        return OverflowPolicy(value)
    except ValueError:
        choices = ", ".join(p.value for p in OverflowPolicy)
        raise ValueError(f"unknown overflow policy {value!r} (choose from {choices})") from None


def reply_room(window: int, max_new_tokens: int) -> int:
    return max(1, min(max_new_tokens, window // REPLY_ROOM_SHARE))


@dataclass
class Fit:
    """The messages a turn keeps: `head` (kept system messages) + messages[start:]."""
    messages: list[dict[str, Any]]
    start: int                 # index of the first kept non-head message
    dropped_messages: int
    head: int                  # how many leading messages are kept as head


def fit_messages(messages: Sequence[dict[str, Any]], policy: OverflowPolicy, window: int, room: int,
                 measure: Callable[[list[dict[str, Any]]], int], sticky_start: int | None = None) -> Fit:
    """Chooses what to keep so that `measure(kept)` (prompt tokens) + `room` fits `window`.

    `measure` must be (roughly) decreasing as older messages are dropped. With policy stop, or when
    everything fits, nothing is dropped. When even the last message alone does not fit, the
    smallest cut is returned (the generator then reports context_full).
    """
    msgs = list(messages)
    whole = Fit(msgs, 0, 0, 0)
    if policy == OverflowPolicy.STOP or not msgs:
        return whole
    budget = window - room
    if measure(msgs) <= budget:
        return whole
    head = 0
    if policy == OverflowPolicy.TRUNCATE_MIDDLE:
        while head < len(msgs) - 1 and msgs[head].get("role") == "system":
            head += 1
    # Where a cut may start: at a user message after the head (or the last message).
    starts = [i for i in range(head + 1, len(msgs)) if msgs[i].get("role") == "user"]
    if not starts or starts[-1] != len(msgs) - 1:
        starts.append(len(msgs) - 1)

    def kept(start: int) -> list[dict[str, Any]]:
        return msgs[:head] + msgs[start:]

    def fits(start: int, limit: int) -> bool:
        return measure(kept(start)) <= limit

    def first_fitting(limit: int) -> int | None:
        """The earliest start in `starts` that fits `limit` (binary search: later starts are shorter)."""
        lo, hi = 0, len(starts) - 1
        if not fits(starts[hi], limit):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(starts[mid], limit):
                hi = mid
            else:
                lo = mid + 1
        return starts[lo]

    if sticky_start is not None and sticky_start in starts and fits(sticky_start, budget):
        start = sticky_start
    else:
        slack = window // SLACK_SHARE
        start = first_fitting(budget - slack) if budget - slack > 0 else None
        if start is None:
            start = first_fitting(budget)
        if start is None:
            start = starts[-1]
    return Fit(kept(start), start, start - head, head)
