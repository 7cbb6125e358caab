"""Starting the window's work: the chat history (then the last chat, or a new one), the model,
the model list, and the Markdown lexers compiled once off the UI thread."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, QTimer

from . import lifecycle
from .backend import Backend
from .controllers.chats import ChatsController
from .controllers.deletions import Deletions
from .controllers.engine import EngineController
from .lifecycle import freeze_heap, warm_up_rendering
from .preferences import Preferences
from .tasks import TaskRunner
from .widgets.sidebar import Sidebar
from .widgets.status import StatusBar


class Startup:
    def __init__(self, chats: ChatsController, engines: EngineController, deletions: Deletions, tasks: TaskRunner,
                 sidebar: Sidebar, status: StatusBar, prefs: Preferences, home: Path, backend: Backend, *,
                 open_chat: Callable[[str], Any], new_chat: Callable[[], Any], load_engine: Callable[[], Any],
                 refresh_models: Callable[[], Any], closing: Callable[[], bool], parent: QObject):
        self.chats, self.engines, self.deletions, self.tasks = chats, engines, deletions, tasks
        self.sidebar, self.status, self.prefs, self.home, self.backend = sidebar, status, prefs, home, backend
        self.open_chat, self.new_chat, self.load_engine = open_chat, new_chat, load_engine
        self.refresh_models, self.closing, self.parent = refresh_models, closing, parent
        chats.listLoaded.connect(self.on_chats_loaded)
        chats.listFailed.connect(self.on_chats_failed)

    def start(self) -> None:
        self.load_chats()
        self.load_engine()
        self.refresh_models()
        QTimer.singleShot(1500, self.parent, self.warm_up)   # cancelled if the window goes first

    def warm_up(self) -> None:
        """Compile the Pygments lexers off the UI thread (once): the first code block of a
        streaming reply would otherwise compile its lexer on the UI thread (~70 ms)."""
        if not self.closing() and lifecycle.claim_warm_up():   # once per process
            # a window task: it holds the GIL in turns with the UI thread, so it should be done
            # before a reply starts streaming (it is when the window counts as started)
            self.tasks.run_task(warm_up_rendering)

    def load_chats(self) -> None:
        self.sidebar.set_loading(True)
        self.chats.load(self.home / "amber.sqlite3", self.backend.make_store)

    def on_chats_loaded(self) -> None:
        chats = self.chats
        self.sidebar.set_loading(False)
        freeze_heap()   # the chat rows live as long as the window
        self.warm_up()  # now rather than later: a reply may start at once
        last = self.prefs.settings.last_chat_id
        if chats.current_id is None and chats.draft is None and last and chats.model.chat(last):
            self.open_chat(last)
        elif chats.current_id is None and chats.draft is None:
            self.new_chat()
        self.engines.retry_deletes(chats.store, self.deletions.is_pending)

    def on_chats_failed(self, error: str) -> None:
        self.sidebar.set_loading(True, f"Could not open the chat history:\n{error}")
        self.status.set_message(f"Chat history unavailable: {error}")
