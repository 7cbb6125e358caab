"""Titles from a chat's first exchange, made in the background by the loaded model
(`app.chat.titling`), so that similar chats can be told apart in the list.

When a chat's first reply is in and the chat still has its first-message title (a send, an edit
of the first message, a regenerate after a stopped first reply), the model is asked
in a side session for a short title, one chat at a time on a thread of its own. The title is
stored only if the user has not renamed the chat (`set_auto_title`, one conditional write: a
rename always wins, whichever lands first) and shown only if the list still shows the title it
replaces. A temporary chat gets its title in memory only (its store is the memory store). When
the model's answer is empty or garbage the chat keeps the title it has (its first message).
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.store.titles import chat_title

from ...chat.titling import make_title
from ..tasks import TaskRunner
from .chats import ChatsController
from .engine import EngineController
from .replies import RepliesController

log = logging.getLogger(__name__)


class AutoTitles(QObject):
    titled = Signal(str, str)       # chat id, the title now shown
    kept = Signal(str)              # chat id: no title came (garbage, renamed, failed): it keeps its own

    def __init__(self, chats: ChatsController, engines: EngineController, replies: RepliesController,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.chats, self.engines, self.replies = chats, engines, replies
        self.runner = TaskRunner(max_threads=1, parent=self)   # a title at a time, off the reply's thread
        self.cancel = threading.Event()
        self.enabled = True
        self._renamed: set[str] = set()
        self._made: dict[str, tuple[str, str]] = {}   # chat id -> (the title replaced, the title made)
        chats.model.renameRequested.connect(lambda chat_id, _title: self._renamed.add(chat_id))
        replies.turnFinished.connect(self.on_turn_finished)

    def stop(self) -> None:
        """Quitting: a title being made stops at its next token, none is started."""
        self.enabled = False
        self.cancel.set()

    def on_turn_finished(self, chat_id: str, out: Any, _item: Any, stopped: bool) -> None:
        first = first_exchange(out.rows)
        detail = out.detail
        self._keep_made(chat_id, detail)
        if (not self.enabled or stopped or out.error is not None or first is None
                or detail is None or detail.title_locked or chat_id in self._renamed):
            return
        engine, store = self.engines.engine, self.chats.store_for(chat_id)
        if engine is None or store is None:
            return
        user, reply = first
        if detail.title != chat_title(user):
            return      # titled already (a regenerated first reply keeps its chat's title)
        before = detail.title
        cancel = self.cancel

        def work() -> str | None:
            title = make_title(engine, user, reply, cancel)
            if title is None or title == before or chat_id in self._renamed:
                return None
            return title if store.set_auto_title(chat_id, title) else None

        def done(title: str | None) -> None:
            row = self.chats.model.chat(chat_id)
            # shown only over the title it replaces: a rename (or a newer title) stays on screen
            if title is None or row is None or row.title != before or chat_id in self._renamed:
                self.kept.emit(chat_id)
                return
            self._made[chat_id] = (before, title)
            self._show(chat_id, title)
            self.titled.emit(chat_id, title)

        def failed(exc: BaseException) -> None:
            log.info("no title for a chat: %s", exc)
            done(None)

        self.runner.run_task(work, done, failed)


    def _show(self, chat_id: str, title: str) -> None:
        self.chats.model.update(chat_id, title=title)
        if chat_id == self.chats.current_id:
            self.chats.headerChanged.emit()

    def _keep_made(self, chat_id: str, detail: Any) -> None:
        """A later turn that read the chat just before its title was stored puts the old title
        back on the list: show the made one again (the store has it)."""
        made = self._made.get(chat_id)
        row = self.chats.model.chat(chat_id)
        if made is None or row is None or detail is None:
            return
        before, title = made
        if chat_id in self._renamed or detail.title_locked or detail.title not in (before, title):
            del self._made[chat_id]       # renamed, or titled anew: that title stands
        elif row.title == before:
            self._show(chat_id, title)


def first_exchange(rows: list[Any]) -> tuple[str, str] | None:
    """(user, reply) when the chat's path is exactly its first exchange, else None."""
    said = [r for r in rows if r.role != "system"]
    if len(said) != 2 or said[0].role != "user" or said[1].role != "assistant":
        return None
    if not said[0].content.strip() or not said[1].content.strip():
        return None
    return said[0].content, said[1].content
