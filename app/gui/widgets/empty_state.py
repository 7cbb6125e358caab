"""What the chat area shows before a chat has messages: the logo and one line of reassurance."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from .. import theme

CHAT_EMPTY = "Everything runs on this computer. Pinned chats resume instantly after a restart."
TEMP_EMPTY = ("Everything runs on this computer. Nothing of this chat is written to disk, and it "
              "is gone when you close it.")


class EmptyState(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("EmptyState")
        lay = QVBoxLayout(self)
        lay.addStretch(2)
        logo = QLabel()
        logo.setPixmap(theme.app_icon().pixmap(64, 64))
        logo.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(logo)
        self.title = QLabel("How can I help?")
        self.title.setObjectName("EmptyTitle")
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(self.title)
        self.sub = QLabel(CHAT_EMPTY)
        self.sub.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.sub.setWordWrap(True)
        lay.addWidget(self.sub)
        lay.addStretch(3)

    def set_temporary(self, temporary: bool) -> None:
        self.title.setText("Temporary chat" if temporary else "How can I help?")
        self.sub.setText(TEMP_EMPTY if temporary else CHAT_EMPTY)
