"""Amber's conversation stores (no Qt; see docs/INTERFACES.md).

`ConversationStore` (SQLAlchemy 2 over SQLite) keeps the saved chats in one file and, with
`in_memory=True`, the temporary ones in a database that never reaches the disk; it implements
`ChatStore`. It is imported on first use, so the rows and the contract load without SQLAlchemy
(the window starts faster).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import NotFoundError, StoreError
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
