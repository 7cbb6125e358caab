"""A reasoning model's thinking, shown collapsed above its answer.

Qwen3 and the DeepSeek-R1 distills write `<think>…</think>` before the answer; the engine's one
rule, `engine.text.reasoning.split_reasoning` (plain text in, a `Reply` out), splits it for display
where the message's body is made (app/gui/models/message.py). The reply bubble shows one line —
“Thinking…” while the reasoning streams, then “Thought for N s” — that expands to the reasoning
text on a click. N is measured while the reply streams; for a reply loaded from the store it is
estimated from the turn's figures (the reasoning's share of the reply's characters times its
generation time), and the line says “about”.
"""
from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QToolButton, QVBoxLayout, QWidget

from ..models.message import Reply
from ..models.thinking_time import estimated_seconds, seconds_text


class ThinkingPanel(QWidget):
    """The “Thought for N s” line (a toggle) and the reasoning text under it, collapsed."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("ThinkingPanel")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 2)
        lay.setSpacing(2)
        self.toggle = QToolButton(self)
        self.toggle.setObjectName("ThinkingToggle")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setAccessibleName("Show the model's reasoning")
        self.toggle.toggled.connect(self._on_toggled)
        self.text = QLabel(self)
        self.text.setObjectName("ThinkingText")
        self.text.setWordWrap(True)
        self.text.setTextFormat(Qt.TextFormat.PlainText)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.text.setAccessibleName("The model's reasoning")
        self.text.setStyleSheet("QLabel#ThinkingText { color: gray; border-left: 2px solid gray;"
                                " padding-left: 8px; }")
        lay.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        lay.addWidget(self.text)
        self.text.hide()
        self.hide()
        self._started: float | None = None
        self.seconds: float | None = None
        self.estimated = False
        self.reply: Reply | None = None

    def set_reply(self, reply: Reply, *, streaming: bool, figures: dict[str, Any] | None = None) -> None:
        """Shows `reply`'s reasoning (hidden when it has none). While `streaming` the thinking time
        is measured from the first reasoning text to its closing tag."""
        self.reply = reply
        if reply.reasoning is None:
            self.hide()
            return
        now = time.monotonic()
        if streaming and self._started is None:
            self._started = now
        if self._started is not None and self.seconds is None and not reply.thinking:
            self.seconds, self.estimated = now - self._started, False
        if not streaming and self._started is None and self.seconds is None:
            est = estimated_seconds(reply, figures)
            if est is not None:
                self.seconds, self.estimated = est, True
        self.text.setText(reply.reasoning)
        self.toggle.setText(self.title())
        self.show()

    def title(self) -> str:
        if self.reply is not None and self.reply.thinking:
            return "Thinking…"
        if self.seconds is None:
            return "Thought"
        return f"Thought for {'about ' if self.estimated else ''}{seconds_text(self.seconds)}"

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def _on_toggled(self, on: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.toggle.setAccessibleName("Hide the model's reasoning" if on else "Show the model's reasoning")
        self.text.setVisible(on)
