"""Window-wide keyboard shortcuts (they work wherever the focus is in the window)."""
from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QWidget


def shortcut(window: QWidget, seq: Any, slot: Callable[[], Any], name: str) -> QAction:
    a = QAction(name, window)
    a.setShortcut(QKeySequence(seq))
    a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    a.triggered.connect(slot)
    window.addAction(a)
    return a
