"""Deleting a chat is one gesture with an undo: the chat leaves the list at once and is deleted
(store and engine) when its undo time runs out, or at quit."""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from ...chat.kv import is_remote_engine
from .chats import ChatsController
from .engine import EngineController

UNDO_MS = 10000         # how long a deleted chat can be brought back (paused while hovered)


class Deletions(QObject):
    """`pending` maps a deleted chat's id to its undo timer (paused while the toast is hovered)."""

    deleted = Signal(str, str)      # chat id, title: offer the undo
    restored = Signal(str)          # chat id: show it again

    def __init__(self, chats: ChatsController, engines: EngineController,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.chats, self.engines = chats, engines
        self.pending: dict[str, QTimer] = {}
        self.last: str | None = None

    def hide(self, chat_id: str, title: str) -> QTimer:
        """Take the chat off the list; it is deleted in `UNDO_MS` unless undone."""
        self.chats.model.hide(chat_id)
        timer = QTimer(self)
        timer.setSingleShot(True)
        timer.setInterval(UNDO_MS)
        timer.timeout.connect(lambda: self.commit(chat_id))
        self.pending[chat_id] = timer
        timer.start()
        self.last = chat_id
        self.deleted.emit(chat_id, title)
        return timer

    def undo(self) -> None:
        chat_id = self.last
        timer = self.pending.pop(chat_id, None) if chat_id else None
        if timer is None or chat_id is None:
            return
        timer.stop()
        timer.deleteLater()
        self.chats.model.unhide(chat_id)
        self.restored.emit(chat_id)

    def commit(self, chat_id: str) -> None:
        """Delete now: the store's rows, then the engine's KV (or remembered for later)."""
        timer = self.pending.pop(chat_id, None)
        if timer is None:
            return
        timer.stop()
        timer.deleteLater()
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
