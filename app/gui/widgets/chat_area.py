"""The right-hand side of the window: the header, the notices (banner, temporary-chat notice,
save errors),
the chat view or the empty state, the composer; the undo toast floats over it."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from .chat_header import ChatHeader
from .chat_view import ChatView
from .composer import Composer
from .empty_state import EmptyState
from .model_notice import ModelNotice
from .notices import Banner, Toast
from .save_notice import SaveNotice
from .search_jump import SearchJump

TEMP_NOTICE = "Temporary chat — nothing is saved, and it is discarded when closed."


class ChatArea(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("ChatArea")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        rl = QVBoxLayout(self)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.setSpacing(0)
        self.header = ChatHeader()
        rl.addWidget(self.header)

        banner_holder = QWidget()
        bl = QVBoxLayout(banner_holder)
        bl.setContentsMargins(16, 8, 16, 0)
        self.banner = Banner()
        self.banner.hide()
        bl.addWidget(self.banner)
        self.temp_notice = QLabel(TEMP_NOTICE)
        self.temp_notice.setWordWrap(True)
        self.temp_notice.setObjectName("ChatSubtitle")
        self.temp_notice.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.temp_notice.hide()
        bl.addWidget(self.temp_notice)
        self.save_notice = SaveNotice()       # "couldn't save to disk: …; kept in memory"
        bl.addWidget(self.save_notice)
        self.model_notice = ModelNotice()     # a chat made with another model than the loaded one
        bl.addWidget(self.model_notice)
        rl.addWidget(banner_holder)

        self.chat_view = ChatView()
        self.search_jump = SearchJump(self.chat_view)
        self.empty = EmptyState()
        rl.addWidget(self.empty, 1)
        rl.addWidget(self.chat_view, 1)
        self.chat_view.hide()

        comp_holder = QWidget()
        cl = QHBoxLayout(comp_holder)
        cl.setContentsMargins(16, 6, 16, 14)
        cl.addStretch(1)
        self.composer = Composer()
        self.composer.setMaximumWidth(852)
        cl.addWidget(self.composer, 100)
        cl.addStretch(1)
        rl.addWidget(comp_holder)
        self.toast = Toast(self)

    def show_messages(self, has_messages: bool) -> None:
        """The chat view when the chat has messages, else the empty state."""
        self.chat_view.setVisible(has_messages)
        self.empty.setVisible(not has_messages)
