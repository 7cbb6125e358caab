"""Event-loop stall probe: a fast timer that records the longest gap between its ticks.

A tick that arrives late means the UI thread was busy (or blocked) for that long; the longest
lateness while something happens is the stall a user would feel.
"""
from __future__ import annotations

import collections
import sys
import threading
import time
import traceback

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
        self._last_cpu = 0.0
        self.max_busy_s = 0.0
        self.max_gap_s = 0.0
        self.ticks = 0
        self.gaps: list[float] = []

    def start(self) -> "StallProbe":
        self.max_gap_s = 0.0
        self.max_busy_s = 0.0
        self.ticks = 0
        self.gaps = []
        self._last = time.perf_counter()
        self._last_cpu = time.thread_time()
        self._timer.start()
        return self

    def stop(self) -> float:
        self._tick()
        self._timer.stop()
        return self.max_stall_ms

    def _tick(self) -> None:
        now = time.perf_counter()
        cpu = time.thread_time()
        gap = now - self._last
        busy = cpu - self._last_cpu
        self._last = now
        self._last_cpu = cpu
        if busy > self.max_busy_s:
            self.max_busy_s = busy
        self.ticks += 1
        self.gaps.append(gap)
        if gap > self.max_gap_s:
            self.max_gap_s = gap

    @property
    def max_stall_ms(self) -> float:
        """The longest time the loop could not run the timer, beyond its interval."""
        return max(0.0, (self.max_gap_s - self.interval_s) * 1000)

    @property
    def max_busy_ms(self) -> float:
        """The most CPU time the UI thread spent between two ticks: the stall our own code
        causes, without the time the OS gave other processes (a loaded machine)."""
        return self.max_busy_s * 1000

    def percentile_ms(self, q: float) -> float:
        if not self.gaps:
            return 0.0
        xs = sorted(self.gaps)
        return max(0.0, (xs[min(len(xs) - 1, int(q * len(xs)))] - self.interval_s) * 1000)


class StallTracer:
    """Diagnostics: a watchdog thread that samples the UI thread's stack every 5 ms while the
    probe has not ticked for `threshold_ms` (what was the loop busy with?)."""

    def __init__(self, probe: StallProbe, threshold_ms: float = 30.0):
        self.probe = probe
        self.threshold_s = threshold_ms / 1000
        self.main_id = threading.main_thread().ident
        self.stalls: dict[float, list[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> "StallTracer":
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, str]]:
        """(approximate stall ms, most frequent stack) for each stall, longest first."""
        self._stop.set()
        self._thread.join(1)
        out = []
        for samples in self.stalls.values():
            stack, _ = collections.Counter(samples).most_common(1)[0]
            out.append((len(samples) * 5.0 + self.threshold_s * 1000, stack))
        return sorted(out, key=lambda x: -x[0])

    def _watch(self) -> None:
        while not self._stop.wait(0.005):
            last = self.probe._last  # noqa: SLF001
            if time.perf_counter() - last > self.threshold_s:
                frame = sys._current_frames().get(self.main_id or 0)  # noqa: SLF001
                if frame is not None:
                    stack = "".join(traceback.format_stack(frame, limit=14)[-7:])
                    self.stalls.setdefault(last, []).append(stack)
