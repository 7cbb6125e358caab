"""Fair service for several clients: one engine thread steps the active generations in turn.

Generation is CPU-bound and the engine runs one model, so one thread per model drives every
request: each turn advances one generation by one event (a prefill, or one decoded token), then
the next (round-robin), so a long reply never holds a short one hostage. Waiting requests are
admitted round-robin across callers (FIFO within a caller). The asyncio event loop never runs
engine code: events reach it through `loop.call_soon_threadsafe`. A cancelled job (client gone)
is told through its CancelToken, which the engine checks between prefill chunks and after every
token, so it stops within one step.

With an engine that batches concurrent decode steps (`batches_decode`: Amber's SessionManager on
CPU, engine.runtime.batcher), `parallel=True` drives each active generation on a thread of its
own instead: their one-token steps then run as one ONNX Runtime call (4 chats at once cost about
as much per step as one), and every active generation advances at every batched step.
"""
from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Generator
from typing import Any, Callable, Iterator

from .errors import ApiError

DEFAULT_MAX_ACTIVE = 4     # generations interleaved at once
DEFAULT_MAX_QUEUED = 32    # waiting beyond that: 429


class _End:
    """Marks the end of a job's events (after its GenerationResult, or after an error)."""


END = _End()


class Job:
    """One request's generation: `start(cancel)` makes the event iterator (run on the engine thread)."""

    def __init__(self, start: Callable[[threading.Event], Iterator[Any]], owner: str,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.start = start
        self.owner = owner
        self.cancel = threading.Event()
        self.events: asyncio.Queue[Any] = asyncio.Queue()
        self._loop = loop
        self.iterator: Iterator[Any] | None = None
        self.started_at: float | None = None     # perf_counter when the engine thread took it up

    def deliver(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:      # the loop is closed: nobody is listening any more
            self.cancel.set()


class Scheduler:
    def __init__(self, max_active: int = DEFAULT_MAX_ACTIVE, max_queued: int = DEFAULT_MAX_QUEUED,
                 parallel: bool = False) -> None:
        self.max_active = max_active
        self.max_queued = max_queued
        self.parallel = parallel
        self._cv = threading.Condition()
        self._waiting: collections.OrderedDict[str, collections.deque[Job]] = collections.OrderedDict()
        self._active: collections.deque[Job] = collections.deque()
        self._closed = False
        self.served = 0
        self._thread = threading.Thread(target=self._run, name="amber-server-engine", daemon=True)
        self._thread.start()

    # ---- submitting ---------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        with self._cv:
            if self._closed:
                raise ApiError(503, "the server is shutting down", code="server_shutting_down")
            queued = sum(len(q) for q in self._waiting.values())
            if queued >= self.max_queued:
                raise ApiError(429, f"the server is busy ({len(self._active)} generating, {queued} waiting); "
                                    "retry later", code="server_busy", headers={"Retry-After": "1"})
            self._waiting.setdefault(job.owner, collections.deque()).append(job)
            self._cv.notify()

    def load(self) -> dict[str, int]:
        with self._cv:
            return {"active": len(self._active), "waiting": sum(len(q) for q in self._waiting.values()),
                    "served": self.served}

    # ---- the engine thread --------------------------------------------------------------------
    def _admit(self) -> None:
        while len(self._active) < self.max_active and self._waiting:
            owner, queue = next(iter(self._waiting.items()))
            job = queue.popleft()
            del self._waiting[owner]
            if queue:       # the caller goes to the back of the line: round-robin across callers
                self._waiting[owner] = queue
            self._active.append(job)

    def _run(self) -> None:
        if self.parallel:
            self._run_parallel()
            return
        while True:
            with self._cv:
                while not self._closed and not self._active and not self._waiting:
                    self._cv.wait()
                if self._closed:
                    return
                self._admit()
                job = self._active.popleft()
            if self._step(job):
                with self._cv:
                    self._active.append(job)
            else:
                with self._cv:
                    self.served += 1

    def _run_parallel(self) -> None:
        """Admits waiting jobs (round-robin across callers, as above) into free places; each
        admitted job runs to its end on a thread of its own (`_drive`)."""
        while True:
            with self._cv:
                while not self._closed and not (self._waiting and len(self._active) < self.max_active):
                    self._cv.wait()
                if self._closed:
                    return
                before = len(self._active)
                self._admit()
                admitted = list(self._active)[before:]
            for job in admitted:
                threading.Thread(target=self._drive, args=(job,), name="amber-server-generation",
                                 daemon=True).start()

    def _drive(self, job: Job) -> None:
        while self._step(job):
            pass
        with self._cv:
            if job in self._active:     # close() may have cleared it already
                self._active.remove(job)
            self.served += 1
            self._cv.notify_all()

    def _step(self, job: Job) -> bool:
        """Advances one job by one event; False when it is finished."""
        try:
            if job.iterator is None:
                if job.cancel.is_set():
                    job.deliver(END)
                    return False
                job.started_at = time.perf_counter()
                job.iterator = job.start(job.cancel)
            event = next(job.iterator)
        except StopIteration:
            job.deliver(END)
            return False
        except Exception as exc:    # noqa: BLE001 - reported to the request (as an OpenAI error), never raised here
            job.deliver(exc)
            job.deliver(END)
            return False
        job.deliver(event)
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Cancels every job, lets their generators clean up, stops the thread."""
        with self._cv:
            if self._closed:
                return
            jobs = list(self._active) + [j for q in self._waiting.values() for j in q]
            for job in jobs:
                job.cancel.set()
        # Let the active generators see their cancel tokens and finish (they release sessions).
        deadline = threading.Event()
        for _ in range(1000):
            with self._cv:
                if not self._active:
                    break
            deadline.wait(0.01)
        with self._cv:
            self._closed = True
            leftover = list(self._active) + [j for q in self._waiting.values() for j in q]
            self._active.clear()
            self._waiting.clear()
            self._cv.notify_all()
        self._thread.join(timeout)
        for job in leftover:
            if isinstance(job.iterator, Generator):     # an engine's generator: its finally blocks run
                try:
                    job.iterator.close()
                except Exception:  # noqa: BLE001 - shutting down: each waiting request still gets its 503
                    pass
            job.deliver(ApiError(503, "the server is shutting down", code="server_shutting_down"))
            job.deliver(END)
