"""The store contract the conversation store implements (docs/INTERFACES.md, as code).

`ConversationStore` (SQLite, app/store/store.py) keeps the saved chats in a file and the temporary
ones in memory (`in_memory=True`). The window talks to either through `ChatStore`;
tests/store/test_contract.py runs one suite against both modes. No SQLAlchemy here, so importing
the contract (or the rows) does not load it.
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from .rows import (
    CURRENT_LEAF,
    ConversationDetail,
    ConversationRow,
    CurrentLeaf,
    MessageId,
    MessageRow,
    SearchHit,
)

__all__ = ["CURRENT_LEAF", "ChatStore"]


@runtime_checkable
class ChatStore(Protocol):
    """Conversations as trees of messages; every method is synchronous and thread-safe.

    Unknown ids raise `NotFoundError` (a `LookupError`); bad arguments raise `ValueError`.
    Returned values are the frozen rows of `app.store.rows`.
    """

    # --- conversations -----------------------------------------------------------------------
    def list_conversations(self) -> list[ConversationRow]:
        """Every conversation: pinned first, then most recently updated."""
        ...

    def get_conversation(self, id: str) -> ConversationDetail:
        """One conversation with its model, prompt and settings."""
        ...

    def create_conversation(self, *, id: str | None = None, title: str | None = None,
                            system_prompt: str = "", model_id: str = "",
                            model_fingerprint: str = "",
                            settings: Mapping[str, Any] | None = None,
                            cache_salt: str | None = None,
                            pinned: bool = False,
                            model_choice: str | None = None) -> ConversationDetail:
        """A new, empty conversation (`id` must be a UUID); `title` is a placeholder until the
        first user message sets it. `model_choice`: what the window loads to run it."""
        ...

    def rename(self, id: str, title: str) -> None:
        """Set the title and stop deriving it from the first message."""
        ...

    def set_auto_title(self, id: str, title: str) -> bool:
        """Set a title made for the chat (e.g. by the model) unless the user renamed it; whether
        it was set. The title stays unlocked: a rename still wins later."""
        ...

    def set_pinned(self, id: str, pinned: bool) -> None:
        """Pin or unpin."""
        ...

    def set_kv_state(self, id: str, state: str, bytes: int) -> None:  # noqa: A002
        """Record where the engine keeps the KV cache ("none", "memory", "disk") and its size."""
        ...

    def set_cache_salt(self, id: str, salt: str | None) -> None:
        """Record a remote server's per-chat cache salt (16 to 128 characters) or None."""
        ...

    def set_model(self, id: str, model_id: str, model_choice: str | None) -> None:
        """Record the model the chat runs on now (its name, and what the window loads for it)."""
        ...

    def mark_opened(self, id: str) -> None:
        """Record that the user opened the conversation now."""
        ...

    def update_settings(self, id: str, *, system_prompt: str | None = None,
                        settings: Mapping[str, Any] | None = None) -> None:
        """Replace the system prompt and/or the generation settings."""
        ...

    def delete(self, id: str) -> bool:
        """Delete the conversation; whether one was deleted."""
        ...

    def pending_engine_deletes(self) -> list[str]:
        """Deleted conversations whose engine session is not yet confirmed deleted."""
        ...

    def confirm_engine_deleted(self, id: str) -> None:
        """The engine has deleted this session's files."""
        ...

    # --- messages ----------------------------------------------------------------------------
    def add_message(self, conversation_id: str, role: str, content: str, *,
                    parent_id: MessageId | None | CurrentLeaf = CURRENT_LEAF,
                    figures: Mapping[str, Any] | Any | None = None,
                    model_name: str | None = None,
                    tool_steps: Sequence[Mapping[str, Any]] | None = None) -> MessageRow:
        """Append a message (by default under the current leaf) and make it the current leaf;
        the first user message on a path sets the title unless the user renamed the chat.
        `tool_steps`: the tools an assistant reply called (see `MessageRow.tool_steps`)."""
        ...

    def update_message(self, message_id: MessageId, *, content: str | None = None,
                       figures: Mapping[str, Any] | Any | None = None) -> MessageRow:
        """Replace a message's text and/or figures (a streamed reply finished)."""
        ...

    def active_path(self, conversation_id: str) -> list[MessageRow]:
        """The messages from the root to the current leaf, in order."""
        ...

    def siblings(self, message_id: MessageId) -> list[MessageRow]:
        """The message and its alternatives (same parent), oldest first."""
        ...

    def select_sibling(self, message_id: MessageId) -> list[MessageRow]:
        """Flip to an alternative: the path continues to its most recent descendant."""
        ...

    def duplicate(self, conversation_id: str, *, upto_message_id: MessageId | None = None,
                  title: str | None = None) -> ConversationDetail:
        """A new conversation holding the path to `upto_message_id` (default: the current
        leaf), titled `title` (default: the source's title)."""
        ...

    def search(self, query: str, limit: int = 50) -> list[SearchHit]:
        """Conversations whose title or messages contain every word of `query`, best first;
        matched words are wrapped in SNIPPET_OPEN/SNIPPET_CLOSE in the snippet."""
        ...

    def close(self) -> None:
        """Release the store; the SQLite store refuses later calls."""
        ...
