"""What the user does to chats from the window: new, open, close, delete (an undo toast instead
of a question), undo, pin, duplicate, branch, flip to a sibling, rename; the keyboard's chat
actions act on the row focused in the chat list while it has the focus, else on the chat on
screen. The work is `ChatsController`'s and `Deletions`'; closing and deleting also stop a reply."""
from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QWidget

from app.store.titles import chat_title

from .controllers import deletions as deletions_mod
from .controllers.chats import ChatsController
from .controllers.deletions import Deletions
from .controllers.replies import RepliesController
from .preferences import Preferences
from .widgets.chat_view import ChatView
from .widgets.hover_pause import HoverPause
from .widgets.notices import Toast
from .widgets.sidebar import Sidebar
from .widgets.status import StatusBar


class ChatActions:
    def __init__(self, chats: ChatsController, deletions: Deletions, replies: RepliesController,
                 sidebar: Sidebar, chat_view: ChatView, toast: Toast, status: StatusBar, prefs: Preferences, *,
                 confirm: Callable[[str, str], bool], sidebar_shown: Callable[[], bool],
                 header: Callable[[], Any], parent: QWidget):
        """`confirm(title, text)`: the user agrees to a step that cannot be undone;
        `sidebar_shown()`: the chat list is on screen; `header()`: show the chat's title again."""
        self.chats, self.deletions, self.replies = chats, deletions, replies
        self.sidebar, self.chat_view, self.toast, self.status, self.prefs = sidebar, chat_view, toast, status, prefs
        self.confirm, self.sidebar_shown, self.header, self.parent = confirm, sidebar_shown, header, parent
        self.toast_timer = QTimer(parent)
        self.toast_timer.setSingleShot(True)
        self.toast_timer.timeout.connect(toast.hide)
        self.toast_pause = HoverPause(toast, parent)   # the countdown waits while hovered
        self.toast_pause.watch(self.toast_timer)
        deletions.deleted.connect(self.on_deleted)
        deletions.restored.connect(self.on_restored)

    # --- which chat ----------------------------------------------------------------------------
    def target(self) -> str | None:
        """The chat a chat action from the keyboard acts on: the row focused in the chat list
        while the list has the focus, else the chat on screen."""
        if self.sidebar.view.hasFocus():
            return self.sidebar.current_id()
        return self.chats.current_id

    def on_target(self, act: Callable[[str], Any]) -> None:
        target = self.target()
        if target is not None:
            act(target)

    def on_current(self, act: Callable[[str], Any]) -> None:
        if self.chats.current_id is not None:
            act(self.chats.current_id)

    # --- the actions -----------------------------------------------------------------------------
    def new(self, temporary: bool = False) -> None:
        self.chats.new(temporary)

    def open(self, chat_id: str) -> None:
        if chat_id == self.chats.current_id and self.chat_view.message_ids():
            return
        row = self.chats.model.chat(chat_id)
        if row is not None and not row.temporary:
            self.prefs.settings.last_chat_id = chat_id
        self.chats.open(chat_id)

    def toggle_pin(self, chat_id: str) -> None:
        self.chats.toggle_pin(chat_id)

    def duplicate(self, chat_id: str, upto_message_id: Any = None) -> None:
        self.chats.duplicate(chat_id, upto_message_id)

    def branch_from(self, message_id: Any) -> None:
        if self.chats.current_id is not None:
            self.chats.duplicate(self.chats.current_id, message_id)

    def flip_sibling(self, message_id: Any, delta: int) -> None:
        if self.replies.stream is None and self.chat_view.widget_for(message_id) is not None:
            self.chats.flip_sibling(message_id, delta)

    def _stop_in(self, chat_id: str) -> None:
        stream = self.replies.stream
        if stream is not None and stream.chat_id == chat_id:
            self.replies.stop()

    def close(self, chat_id: str | None, *, ask: bool = False) -> None:
        """Close a chat: a temporary one is discarded entirely (with `ask`, after the user said
        so: it cannot be undone); others just leave the view."""
        if chat_id is None:
            if self.chats.draft is not None:
                self.new()
            return
        row = self.chats.model.chat(chat_id)
        if ask and row is not None and row.temporary and not self.confirm(
                "Discard temporary chat?",
                f"“{chat_title(row.title, 40)}” is temporary: closing it discards it for good."):
            return
        self._stop_in(chat_id)
        if self.chats.is_temporary(chat_id):
            self.chats.discard_temporary(chat_id)
        else:
            self.chats.close_in_engine(chat_id)
        if chat_id == self.chats.current_id:
            self.prefs.settings.last_chat_id = None
            self.new()

    def delete(self, chat_id: str) -> None:
        """One gesture: no confirmation, an undo toast instead (10 s, paused while hovered)."""
        row = self.chats.model.chat(chat_id)
        if row is None:
            return
        if row.temporary:
            self.close(chat_id, ask=True)
            return
        self._stop_in(chat_id)
        neighbour = self.chats.neighbour(chat_id)
        self.deletions.hide(chat_id, row.title)
        if chat_id == self.chats.current_id:
            if neighbour is not None:
                self.open(neighbour)
            else:
                self.new()

    def on_deleted(self, chat_id: str, title: str) -> None:
        self.toast.popup(f"Deleted “{chat_title(title, 40)}”")
        self.toast_timer.start(deletions_mod.UNDO_MS)
        if self.toast_pause.paused:   # the pointer already rests on the toast
            self.toast_pause.pause()

    def undo_delete(self) -> None:
        """Bring back the last deleted chat (Ctrl+Z, Undo on the toast): any time until Amber
        closes, one chat per press, the last deleted first."""
        if self.deletions.undo() is None:
            self.status.set_message("Nothing to undo")

    def on_restored(self, chat_id: str) -> None:
        self.toast.hide()
        self.open(chat_id)

    def rename(self, chat_id: str) -> None:
        """Rename in place in the chat list (or, with the list folded away, in a small dialog)."""
        model = self.chats.model
        row = model.chat(chat_id)
        if row is None:
            return
        if self.sidebar_shown():
            self.sidebar.select(chat_id)
            self.sidebar.view.setFocus()
            self.sidebar.rename_current()
            return
        from PySide6.QtWidgets import QInputDialog  # noqa: PLC0415

        title, ok = QInputDialog.getText(self.parent, "Rename chat", "Title", text=row.title)
        if ok:
            model.setData(model.index_of(chat_id), title)

    def on_temporary_toggled(self, temporary: bool) -> None:
        """The header's temporary switch: a new, empty chat becomes temporary (or regular)."""
        draft = self.chats.draft
        if self.chats.current_id is None and draft is not None and draft.temporary != temporary:
            self.new(temporary=temporary)
        else:
            self.header()   # nothing to change: the button shows the chat as it is

    # --- the chat list follows -------------------------------------------------------------------
    def on_created(self, chat_id: str) -> None:
        self.sidebar.select(chat_id)
        self.header()

    def on_list_changed(self) -> None:
        self.sidebar.view.doItemsLayout()   # search hits are two-line rows, others one
        self.sidebar.select(self.chats.current_id)
