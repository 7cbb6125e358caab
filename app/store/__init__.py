"""Amber's conversation stores (no Qt; see docs/INTERFACES.md).

`ConversationStore` (SQLAlchemy 2 over one SQLite file) keeps the saved chats, `MemoryStore` the
temporary ones; both implement `ChatStore`. The SQLite store is imported on first use, so the
rows, the contract and the memory store load without SQLAlchemy (the window starts faster).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import NotFoundError, StoreError
from .memory import MemoryStore
from .protocol import ChatStore
from .rows import (
    CURRENT_LEAF,
    SNIPPET_CLOSE,
    SNIPPET_OPEN,
    ConversationDetail,
    ConversationRow,
    MessageId,
    MessageRow,
    SearchHit,
)
from .titles import DEFAULT_TITLE, title_from_message

if TYPE_CHECKING:
    from .store import ConversationStore

__all__ = [
    "CURRENT_LEAF",
    "ChatStore",
    "ConversationDetail",
    "ConversationRow",
    "ConversationStore",
    "DEFAULT_TITLE",
    "MemoryStore",
    "MessageId",
    "MessageRow",
    "NotFoundError",
    "SNIPPET_CLOSE",
    "SNIPPET_OPEN",
    "SearchHit",
    "StoreError",
    "title_from_message",
]


def __getattr__(name: str) -> Any:
    """`ConversationStore` on first use (it imports SQLAlchemy)."""
    if name == "ConversationStore":
        from .store import ConversationStore  # noqa: PLC0415

        return ConversationStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
