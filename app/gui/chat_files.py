"""File ▸ Export chat (Markdown, JSON, plain text) and File ▸ Import chat… (an exported JSON file
becomes a new chat). The file choosers are `pick_save` / `pick_open` (tests replace them); the
work runs off the UI thread (`app.chat.transfer`); the outcome is one line in the status bar."""
from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMainWindow, QMenu

from app.chat import transfer
from app.store.titles import chat_title

from .controllers.chats import ChatsController
from .models.chat_list import ChatRow
from .settings import Settings
from .tasks import TaskRunner
from .widgets.status import StatusBar

FILTERS = {
    "markdown": "Markdown (*.md)",
    "json": "Amber chat, JSON (*.json)",
    "text": "Plain text (*.txt)",
}
LABELS = {"markdown": "Markdown…", "json": "JSON (re-importable)…", "text": "Plain text…"}
_UNSAFE = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]+')


def file_stem(title: str) -> str:
    """A file name for a chat titled `title`: no separators or reserved characters, bounded."""
    stem = " ".join(_UNSAFE.sub(" ", title).split())[:80].strip(" .")
    return stem or "Amber chat"


def file_menu(w: QMainWindow) -> QMenu:
    """The window's File menu (made on first use; shared with whoever else adds to it)."""
    bar = w.menuBar()
    for action in bar.actions():
        menu = action.menu()
        if isinstance(menu, QMenu) and action.text().replace("&", "") == "File":
            return menu
    return bar.addMenu("&File")


class ChatFiles(QObject):
    exported = Signal(str, str)        # chat id, the file written
    imported = Signal(str)             # the new chat's id
    failed = Signal(str)               # why, in one line

    def __init__(self, window: QMainWindow, chats: ChatsController, status: StatusBar, tasks: TaskRunner, *,
                 settings: Callable[[], Settings], save_settings: Callable[[], Any],
                 open_chat: Callable[[str], Any]):
        """The menu and its shortcuts go on `window`; `open_chat` shows an imported chat."""
        super().__init__(window)
        self.window, self.chats, self.status, self.tasks = window, chats, status, tasks
        self.settings, self.save_settings, self.open_chat = settings, save_settings, open_chat
        self.pick_save: Callable[[str, str, str], str] = self._ask_save
        self.pick_open: Callable[[str, str], str] = self._ask_open
        menu = file_menu(window)
        self.act_import = self._action("Import chat…", "Ctrl+O", self.import_dialog)
        menu.addAction(self.act_import)
        self.export_menu = menu.addMenu("Export chat as")
        self.act_export: dict[str, QAction] = {}
        for fmt, label in LABELS.items():
            act = self._action(label, "Ctrl+Shift+E" if fmt == "markdown" else None,
                               partial(self.export_dialog, fmt))
            self.export_menu.addAction(act)
            self.act_export[fmt] = act
        self.export_menu.aboutToShow.connect(self._update)
        menu.aboutToShow.connect(self._update)

    def _action(self, text: str, shortcut: str | None, slot: Callable[[], Any]) -> QAction:
        act = QAction(text, self.window)
        if shortcut:
            act.setShortcut(QKeySequence(shortcut))
            act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        act.triggered.connect(slot)
        self.window.addAction(act)
        return act

    def _update(self) -> None:
        """Export needs a chat with messages on screen (a draft has nothing to write)."""
        can = self.chats.current_id is not None
        for act in self.act_export.values():
            act.setEnabled(can)

    # --- export ------------------------------------------------------------------------------
    def export_dialog(self, fmt: str, *_checked: Any) -> None:
        chat_id = self.chats.current_id
        if chat_id is None:
            self.status.set_message("Nothing to export yet: send a message first")
            return
        row = self.chats.model.chat(chat_id)
        title = row.title if row is not None else "Amber chat"
        suggested = str(Path(self._start_dir()) / (file_stem(title) + transfer.FORMATS[fmt]))
        chosen = self.pick_save(f"Export “{chat_title(title, 40)}”", suggested, FILTERS[fmt])
        if not chosen:
            return
        path = Path(chosen)
        if not path.suffix:
            path = path.with_suffix(transfer.FORMATS[fmt])
        self._remember(path.parent)
        self.export_to(chat_id, fmt, path)

    def export_to(self, chat_id: str, fmt: str, path: Path) -> None:
        """Write the chat to `path` in the background; the status bar says how it went."""
        store = self.chats.store_for(chat_id)
        if store is None:
            return

        def done(written: Path) -> None:
            self.status.set_message(f"Exported to {written}")
            self.exported.emit(chat_id, str(written))

        self.tasks.run_task(lambda: transfer.export_chat(store, chat_id, fmt, path), done,
                              lambda exc: self._fail("Could not export the chat", exc))

    # --- import ------------------------------------------------------------------------------
    def import_dialog(self) -> None:
        chosen = self.pick_open("Import a chat", "Amber chat, JSON (*.json);;All files (*)")
        if chosen:
            self._remember(Path(chosen).parent)
            self.import_from(Path(chosen))

    def import_from(self, path: Path) -> None:
        """Make a new chat from an exported JSON file, list it and open it."""
        store = self.chats.store
        if store is None:
            self._fail("Could not import the chat", RuntimeError("the chat history is not open"))
            return

        def done(detail: Any) -> None:
            self.chats.model.upsert(ChatRow.from_store(detail))
            self.open_chat(detail.id)
            self.status.set_message(f"Imported “{chat_title(detail.title, 40)}”")
            self.imported.emit(detail.id)

        self.tasks.run_task(lambda: transfer.import_chat(store, path), done,
                              lambda exc: self._fail("Could not import the chat", exc))

    # --- helpers -----------------------------------------------------------------------------
    def _fail(self, what: str, exc: BaseException) -> None:
        why = str(exc) if isinstance(exc, (transfer.TransferError, ValueError)) else \
            f"{type(exc).__name__}: {exc}"
        line = " ".join(f"{what}: {why}".split())
        self.status.set_message(line)
        self.failed.emit(line)

    def _start_dir(self) -> str:
        last = self.settings().last_dir
        return last if last and Path(last).is_dir() else str(Path.home())

    def _remember(self, folder: Path) -> None:
        self.settings().last_dir = str(folder)
        self.save_settings()

    def _ask_save(self, title: str, suggested: str, filters: str) -> str:
        path, _ = QFileDialog.getSaveFileName(self.window, title, suggested, filters)
        return path

    def _ask_open(self, title: str, filters: str) -> str:
        path, _ = QFileDialog.getOpenFileName(self.window, title, self._start_dir(), filters)
        return path
