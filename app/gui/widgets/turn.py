"""What a reply bubble shows about its own turn: prompt-processing progress while the engine
prefills, live figures while it streams, and a notice when older turns were left out."""
from __future__ import annotations


from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget

from ..models.turn_figures import LiveTurn, overflow_notice, prefill_text  # noqa: F401 - used from here


class PrefillIndicator(QWidget):
    """“Reading prompt… 2,048 / 7,670 tokens, about 45 s left” and a thin bar, inside the reply
    bubble until the first token."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("PrefillIndicator")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 2, 0, 2)
        lay.setSpacing(8)
        self.label = QLabel(prefill_text(0, 1))
        self.label.setObjectName("MessageMeta")
        self.bar = QProgressBar()
        self.bar.setObjectName("PrefillBar")
        self.bar.setTextVisible(False)
        self.bar.setRange(0, 1000)
        self.bar.setFixedHeight(6)
        self.bar.setMaximumWidth(220)
        lay.addWidget(self.label)
        lay.addWidget(self.bar, 1)
        lay.addStretch(1)
        self.hide()

    def set_waiting(self) -> None:
        """Before the engine has said how far it is: a busy bar (never an empty bubble)."""
        self.label.setText("Reading prompt…")
        self.bar.setRange(0, 0)
        self.show()

    def set_progress(self, done: int, total: int, text: str | None = None) -> None:
        """How far the prompt is; `text` says it in words (with the time left), else the counts."""
        self.bar.setRange(0, 1000)
        self.label.setText(text or prefill_text(done, total))
        self.bar.setValue(int(1000 * done / total) if total > 0 else 0)
        self.show()
