"""The persistent notice above a chat whose state could not be saved, or whose saved state was
damaged: "couldn't save to disk: …; kept in memory". It stays while the engine reports the
problem (`SessionInfo.save_error` / `manifest_error`) and goes when a later save succeeds."""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from ..error_words import in_words


def notice_text(info: Any) -> str | None:
    """What to say about a session's disk state, from its SessionInfo (None: nothing wrong)."""
    save_error = getattr(info, "save_error", None)
    manifest_error = getattr(info, "manifest_error", None)
    parts = []
    if save_error:
        why = in_words(str(save_error).removeprefix("saving the session failed: "))
        parts.append(f"Couldn't save to disk: {why}; this chat is kept in memory only.")
    if manifest_error:
        parts.append(f"This chat's saved state was damaged ({in_words(str(manifest_error))}).")
    return " ".join(parts) or None


class SaveNotice(QLabel):
    """One label; remembers each chat's last notice and shows the current chat's."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("SaveNotice")
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setStyleSheet("QLabel#SaveNotice { background: #fdecea; color: #611a15; border: 1px solid #f5c2c0;"
                           " border-radius: 6px; padding: 6px 10px; }")
        self._by_chat: dict[str, str] = {}
        self._current: str | None = None
        self.hide()

    def note(self, chat_id: str, info: Any) -> None:
        """Records what the engine says about `chat_id` (called with every SessionInfo the window gets)."""
        if info is None:
            return
        text = notice_text(info)
        if text:
            self._by_chat[chat_id] = text
        else:
            self._by_chat.pop(chat_id, None)
        self.show_for(self._current)

    def show_for(self, chat_id: str | None) -> None:
        self._current = chat_id
        text = self._by_chat.get(chat_id) if chat_id else None
        self.setText(text or "")
        self.setVisible(bool(text))

    def forget(self, chat_id: str) -> None:
        self._by_chat.pop(chat_id, None)
        self.show_for(self._current)
