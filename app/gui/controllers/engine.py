"""The engine's life cycle: load (or reload) it, list the models, import one, clear the cache,
wait for its saves at quit. No widgets: progress and outcomes are signals."""
from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, Signal

from engine.api import ChatEngine

from ...chat.kv import is_remote_engine
from ..backend import Backend, accepted_kwargs
from ..error_words import in_words
from ..import_progress import staged
from ..remote_config import is_remote_choice, load_remotes
from ..settings import Settings
from ..tasks import Failure, ProgressRelay, TaskRunner

log = logging.getLogger(__name__)

QUIT_WAIT_S = 10.0      # the longest quit waits for pending KV saves


class EngineController(QObject):
    """Owns the engine: `engine` is None while one loads or after a failure (`error` says why)."""

    loadStarted = Signal()
    progress = Signal(float, str)       # fraction (< 0: unknown), what is happening
    ready = Signal(object)              # the engine, loaded
    failed = Signal(str)                # why it could not be loaded
    modelsListed = Signal(object, object)   # local model names, remote endpoints
    cacheCleared = Signal(object)       # the ids of the pinned chats (they keep their KV)

    def __init__(self, backend: Backend, home: Path, tasks: TaskRunner,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.backend, self.home, self.tasks = backend, home, tasks
        self.engine: ChatEngine | None = None
        self.error: str | None = None
        self.loading = False
        self.provider_fallback: str | None = None
        self.choice: str | None = None      # the `Settings.model` of the loaded engine

    @property
    def context_window(self) -> int:
        return self.engine.context_window if self.engine is not None else 0

    @property
    def model_name(self) -> str:
        return self.engine.model_name if self.engine is not None else ""

    def load(self, settings: Settings, server: Any = None) -> None:
        """(Re)load the engine the settings name; the old one is shut down first (its pending
        saves finish). `server`, the local API server, stops serving the old engine."""
        if self.loading:
            return
        self.loading = True
        self.error = None
        relay = ProgressRelay(self)
        relay.progressed.connect(self.progress)
        old, self.engine, self.choice = self.engine, None, None
        self.loadStarted.emit()
        backend, home = self.backend, self.home

        def work() -> ChatEngine:
            if server is not None:
                server.stop_now()     # it serves the old engine
            if old is not None:
                old.shutdown(timeout=QUIT_WAIT_S)
            if is_remote_choice(settings.model):    # an OpenAI-compatible server (engine.remote)
                relay(-1.0, "Connecting to the server…")
                return backend.remote_factory(settings.model, home)
            model_dir = backend.model_preparer(settings.model, relay)
            relay(-1.0, f"Loading {model_dir.name}…")
            # A factory that takes `progress` reports making the GPU variant on first use of a GPU.
            factory: Callable[..., ChatEngine] = backend.engine_factory
            return factory(model_dir, home / "state", settings, **accepted_kwargs(factory, {"progress": relay}))

        def done(engine: ChatEngine) -> None:
            self.loading = False
            self.engine = engine
            self.choice = settings.model
            self.provider_fallback = engine.capabilities.provider_fallback
            self.ready.emit(engine)

        def failed(exc: BaseException) -> None:
            self.loading = False
            self.error = in_words(exc)   # the window's words; the log gets the error whole
            log.error("engine failed to load: %s", exc)
            self.failed.emit(self.error)

        self.tasks.run_task(work, done, failed)

    def refresh_models(self, failure: Failure | None = None) -> None:
        """List the imported models and the saved servers (`modelsListed`)."""
        backend, home = self.backend, self.home
        self.tasks.run_task(lambda: (backend.model_lister(), load_remotes(home)),
                            lambda found: self.modelsListed.emit(*found), failure)

    def import_model(self, src: Path, *, gguf: bool, progress: Callable[[float, str], None],
                     cancel: threading.Event, success: Callable[[Path | None], None],
                     failure: Failure) -> None:
        """Import a GGUF file or an ONNX folder; `success(dest)` — or `success(None)` when it was
        cancelled after all (what it wrote is removed)."""
        importer = self.backend.gguf_importer if gguf else self.backend.folder_importer
        feed = staged(progress) if gguf else progress   # stages that visibly move

        def done(dest: Path) -> None:
            if cancel.is_set():   # cancelled, but the import finished first: undo it
                self.tasks.run_task(lambda: shutil.rmtree(dest, ignore_errors=True))
                success(None)
            else:
                success(dest)

        self.tasks.run_task(lambda: importer(src, feed, cancel), done, failure)

    def clear_cache(self, pinned: set[str], failure: Failure) -> None:
        """Drop every chat's KV but the pinned ones' (`cacheCleared`)."""
        engine = self.engine
        if engine is None:
            return
        # ChatEngine.clear_cache: pinned sessions keep their blocks (a remote engine forgets the
        # other sessions' salts: the server's cache of them is not used again).
        self.tasks.run_task(engine.clear_cache, lambda _: self.cacheCleared.emit(pinned), failure)

    def retry_deletes(self, store: Any, skip: Callable[[str], bool]) -> None:
        """Delete the KV of chats deleted while no local engine could (`skip`: still undoable)."""
        engine = self.engine
        if store is None or engine is None or is_remote_engine(engine):
            return    # a remote engine cannot delete local KV files: the next local engine does

        def work() -> int:
            n = 0
            for cid in list(store.pending_engine_deletes()):
                if skip(cid):
                    continue
                engine.delete(cid)
                store.confirm_engine_deleted(cid)
                n += 1
            return n

        self.tasks.run_task(work)


def quit_work(*, server: Any, streams: Any, tasks: TaskRunner, engine: ChatEngine | None, store: Any,
              started: float, close_temp: Callable[[], None] | None = None) -> Callable[[], None]:
    """What quitting waits for, off the UI thread: the API server, the reply that was cancelled
    (it saves its text), the window's tasks, the engine's KV saves (bounded), the stores."""
    def work() -> None:
        if server is not None:
            server.stop_now()
        streams.waitForDone(2000)   # a cancelled reply stops within a token; it saves its text
        tasks.pool.waitForDone(int(QUIT_WAIT_S * 1000 / 2))
        if engine is not None:
            engine.shutdown(timeout=max(0.5, QUIT_WAIT_S - (time.monotonic() - started)))
        if store is not None:
            store.close()
        if close_temp is not None:
            close_temp()
    return work
