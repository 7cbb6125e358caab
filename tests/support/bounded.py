"""Runs a call under a wall-clock alarm and a traced-memory ceiling (for hostile-input tests).

A reader that loops for ever is interrupted by SIGALRM (the loops in question are Python code, so
the signal lands), and a reader that allocates without bound is caught by tracemalloc's peak,
which numpy's allocations report to. Either way the test fails with a message instead of hanging
the suite or exhausting the machine. Not a timing assertion: the limits are generous margins
against "for ever", far above what a correct reader needs.
"""
from __future__ import annotations

import signal
import threading
import tracemalloc
from typing import Any, Callable


class Unbounded(AssertionError):
    """The call ran past its time limit or its memory ceiling."""


def run_bounded(fn: Callable[[], Any], *, seconds: int = 60, max_mb: float = 256) -> Any:
    """fn() with an alarm after `seconds` and a check that it never held more than `max_mb` MiB."""
    use_alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM")

    def _expired(_sig: int, _frame: Any) -> None:
        raise Unbounded(f"still running after {seconds} s (a loop bounded by nothing?)")

    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    old = signal.signal(signal.SIGALRM, _expired) if use_alarm else None
    if use_alarm:
        signal.alarm(seconds)
    try:
        result = fn()
    finally:
        if use_alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        _, peak = tracemalloc.get_traced_memory()
        if not was_tracing:
            tracemalloc.stop()
        if peak > max_mb * 2 ** 20:   # checked on errors too: replaces the exception in flight
            raise Unbounded(f"held {peak / 2 ** 20:.0f} MiB, more than {max_mb} MiB")
    return result
