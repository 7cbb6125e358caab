"""Background work for the GUI: one small `run_task` helper and a generator-driven worker.

* `run_task(func, callback, error)` runs `func()` on a thread pool and calls `callback(result)`
  (or `error(exc)`) back on the UI thread — Picard's helper, nothing more.
* `GeneratorWorker` turns a generator into a worker (superqt's `thread_worker` idea): every
  `yield` becomes a `yielded` signal on the UI thread, a `cancel` event is checked between yields
  and is also handed to the generator so that the engine can stop at once.

Widgets never do I/O on the UI thread; everything that touches the engine, the store or files goes
through here.
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from typing import Any, Callable, Generator, TypeVar

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot, QCoreApplication

log = logging.getLogger(__name__)

Callback = Callable[[Any], None]
T = TypeVar("T")
Failure = Callable[[BaseException], None]


class _Relay(QObject):
    """Lives on the UI thread; its signal is emitted from a worker, so delivery is queued."""

    done = Signal(object, object)  # result, exception

    def __init__(self, owner: "TaskRunner", callback: Callback | None, error: Callback | None):
        super().__init__()
        self._owner = owner
        self._callback = callback
        self._error = error
        self.done.connect(self._deliver)

    @Slot(object, object)
    def _deliver(self, result: Any, exc: BaseException | None) -> None:
        self._owner._finished(self)
        if exc is None:
            if self._callback is not None:
                self._callback(result)
        elif self._error is not None:
            self._error(exc)
        else:
            log.error("background task failed: %s", "".join(
                traceback.format_exception(type(exc), exc, exc.__traceback__)))


class _Task(QRunnable):
    def __init__(self, func: Callable[[], Any], relay: _Relay):
        super().__init__()
        self.setAutoDelete(True)
        self._func = func
        self._relay = relay

    def run(self) -> None:  # worker thread
        try:
            result = self._func()
        except BaseException as exc:  # noqa: BLE001 - handed to the UI thread
            result, error = None, exc
        else:
            error = None
        try:
            self._relay.done.emit(result, error)
        except RuntimeError:  # the receiver is gone (the app is quitting): nobody to tell
            pass


class TaskRunner(QObject):
    """A thread pool plus the bookkeeping needed to wait for (or count) pending work."""

    idle = Signal()

    def __init__(self, max_threads: int = 4, parent: QObject | None = None):
        super().__init__(parent)
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(max_threads)
        self._pending: set[_Relay] = set()
        self._lock = threading.Lock()

    def run_task(self, func: Callable[[], T], callback: Callable[[T], None] | None = None,
                 error: Failure | None = None) -> None:
        """The one way to do background work (Anki's QueryOp): `func` (the op) runs on the pool;
        `callback(result)` (success) or `error(exc)` (failure) runs on the UI thread; without
        `error` a failure is logged with its traceback."""
        relay = _Relay(self, callback, error)
        with self._lock:
            self._pending.add(relay)
        self.pool.start(_Task(func, relay))

    def _finished(self, relay: _Relay) -> None:
        with self._lock:
            self._pending.discard(relay)
            empty = not self._pending
        relay.deleteLater()
        if empty:
            self.idle.emit()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def wait(self, timeout_s: float = 5.0) -> bool:
        """Wait for running work and deliver its callbacks (tests, shutdown). True when idle."""
        deadline = time.monotonic() + timeout_s
        app = QCoreApplication.instance()
        while time.monotonic() < deadline:
            if app is not None:
                app.processEvents()
            if self.pending == 0:
                return True
            time.sleep(0.002)
        return self.pending == 0


_default: TaskRunner | None = None


def default_runner() -> TaskRunner:
    global _default
    if _default is None:
        _default = TaskRunner()
    return _default


def run_task(func: Callable[[], T], callback: Callable[[T], None] | None = None,
             error: Failure | None = None) -> None:
    """Run `func()` off the UI thread; `callback(result)` / `error(exc)` run on the UI thread."""
    default_runner().run_task(func, callback, error)


class GeneratorWorker(QObject):
    """Runs a generator on a worker thread; each `yield` arrives as `yielded` on the UI thread.

    The factory receives the cancel event (a `threading.Event`, which satisfies the engine's
    `CancelToken`). `cancel()` sets it; from then on nothing more is emitted as `yielded` (the UI
    stops changing at once) while the generator winds down; one that keeps yielding for more than
    `grace_s` after a cancel is closed.
    `finished(return_value)` or `errored(exc)` is emitted exactly once, after the last `yielded`.
    """

    yielded = Signal(object)
    finished = Signal(object)
    errored = Signal(object)
    _relay_yield = Signal(object)
    _relay_done = Signal(object, object)

    _live: set["GeneratorWorker"] = set()
    grace_s = 2.0

    def __init__(self, factory: Callable[[threading.Event], Generator[Any, None, Any]],
                 pool: QThreadPool | None = None):
        super().__init__()
        self._factory = factory
        self._pool = pool or QThreadPool.globalInstance()
        self.cancel_event = threading.Event()
        self.running = False
        self.done = False
        self._relay_yield.connect(self._on_yield)
        self._relay_done.connect(self._on_done)

    def start(self) -> None:
        self.running = True
        GeneratorWorker._live.add(self)
        worker = self

        class _Run(QRunnable):
            def run(self_inner) -> None:  # noqa: N805 - worker thread
                worker._run()

        runnable = _Run()
        runnable.setAutoDelete(True)
        self._runnable = runnable
        self._pool.start(runnable)

    def cancel(self) -> None:
        self.cancel_event.set()

    def _run(self) -> None:
        value: Any = None
        try:
            gen = self._factory(self.cancel_event)
            try:
                cancelled_at = 0.0
                while True:
                    item = next(gen)
                    if not self.cancel_event.is_set():
                        self._relay_yield.emit(item)
                        continue
                    cancelled_at = cancelled_at or time.monotonic()
                    if time.monotonic() - cancelled_at > self.grace_s:
                        gen.close()
                        break
            except StopIteration as stop:
                value = stop.value
        except BaseException as exc:  # noqa: BLE001
            self._emit_done(None, exc)
            return
        self._emit_done(value, None)

    def _emit_done(self, value: Any, exc: BaseException | None) -> None:
        try:
            self._relay_done.emit(value, exc)
        except RuntimeError:  # the window went away first
            pass

    @Slot(object)
    def _on_yield(self, item: Any) -> None:
        self.yielded.emit(item)

    @Slot(object, object)
    def _on_done(self, value: Any, exc: BaseException | None) -> None:
        self.running = False
        self.done = True
        GeneratorWorker._live.discard(self)
        if exc is None:
            self.finished.emit(value)
        else:
            self.errored.emit(exc)


class ProgressRelay(QObject):
    """A progress callback that may be called from any thread; `progressed` arrives on the UI
    thread, coalesced so that a chatty producer cannot flood the event loop."""

    progressed = Signal(float, str)
    _raw = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._lock = threading.Lock()
        self._latest: tuple[float, str] | None = None
        self._raw.connect(self._deliver)

    def __call__(self, fraction: float, message: str = "") -> None:  # any thread
        with self._lock:
            first = self._latest is None
            self._latest = (float(fraction), str(message))
        if first:
            self._raw.emit()

    @Slot()
    def _deliver(self) -> None:
        with self._lock:
            latest, self._latest = self._latest, None
        if latest is not None:
            self.progressed.emit(*latest)
