"""A one-line label that shortens its text with “…” to the room it has (full text in the tooltip)."""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


class ElidedLabel(QLabel):
    """`text()` is the full text; what is painted is cut to the label's width."""

    def __init__(self, text: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self._full = ""
        # shrinks to its minimum (then elides) before anything beside it has to give way
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802
        self._full = text or ""
        self._elide()
        self.updateGeometry()

    def text(self) -> str:
        return self._full

    def shown_text(self) -> str:
        """What is on screen now (ends with “…” when cut)."""
        return super().text()

    def _elide(self) -> None:
        w = self.width() - self.contentsMargins().left() - self.contentsMargins().right()
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, max(12, w))
        QLabel.setText(self, shown)
        self.setToolTip(self._full if shown != self._full else "")

    def resizeEvent(self, event: Any) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._elide()

    def sizeHint(self) -> QSize:  # noqa: N802
        h = super().sizeHint().height()
        return QSize(self.fontMetrics().horizontalAdvance(self._full) + 4, h)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(40, super().minimumSizeHint().height())
