"""The notice above a chat made with another model than the one loaded: what switching costs,
a button that switches to the chat's model, and one that keeps the loaded model."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget


class ModelNotice(QFrame):
    switchRequested = Signal(str)      # the chat's model (a `Settings.model` value)
    keepRequested = Signal(str)        # the chat id: go on with the loaded model

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ModelNotice")
        self.choice: str = ""
        self.chat_id: str = ""
        self.setStyleSheet("QFrame#ModelNotice { border: 1px solid palette(mid); border-radius: 6px; }")
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 6, 6, 6)
        self.text = QLabel("")
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row.addWidget(self.text, 1)
        self.switch_btn = QPushButton("")
        self.switch_btn.clicked.connect(lambda: self.switchRequested.emit(self.choice))
        row.addWidget(self.switch_btn)
        self.keep_btn = QPushButton("")
        self.keep_btn.clicked.connect(lambda: self.keepRequested.emit(self.chat_id))
        row.addWidget(self.keep_btn)
        self.hide()

    def show_for(self, chat_id: str, choice: str, text: str, chat_model: str, loaded: str) -> None:
        self.chat_id, self.choice = chat_id, choice
        self.text.setText(text)
        self.switch_btn.setText(f"Switch to {chat_model}")
        self.keep_btn.setText(f"Keep {loaded}")
        self.show()
