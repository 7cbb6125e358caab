"""The window's size and place, and where the chat list ends, kept in the settings (base64 of
Qt's own state) and given back on the next start."""
from __future__ import annotations

import base64

from PySide6.QtCore import QByteArray
from PySide6.QtWidgets import QMainWindow, QSplitter

from .settings import Settings


def restore(window: QMainWindow, splitter: QSplitter, s: Settings) -> None:
    try:
        if s.window_geometry:
            window.restoreGeometry(QByteArray(base64.b64decode(s.window_geometry)))
        if s.splitter_state:
            splitter.restoreState(QByteArray(base64.b64decode(s.splitter_state)))
    except (ValueError, TypeError):
        pass


def remember(window: QMainWindow, splitter: QSplitter, s: Settings) -> None:
    s.window_geometry = base64.b64encode(bytes(window.saveGeometry().data())).decode()
    s.splitter_state = base64.b64encode(bytes(splitter.saveState().data())).decode()
