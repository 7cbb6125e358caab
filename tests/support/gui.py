"""Small drivers shared by the GUI tests."""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt


def send(qtbot: Any, w: Any, text: str, *, wait: bool = True, timeout: int = 5000) -> None:
    """Type `text` into the composer and press Enter (optionally wait for the whole reply)."""
    w.composer.edit.setFocus()
    w.composer.set_text(text)
    if wait:
        with qtbot.waitSignal(w.replyFinished, timeout=timeout):
            qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    else:
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)


def wait_idle(qtbot: Any, w: Any, timeout: int = 5000) -> None:
    qtbot.waitUntil(lambda: w.tasks.pending == 0 and w.stream is None, timeout=timeout)


def open_chat(qtbot: Any, w: Any, chat_id: str) -> None:
    with qtbot.waitSignal(w.chatLoaded, timeout=5000):
        w.open_chat(chat_id)
    qtbot.waitUntil(lambda: not w.chat_view.loading, timeout=5000)


def bubble_texts(w: Any) -> list[tuple[str, str]]:
    return [(mw.item.role, mw.item.content) for mw in w.chat_view.widgets]
