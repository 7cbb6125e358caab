"""Moved to `app.store.memory` (beside the SQLite store); this re-export is for the transition."""
from __future__ import annotations

from app.store.memory import MemoryStore

__all__ = ["MemoryStore"]
