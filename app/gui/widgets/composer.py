"""The message composer: Enter sends, Shift+Enter breaks the line, Stop cancels at once.

The text field stays editable while a reply streams (you can write the next message); only
sending is blocked until the reply ends or is stopped, and while no model is loaded.
"""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QSize, Qt, Signal
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QSizePolicy,
                               QToolButton, QVBoxLayout, QWidget)

from .. import theme


class ComposerEdit(QPlainTextEdit):
    submit = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("ComposerEdit")
        self.setTabChangesFocus(True)
        self.setPlaceholderText("Message Amber…  (Enter to send, Shift+Enter for a new line)")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().contentsChanged.connect(self._fit)
        # the lines a paste wraps into change with the width, after the resize and lazily: the
        # height follows the layout's own count, or a wider window left a blank band
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self._fit()

    def keyPressEvent(self, event: Any) -> None:  # noqa: N802
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            mods = event.modifiers()
            if mods & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
                return
            if not mods & (Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier
                           | Qt.KeyboardModifier.MetaModifier):
                self.submit.emit()
                return
        super().keyPressEvent(event)

    def _fit(self) -> None:
        fm = QFontMetrics(self.font())
        lines = max(1, min(10, int(self.document().size().height())))
        h = lines * fm.lineSpacing() + 2 * int(self.document().documentMargin()) + 4
        self.setFixedHeight(max(h, fm.lineSpacing() + 14))

    def resizeEvent(self, event: Any) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit()


class Composer(QFrame):
    sendRequested = Signal(str)
    stopRequested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("Composer")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(12, 8, 8, 8)
        outer.setSpacing(2)
        row = QHBoxLayout()
        row.setSpacing(8)
        self.edit = ComposerEdit(self)
        self.edit.setAccessibleName("Message")
        self.edit.setAccessibleDescription("Enter sends, Shift+Enter starts a new line, Esc stops a reply")
        self.edit.submit.connect(self.try_send)
        self.edit.installEventFilter(self)
        row.addWidget(self.edit, 1)
        self.send_btn = QToolButton(self)
        self.send_btn.setObjectName("SendButton")
        self.send_btn.setToolTip("Send (Enter)")
        self.send_btn.setAccessibleName("Send")
        self.send_btn.setIconSize(QSize(18, 18))
        self.send_btn.clicked.connect(self.try_send)
        self.stop_btn = QToolButton(self)
        self.stop_btn.setObjectName("StopButton")
        self.stop_btn.setToolTip("Stop generating (Esc)")
        self.stop_btn.setAccessibleName("Stop")
        self.stop_btn.setIconSize(QSize(18, 18))
        self.stop_btn.clicked.connect(self.stopRequested)
        self.stop_btn.hide()
        row.addWidget(self.send_btn, 0, Qt.AlignmentFlag.AlignBottom)
        row.addWidget(self.stop_btn, 0, Qt.AlignmentFlag.AlignBottom)
        outer.addLayout(row)
        below = QHBoxLayout()
        below.setSpacing(8)
        self.hint = QLabel("")
        self.hint.setObjectName("ChatSubtitle")
        self.hint.hide()
        below.addWidget(self.hint, 1)
        # what MCP tools the next reply may call, or why it may call none (app/gui/tool_binding.py)
        self.tools = QLabel("")
        self.tools.setObjectName("ToolsState")
        self.tools.setAccessibleName("Tools")
        self.tools.hide()
        below.addWidget(self.tools, 0, Qt.AlignmentFlag.AlignRight)
        # the draft's size in the model's tokens (app/gui/draft_tokens.py fills it in)
        self.tokens = QLabel("")
        self.tokens.setObjectName("DraftTokens")
        self.tokens.setAccessibleName("Message length in tokens")
        self.tokens.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.tokens.hide()
        below.addWidget(self.tokens, 0, Qt.AlignmentFlag.AlignRight)
        outer.addLayout(below)
        self._generating = False
        self._ready = False
        self._reason = "Loading the model…"
        self._update_icons()
        theme.changed_signal().connect(self._update_icons)
        self._update()

    def _update_icons(self, *_: Any) -> None:
        t = theme.current()
        self.send_btn.setIcon(theme.icon("send", t.accent_text, 18))
        self.stop_btn.setIcon(theme.icon("stop", t.base, 18))

    def eventFilter(self, obj: Any, event: Any) -> bool:  # noqa: N802
        if obj is self.edit and event.type() in (QEvent.Type.FocusIn, QEvent.Type.FocusOut):
            self.setProperty("focused", event.type() == QEvent.Type.FocusIn)
            self.style().unpolish(self)
            self.style().polish(self)
        elif obj is self.edit and event.type() == QEvent.Type.KeyPress:
            if event.key() == Qt.Key.Key_Escape and self._generating:
                self.stopRequested.emit()
                return True
        return super().eventFilter(obj, event)

    # --- state -------------------------------------------------------------------------------
    def set_ready(self, ready: bool, reason: str = "") -> None:
        """Whether a model is there to answer (sending is blocked, typing is not)."""
        self._ready = ready
        self._reason = reason
        self._update()

    def set_generating(self, generating: bool) -> None:
        self._generating = generating
        self._update()

    @property
    def generating(self) -> bool:
        return self._generating

    def can_send(self) -> bool:
        return self._ready and not self._generating and bool(self.edit.toPlainText().strip())

    def _update(self) -> None:
        self.send_btn.setVisible(not self._generating)
        self.stop_btn.setVisible(self._generating)
        self.send_btn.setEnabled(self._ready)
        self.send_btn.setToolTip("Send (Enter)" if self._ready else (self._reason or "Not ready"))
        self.hint.setText("" if self._ready else self._reason)
        self.hint.setVisible(bool(not self._ready and self._reason))

    def show_tokens(self, text: str, *, warn: bool = False, tip: str = "") -> None:
        """“1,234 tokens” under the draft (a warning colour when it will not fit); "" hides it."""
        self.tokens.setText(text)
        self.tokens.setToolTip(tip)
        if bool(self.tokens.property("warn")) != warn:
            self.tokens.setProperty("warn", warn)
            self.tokens.style().unpolish(self.tokens)
            self.tokens.style().polish(self.tokens)
        self.tokens.setVisible(bool(text))

    def try_send(self) -> None:
        if not self.can_send():
            return
        text = self.edit.toPlainText().strip()
        self.edit.clear()
        self.sendRequested.emit(text)

    def text(self) -> str:
        return self.edit.toPlainText()

    def set_text(self, text: str) -> None:
        self.edit.setPlainText(text)

    def focus(self) -> None:
        self.edit.setFocus()
