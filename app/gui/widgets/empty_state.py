"""What the chat area shows before a chat has messages: the logo and one line of reassurance;
without a model, why, and the ways to get one (import a GGUF file, the model library, a server)."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from .. import theme

CHAT_EMPTY = "Everything runs on this computer. Pinned chats resume instantly after a restart."
TEMP_EMPTY = ("Everything runs on this computer. Nothing of this chat is written to disk, and it "
              "is gone when you close it.")


class EmptyState(QWidget):
    importGgufRequested = Signal()
    getModelsRequested = Signal()
    connectRemoteRequested = Signal()

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
        self.get_model = QWidget()
        row = QHBoxLayout(self.get_model)
        row.addStretch(1)
        self.import_btn = QPushButton("Import GGUF…")
        self.import_btn.setObjectName("PrimaryButton")
        self.import_btn.setToolTip("Import a model from a .gguf file on this computer")
        self.import_btn.clicked.connect(self.importGgufRequested)
        self.get_btn = QPushButton("Get models…")
        self.get_btn.setToolTip("Find and download a model from Hugging Face")
        self.get_btn.clicked.connect(self.getModelsRequested)
        self.remote_btn = QPushButton("Connect to a server…")
        self.remote_btn.setToolTip("Chat through an OpenAI-compatible server")
        self.remote_btn.clicked.connect(self.connectRemoteRequested)
        for b in (self.import_btn, self.get_btn, self.remote_btn):
            row.addWidget(b)
        row.addStretch(1)
        self.get_model.hide()
        lay.addWidget(self.get_model)
        lay.addStretch(3)
        self._temporary = False
        self._no_model: str | None = None

    def set_temporary(self, temporary: bool) -> None:
        self._temporary = temporary
        self._show()

    def set_no_model(self, reason: str | None) -> None:
        """No model to answer (`reason` says why): the ways to get one; None: a model is there."""
        self._no_model = reason
        self._show()

    def _show(self) -> None:
        if self._no_model is not None:
            self.title.setText("No model yet")
            self.sub.setText(f"{self._no_model}\nImport a GGUF file, download a model, or connect to a server.")
        else:
            self.title.setText("Temporary chat" if self._temporary else "How can I help?")
            self.sub.setText(TEMP_EMPTY if self._temporary else CHAT_EMPTY)
        self.get_model.setVisible(self._no_model is not None)
