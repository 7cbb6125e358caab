"""The memory budget: which idle sessions' KV leaves memory when live KV is over budget."""
from __future__ import annotations

from typing import Iterable, Iterator

from engine.api import SessionKind
from engine.sessions.session import Session

DEFAULT_MEMORY_BUDGET = 1 << 30


class MemoryBudget:
    """Least recently used first; never the session being served, a temporary one (nothing else
    holds its KV) or one with saves pending (the writer still reads its cache)."""

    def __init__(self, budget_bytes: int = DEFAULT_MEMORY_BUDGET) -> None:
        self.bytes = budget_bytes

    @staticmethod
    def live_bytes(sessions: Iterable[Session]) -> int:
        return sum(s.cache.nbytes for s in sessions if s.cache is not None)

    def candidates(self, sessions: Iterable[Session], keep: str | None) -> Iterator[Session]:
        """The sessions whose KV may go, in the order it should (the caller stops once under budget)."""
        live = [s for s in sessions if s.cache is not None]
        for s in sorted(live, key=lambda x: x.last_used):
            if s.id == keep or s.kind == SessionKind.TEMPORARY or s.pending_saves:
                continue
            yield s
