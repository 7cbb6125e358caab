"""Quitting: generation stops at once, pending deletes are committed, temporary chats are
discarded, then the engine's pending KV saves are waited for (bounded, visibly: “Saving pinned
chats…” with Quit now) on a runner of their own, so a stuck engine cannot hold the window."""
from __future__ import annotations

import time
from typing import Any, Callable

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMainWindow, QProgressDialog

from .controllers import engine as engine_mod
from .controllers.auto_titles import AutoTitles
from .controllers.chats import ChatsController
from .controllers.deletions import Deletions
from .controllers.engine import EngineController, quit_work
from .controllers.replies import RepliesController
from .lifecycle import shiboken_valid, shutdown_runner
from .preferences import Preferences
from .tasks import TaskRunner


class Shutdown:
    def __init__(self, window: QMainWindow, engines: EngineController, chats: ChatsController,
                 replies: RepliesController, deletions: Deletions, auto_titles: AutoTitles, tasks: TaskRunner,
                 prefs: Preferences, *, api_server: Callable[[], Any], remember_geometry: Callable[[], Any],
                 finished: Callable[[], Any]):
        """`api_server()`: the API server's control, if made; `remember_geometry()`: into the
        settings, before they are saved; `finished()`: the wait is over (the window closes)."""
        self.window, self.engines, self.chats, self.replies = window, engines, chats, replies
        self.deletions, self.auto_titles, self.tasks, self.prefs = deletions, auto_titles, tasks, prefs
        self.api_server, self.remember_geometry, self.finished = api_server, remember_geometry, finished
        self.started = False
        self.complete = False
        self.dialog: QProgressDialog | None = None

    def begin(self) -> None:
        """Stop generation now, commit pending deletes, discard temporary chats, then wait
        (bounded, visibly) for the engine's pending KV saves."""
        self.started = True
        self.replies.closed = True
        self.auto_titles.stop()
        self.replies.stop()
        self.deletions.commit_all()
        for row in [r for r in self.chats.model.all_chats() if r.temporary]:
            self.chats.discard_temporary(row.id)
        self.remember_geometry()
        current = self.chats.current_id
        if current and self.chats.is_temporary(current):
            self.prefs.settings.last_chat_id = None
        self.prefs.save()
        work = quit_work(server=self.api_server(), streams=self.replies.stream_runner.pool,
                         tasks=self.tasks, engine=self.engines.engine, store=self.chats.store,
                         started=time.monotonic(), close_temp=self.chats.close_temp)
        window = self.window
        window.hide()
        self.dialog = None

        def show_wait() -> None:
            if self.complete or not shiboken_valid(window):
                return
            dlg = QProgressDialog("Saving pinned chats…", "Quit now", 0, 0)
            dlg.setWindowTitle("Amber")
            dlg.setMinimumDuration(0)
            dlg.canceled.connect(finish)
            dlg.show()
            self.dialog = dlg

        def finish(*_: Any) -> None:
            if self.complete or not shiboken_valid(window):
                return
            self.complete = True
            if self.dialog is not None:
                self.dialog.close()
            self.finished()
            window.close()

        # a separate, long-lived runner: the bounded wait never waits for itself, and a stuck
        # engine cannot take the window down with it
        shutdown_runner().run_task(work, finish, lambda exc: finish())
        QTimer.singleShot(300, show_wait)
        QTimer.singleShot(int(engine_mod.QUIT_WAIT_S * 1000) + 1000, finish)  # the wait is bounded
