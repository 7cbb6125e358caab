"""Deleting a chat is one gesture with an undo: the chat leaves the list at once and is deleted
(store and engine) only when Amber closes. Until then Undo (the toast, or Ctrl+Z any time later)
brings back the last deleted chat, then the one before, and so on."""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

from ...chat.kv import is_remote_engine
from .chats import ChatsController
from .engine import EngineController

UNDO_MS = 10000         # how long the undo toast shows (paused while hovered); Ctrl+Z works till quit


class Deletions(QObject):
    """`pending` maps each deleted chat's id to its title, oldest first: hidden, not yet deleted."""

    deleted = Signal(str, str)      # chat id, title: offer the undo
    restored = Signal(str)          # chat id: show it again

    def __init__(self, chats: ChatsController, engines: EngineController,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.chats, self.engines = chats, engines
        self.pending: dict[str, str] = {}

    @property
    def last(self) -> str | None:
        """The chat Undo brings back: the last one deleted and not yet restored."""
        return next(reversed(self.pending), None)

    def hide(self, chat_id: str, title: str) -> None:
        """Take the chat off the list; it is deleted when Amber closes, unless undone."""
        self.chats.model.hide(chat_id)
        self.pending.pop(chat_id, None)
        self.pending[chat_id] = title
        self.deleted.emit(chat_id, title)

    def undo(self) -> str | None:
        """Bring back the last deleted chat; its id, or None when there is none."""
        chat_id = self.last
        if chat_id is None:
            return None
        del self.pending[chat_id]
        self.chats.model.unhide(chat_id)
        self.restored.emit(chat_id)
        return chat_id

    def commit(self, chat_id: str) -> None:
        """Delete now: the store's rows, then the engine's KV (or remembered for later)."""
        if self.pending.pop(chat_id, None) is None:
            return
        self.chats.model.remove(chat_id)
        self.chats.opened.pop(chat_id, None)
        store, engine = self.chats.store, self.engines.engine

        def work() -> None:
            if store is not None:
                store.delete(chat_id)
            if engine is not None:
                engine.delete(chat_id)
                if store is not None and not is_remote_engine(engine):   # else retried locally later
                    store.confirm_engine_deleted(chat_id)

        self.chats.tasks.run_task(work, None, self.chats.errorOccurred.emit)

    def commit_all(self) -> None:
        for cid in list(self.pending):
            self.commit(cid)

    def is_pending(self, chat_id: Any) -> bool:
        return chat_id in self.pending
