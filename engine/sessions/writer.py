"""The single thread that touches session files (saves, spills, manifest writes, deletions)."""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable


def _noop() -> None:
    """The job that `drain` waits for."""


class SerialWriter:
    """The single thread that touches session files: saves never block generation."""

    def __init__(self, before_job: Callable[[], None] = lambda: None) -> None:
        self._before_job = before_job
        self._jobs: queue.Queue[tuple[Callable[[], Any], Future] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="amber-kv-writer", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], Any]) -> Future:
        fut: Future = Future()
        self._jobs.put((job, fut))
        return fut

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, fut = item
            try:
                if job is not _noop:
                    self._before_job()      # marks this process as a writer (not for a drain)
                fut.set_result(job())
            except BaseException as exc:   # reported through the future
                fut.set_exception(exc)

    def drain(self, timeout: float) -> bool:
        """Waits for the jobs queued so far; False when the timeout passed first."""
        from concurrent.futures import TimeoutError as FutureTimeout
        if not self._thread.is_alive():
            return self._jobs.empty()
        try:
            self.submit(_noop).result(timeout)
        except FutureTimeout:
            return False
        return True

    def stop(self, timeout: float) -> None:
        self._jobs.put(None)
        self._thread.join(timeout)
