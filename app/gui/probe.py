"""Event-loop stall probe: a fast timer that records the longest gap between its ticks.

A tick that arrives late means the UI thread was busy (or blocked) for that long; the longest
lateness while something happens is the stall a user would feel.
"""
from __future__ import annotations

import time

from PySide6.QtCore import QObject, Qt, QTimer


class StallProbe(QObject):
    def __init__(self, interval_ms: int = 5, parent: QObject | None = None):
        super().__init__(parent)
        self.interval_s = interval_ms / 1000
        self._timer = QTimer(self)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        self._last = 0.0
        self.max_gap_s = 0.0
        self.ticks = 0
        self.gaps: list[float] = []

    def start(self) -> "StallProbe":
        self.max_gap_s = 0.0
        self.ticks = 0
        self.gaps = []
        self._last = time.perf_counter()
        self._timer.start()
        return self

    def stop(self) -> float:
        self._tick()
        self._timer.stop()
        return self.max_stall_ms

    def _tick(self) -> None:
        now = time.perf_counter()
        gap = now - self._last
        self._last = now
        self.ticks += 1
        self.gaps.append(gap)
        if gap > self.max_gap_s:
            self.max_gap_s = gap

    @property
    def max_stall_ms(self) -> float:
        """The longest time the loop could not run the timer, beyond its interval."""
        return max(0.0, (self.max_gap_s - self.interval_s) * 1000)

    def percentile_ms(self, q: float) -> float:
        if not self.gaps:
            return 0.0
        xs = sorted(self.gaps)
        return max(0.0, (xs[min(len(xs) - 1, int(q * len(xs)))] - self.interval_s) * 1000)
