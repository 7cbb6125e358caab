"""Notices over the chat: the `Banner` (model preparation progress, load errors, Retry) and
the `Toast` ("Chat deleted — Undo")."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget


class Banner(QFrame):
    """A slim notice above the chat: model preparation progress or errors."""

    retry = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("Banner")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 8)
        self.label = QLabel("")
        self.label.setWordWrap(True)
        lay.addWidget(self.label, 1)
        self.bar = QProgressBar()
        self.bar.setFixedWidth(180)
        self.bar.setRange(0, 1000)
        lay.addWidget(self.bar)
        self.button = QPushButton("Retry")
        self.button.clicked.connect(self.retry)
        self.button.hide()
        lay.addWidget(self.button)

    def show_progress(self, text: str, fraction: float) -> None:
        self.label.setText(text)
        if fraction < 0:
            self.bar.setRange(0, 0)
        else:
            self.bar.setRange(0, 1000)
            self.bar.setValue(int(fraction * 1000))
        self.bar.show()
        self.button.hide()
        self.show()

    def show_error(self, text: str) -> None:
        self.label.setText(text)
        self.bar.hide()
        self.button.show()
        self.show()


class Toast(QFrame):
    """“Chat deleted — Undo”, bottom of the chat area."""

    undo = Signal()

    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.setObjectName("Toast")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(14, 8, 8, 8)
        self.label = QLabel("")
        lay.addWidget(self.label)
        self.button = QPushButton("Undo (Ctrl+Z)")
        self.button.setToolTip("Brings the chat back; Ctrl+Z does too, until Amber closes")
        self.button.setAccessibleName("Undo")
        self.button.setObjectName("UndoButton")
        self.button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.button.clicked.connect(self.undo)
        lay.addWidget(self.button)
        self.hide()

    def popup(self, text: str) -> None:
        self.label.setText(text)
        self.adjustSize()
        self.place()
        self.show()
        self.raise_()

    def place(self) -> None:
        """Bottom centre of the chat area (again after the window is resized)."""
        p = self.parentWidget()
        if p is not None:
            self.move((p.width() - self.width()) // 2, p.height() - self.height() - 110)
