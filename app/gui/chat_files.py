"""File ▸ Export chat (Markdown, JSON, plain text) and File ▸ Import chat… (an exported JSON file
becomes a new chat). The file choosers are `pick_save` / `pick_open` (tests replace them); the
work runs off the UI thread (`app.chat.transfer`); the outcome is one line in the status bar."""
from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenu

from app.chat import transfer
from app.store.titles import chat_title

from .sidebar_model import ChatRow

if TYPE_CHECKING:
    from .main_window import MainWindow

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


def file_menu(w: "MainWindow") -> QMenu:
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

    def __init__(self, w: "MainWindow"):
        super().__init__(w)
        self.w = w
        self.pick_save: Callable[[str, str, str], str] = self._ask_save
        self.pick_open: Callable[[str, str], str] = self._ask_open
        menu = file_menu(w)
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
        act = QAction(text, self.w)
        if shortcut:
            act.setShortcut(QKeySequence(shortcut))
            act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        act.triggered.connect(slot)
        self.w.addAction(act)
        return act

    def _update(self) -> None:
        """Export needs a chat with messages on screen (a draft has nothing to write)."""
        can = self.w.current_id is not None
        for act in self.act_export.values():
            act.setEnabled(can)

    # --- export ------------------------------------------------------------------------------
    def export_dialog(self, fmt: str, *_checked: Any) -> None:
        w = self.w
        chat_id = w.current_id
        if chat_id is None:
            w.status.set_message("Nothing to export yet: send a message first")
            return
        row = w.chat_model.chat(chat_id)
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
        store = self.w.chats.store_for(chat_id)
        if store is None:
            return

        def done(written: Path) -> None:
            self.w.status.set_message(f"Exported to {written}")
            self.exported.emit(chat_id, str(written))

        self.w.tasks.run_task(lambda: transfer.export_chat(store, chat_id, fmt, path), done,
                              lambda exc: self._fail("Could not export the chat", exc))

    # --- import ------------------------------------------------------------------------------
    def import_dialog(self) -> None:
        chosen = self.pick_open("Import a chat", "Amber chat, JSON (*.json);;All files (*)")
        if chosen:
            self._remember(Path(chosen).parent)
            self.import_from(Path(chosen))

    def import_from(self, path: Path) -> None:
        """Make a new chat from an exported JSON file, list it and open it."""
        store = self.w.store
        if store is None:
            self._fail("Could not import the chat", RuntimeError("the chat history is not open"))
            return

        def done(detail: Any) -> None:
            self.w.chat_model.upsert(ChatRow.from_store(detail))
            self.w.open_chat(detail.id)
            self.w.status.set_message(f"Imported “{chat_title(detail.title, 40)}”")
            self.imported.emit(detail.id)

        self.w.tasks.run_task(lambda: transfer.import_chat(store, path), done,
                              lambda exc: self._fail("Could not import the chat", exc))

    # --- helpers -----------------------------------------------------------------------------
    def _fail(self, what: str, exc: BaseException) -> None:
        why = str(exc) if isinstance(exc, (transfer.TransferError, ValueError)) else \
            f"{type(exc).__name__}: {exc}"
        line = " ".join(f"{what}: {why}".split())
        self.w.status.set_message(line)
        self.failed.emit(line)

    def _start_dir(self) -> str:
        last = self.w.settings.last_dir
        return last if last and Path(last).is_dir() else str(Path.home())

    def _remember(self, folder: Path) -> None:
        self.w.settings.last_dir = str(folder)
        self.w.save_settings()

    def _ask_save(self, title: str, suggested: str, filters: str) -> str:
        path, _ = QFileDialog.getSaveFileName(self.w, title, suggested, filters)
        return path

    def _ask_open(self, title: str, filters: str) -> str:
        path, _ = QFileDialog.getOpenFileName(self.w, title, self._start_dir(), filters)
        return path
