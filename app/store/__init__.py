"""Amber's conversation store: SQLAlchemy 2 over one SQLite file, no Qt (see docs/INTERFACES.md)."""
from __future__ import annotations

from .errors import NotFoundError, StoreError
from .rows import ConversationDetail, ConversationRow, MessageRow, SearchHit
from .search import SNIPPET_CLOSE, SNIPPET_OPEN
from .store import CURRENT_LEAF, ConversationStore
from .titles import DEFAULT_TITLE

__all__ = [
    "CURRENT_LEAF",
    "ConversationDetail",
    "ConversationRow",
    "ConversationStore",
    "DEFAULT_TITLE",
    "MessageRow",
    "NotFoundError",
    "SNIPPET_CLOSE",
    "SNIPPET_OPEN",
    "SearchHit",
    "StoreError",
]
