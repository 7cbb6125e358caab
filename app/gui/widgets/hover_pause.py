"""Countdowns that stand still while the pointer is over a widget (the undo toast's)."""
from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QObject, QTimer


class HoverPause(QObject):
    """Pauses the single-shot `timers` while the pointer is over `widget`, and resumes each
    with the time it had left when the pointer leaves."""

    def __init__(self, widget: Any, parent: QObject | None = None):
        super().__init__(parent or widget)
        self.widget = widget
        self.timers: list[QTimer] = []
        self._left: dict[int, int] = {}
        self.paused = False
        widget.installEventFilter(self)

    def watch(self, timer: QTimer) -> None:
        self.timers = [t for t in self.timers if _alive(t)] + [timer]
        if self.paused:
            self._pause(timer)

    def _pause(self, t: QTimer) -> None:
        if t.isActive():
            self._left[id(t)] = max(1, t.remainingTime())
            t.stop()

    def pause(self) -> None:
        self.paused = True
        for t in self.timers:
            if _alive(t):
                self._pause(t)

    def resume(self) -> None:
        self.paused = False
        for t in self.timers:
            left = self._left.pop(id(t), None)
            if left is not None and _alive(t):
                t.start(left)
        self._left.clear()

    def eventFilter(self, obj: Any, event: Any) -> bool:  # noqa: N802
        if obj is self.widget:
            if event.type() == QEvent.Type.Enter:
                self.pause()
            elif event.type() in (QEvent.Type.Leave, QEvent.Type.Hide):
                self.resume()
        return False


def _alive(t: QTimer) -> bool:
    import shiboken6  # noqa: PLC0415

    return shiboken6.isValid(t)
