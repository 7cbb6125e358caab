"""Amber's main window: it builds the widgets, wires them to the controllers, and keeps the
shortcuts, the dialogs, the geometry and quitting. The chat state and all work live in
app/gui/controllers (off the UI thread); what the chat area shows follows their signals
(app/gui/bindings.py)."""
from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QByteArray, QUrl, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDesktopServices, QKeySequence
from PySide6.QtWidgets import QMainWindow, QProgressDialog, QSplitter

from app.store.titles import chat_title
from engine.base import paths

from . import lifecycle, theme
from .backend import Backend
from .bindings import ChatBinding, EngineBinding
from .chat_files import ChatFiles
from .draft_tokens import DraftTokens
from .controllers import deletions as deletions_mod
from .controllers.auto_titles import AutoTitles
from .controllers.chats import ChatsController, Draft  # noqa: F401 - Draft: where it was
from .controllers.deletions import Deletions
from .controllers.engine import EngineController
from .controllers.replies import RepliesController
from .controllers.tools import ToolsController
from .error_words import in_words
from .dialogs import import_dialog
from .lifecycle import freeze_heap, warm_up_rendering
from .settings import Settings
from .tasks import TaskRunner
from .api_binding import ApiBinding
from .model_choice import ModelChoice
from .preferences import Preferences
from .questions import Questions
from .settings_binding import SettingsBinding
from .shutdown import Shutdown
from .tool_binding import ToolBinding
from .widgets.chat_area import ChatArea
from .widgets.chat_view import copy_to_clipboard
from .widgets.hover_pause import HoverPause
from .widgets.sidebar import Sidebar
from .widgets.status import StatusBar
from .window_view import ViewController, apply_theme_choice

log = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    engineReady = Signal()
    chatLoaded = Signal(str)
    replyFinished = Signal(str)     # chat id
    shutdownFinished = Signal()

    def __init__(self, *, home: Path | None = None, backend: Backend | None = None,
                 settings: Settings | None = None, autostart: bool = True):
        super().__init__()
        self.home = home or paths.amber_home()
        self.backend = backend or Backend()
        settings_path = paths.settings_path() if home is None else self.home / "settings.json"
        self.prefs = Preferences(settings_path, settings or Settings.load(settings_path))
        self.save_settings = self.prefs.save
        self.tasks = TaskRunner(max_threads=4, parent=self)
        self.engines = EngineController(self.backend, self.home, self.tasks, self)
        self.chats = ChatsController(self.engines, self.tasks, self)
        self.deletions = Deletions(self.chats, self.engines, self)
        self.replies = RepliesController(self.chats, self.engines, self.deletions,
                                         lambda: self.settings, self.tasks, self)
        self.auto_titles = AutoTitles(self.chats, self.engines, self.replies, self)
        self.mcp_path = paths.mcp_config_path() if home is None else self.home / "mcp.json"
        self.tools = ToolsController(self.mcp_path, self.tasks, lambda: self.settings.mcp_tools, parent=self)
        self.chat_model = self.chats.model
        self.questions = Questions(self)
        self.confirm: Callable[[str, str], bool] = self.questions.ask_confirm
        self.confirm_switch: Callable[[str, str], bool] = self.questions.ask_switch   # a model switch's cost

        self.setWindowTitle("Amber")
        self.setWindowIcon(theme.app_icon())
        screen = self.screen().availableGeometry()   # a 1366×768 laptop: the window fits it
        self.resize(min(1180, screen.width() - 40), min(780, screen.height() - 48))
        self.setMinimumSize(640, 480)
        self._build()
        self.prefs.status = self.status
        self.shutdown = Shutdown(self, self.engines, self.chats, self.replies, self.deletions, self.auto_titles,
                                 self.tasks, self.prefs, api_server=lambda: self.api.started,
                                 remember_geometry=self._remember_geometry, finished=self.shutdownFinished.emit)
        self.api = ApiBinding(self.engines, self.tasks, self.status, self.prefs, self.home / "state",
                              closing=lambda: self.shutdown.started, parent=self)
        self.api_server, self.restore_api_server = self.api.server, self.api.restore
        self.binding = ChatBinding(self.chats, self.replies, self.engines, self.area, self.sidebar, self.status,
                                   loaded=self.chatLoaded.emit, replied=self.replyFinished.emit,
                                   header=self.update_header)
        self.engine_binding = EngineBinding(
            self.engines, self.chats, self.deletions, self.replies, self.area, self.status, self.backend,
            settings=lambda: self.settings, figures=lambda: self.binding.last_figures,
            composer=self.update_composer, model_notice=lambda: self.update_model_notice(),
            api=self.api.serve_new_engine, refresh_models=self.refresh_models, ready=self.engineReady.emit)
        self.tool_binding = ToolBinding(self.replies, self.chats, self.engines, self.tools, self.chat_view,
                                        self.composer, self.status, lambda: self.settings)
        self.replies.toolbox = self.tool_binding.toolbox
        self.settings_ctl = SettingsBinding(
            self, self.prefs, self.home, self.api, self.tools, self.engines, self.chats, self.tasks,
            tools_changed=self.tool_binding.update_state, reload_engine=self._reload_engine,
            report=self._report_error)
        self.open_settings, self.open_api_settings = self.settings_ctl.open, self.settings_ctl.open_at_api
        self.open_chat_settings, self.clear_cache = self.settings_ctl.open_chat, self.settings_ctl.clear_cache
        self.tools.load()
        self._connect()
        self._make_shortcuts()
        self.chat_files = ChatFiles(     # File ▸ Import chat…, Export chat as
            self, self.chats, self.status, self.tasks, settings=lambda: self.settings,
            save_settings=self.save_settings, open_chat=self.open_chat)
        self.draft_tokens = DraftTokens(  # “1,234 tokens” under the composer
            self.composer, self.engines, self.tasks,
            figures=lambda: self.binding.last_figures if self.current_id else None,
            chat_loaded=self.chatLoaded, reply_finished=self.replyFinished, parent=self)
        self.view_ctl = ViewController(self)   # sidebar toggle, small windows, keyboard
        if self.settings.theme != theme.choice() or self.settings.theme != "system":
            apply_theme_choice(self.settings.theme)
        self._restore_geometry()
        freeze_heap()
        if autostart:
            QTimer.singleShot(0, self.start)

    # --- the controllers' state, as the window's (tests and the dialogs read it) --------------
    engine = property(lambda self: self.engines.engine)
    engine_error = property(lambda self: self.engines.error)
    provider_fallback = property(lambda self: self.engines.provider_fallback)
    current_id = property(lambda self: self.chats.current_id)
    draft = property(lambda self: self.chats.draft)
    temp = property(lambda self: self.chats.temp)
    chats_loaded = property(lambda self: self.chats.loaded)
    stream = property(lambda self: self.replies.stream)
    queued = property(lambda self: self.replies.queue)
    pending_deletes = property(lambda self: self.deletions.pending)
    last_figures = property(lambda self: self.binding.last_figures)

    @property
    def store(self) -> Any:
        return self.chats.store

    @store.setter
    def store(self, value: Any) -> None:
        self.chats.store = value

    # --- construction ------------------------------------------------------------------------
    def _build(self) -> None:
        self.sidebar = Sidebar(self.chat_model)
        self.area = right = ChatArea()
        h = self.header = right.header
        self.title_label, self.subtitle_label, self.model_picker = h.title_label, h.subtitle_label, h.model_picker
        self.import_btn, self.chat_settings_btn, self.settings_btn = h.import_btn, h.chat_settings_btn, h.settings_btn
        self.banner, self.temp_notice, self.toast = right.banner, right.temp_notice, right.toast
        self.save_notice = right.save_notice
        self.model_notice = right.model_notice
        self.chat_view, self.search_jump, self.composer = right.chat_view, right.search_jump, right.composer
        self.empty = right.empty
        self.empty_title, self.empty_sub = self.empty.title, self.empty.sub

        self.splitter = QSplitter()
        self.splitter.setObjectName("MainSplitter")
        self.splitter.setHandleWidth(1)
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(right)
        # screen readers read a container's children in QObject order, which QSplitter leaves
        # with the chat area first: put the sidebar (left, read first) back in front
        self.sidebar.stackUnder(right)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([270, 910])
        self.splitter.setChildrenCollapsible(False)
        self.setCentralWidget(self.splitter)
        self.status = StatusBar()
        self.setStatusBar(self.status)
        self._toast_timer = QTimer(self)
        self._toast_timer.setSingleShot(True)
        self._toast_timer.timeout.connect(self.toast.hide)
        self.toast_pause = HoverPause(self.toast, self)   # the countdown waits while hovered
        self.toast_pause.watch(self._toast_timer)
        self.imports = import_dialog.ModelImports(
            self, self.engines, self.status, settings=lambda: self.settings, save_settings=self.save_settings,
            load_engine=self.load_engine, refresh_models=self.refresh_models,
            pick_model=lambda choice: self.pick_model(choice))
        self.import_clear = self.imports.clear   # an import's last word leaves the status bar
        self.composer.set_ready(False, "Loading the model…")
        self.update_header()

    def _connect(self) -> None:
        self.model_choice = mc = ModelChoice(
            self.engines, self.chats, self.replies, self.header, self.model_notice,
            settings=lambda: self.settings, save_settings=self.save_settings, load_engine=self.load_engine,
            confirm_switch=lambda title, text: self.confirm_switch(title, text), engine_ready=self.engineReady)
        self.pick_model, self.switch_model, self._on_model_picked = mc.pick, mc.switch, mc.on_picked
        self.model_name, self.switch_cost, self.update_model_notice = mc.name, mc.cost, mc.update_notice
        self.chat_models, self.kept_model = mc.chat_models, mc.kept_model
        sb, c, r = self.sidebar, self.chats, self.replies
        sb.chatSelected.connect(self.open_chat)
        sb.newChatRequested.connect(self.new_chat)
        sb.newTemporaryRequested.connect(lambda: self.new_chat(temporary=True))
        sb.pinToggled.connect(c.toggle_pin)
        sb.deleteRequested.connect(self.delete_chat)
        sb.duplicateRequested.connect(self.duplicate_chat)
        sb.closeRequested.connect(self.close_chat)
        sb.searchChanged.connect(c.search)
        h = self.header
        h.getModelsRequested.connect(self.open_model_library)
        h.importGgufRequested.connect(self.import_gguf_dialog)
        h.importFolderRequested.connect(self.import_folder_dialog)
        h.connectRemoteRequested.connect(self.connect_remote_dialog)
        h.chatSettingsRequested.connect(self.open_chat_settings)
        h.settingsRequested.connect(self.open_settings)
        h.pinClicked.connect(lambda: self._on_current(self.toggle_pin))
        h.temporaryToggled.connect(self._on_temporary_toggled)
        self.banner.retry.connect(self.load_engine)
        self.empty.importGgufRequested.connect(self.import_gguf_dialog)
        self.empty.getModelsRequested.connect(self.open_model_library)
        self.empty.connectRemoteRequested.connect(self.connect_remote_dialog)
        self.status.apiClicked.connect(self.open_api_settings)
        self.toast.undo.connect(self.undo_delete)
        cv = self.chat_view
        cv.copyRequested.connect(copy_to_clipboard)
        cv.editSubmitted.connect(self.edit_message)
        cv.regenerateRequested.connect(self.regenerate)
        cv.siblingRequested.connect(self.flip_sibling)
        cv.branchRequested.connect(self.branch_from)
        self.composer.sendRequested.connect(self.send)
        self.composer.stopRequested.connect(self.stop)

        c.listLoaded.connect(self._on_chats_loaded)
        c.listFailed.connect(self._on_chats_failed)
        c.draftStarted.connect(self._on_draft)
        c.chatOpening.connect(self._on_chat_shown)
        c.openRequested.connect(self.open_chat)
        c.headerChanged.connect(self.update_header)
        c.listChanged.connect(self._on_list_changed)
        c.errorOccurred.connect(self._report_error)
        r.chatCreated.connect(self._on_chat_created)
        r.composerChanged.connect(self.update_composer)
        self.deletions.deleted.connect(self._on_deleted)
        self.deletions.restored.connect(self._on_restored)

    def _make_shortcuts(self) -> None:
        def add(seq: Any, slot: Callable[[], Any], name: str) -> QAction:
            a = QAction(name, self)
            a.setShortcut(QKeySequence(seq))
            a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            a.triggered.connect(slot)
            self.addAction(a)
            return a

        self.act_new = add("Ctrl+N", self.new_chat, "New chat")
        self.act_new_temp = add("Ctrl+Shift+N", lambda: self.new_chat(temporary=True),
                                "New temporary chat")
        self.act_search = add("Ctrl+K", self._focus_search, "Search chats")
        self.act_find = add(QKeySequence.StandardKey.Find, self._focus_search, "Find")
        self.act_close_chat = add("Ctrl+W", lambda: self.close_chat(self.chat_target(), ask=True),
                                  "Close chat")
        # the chat actions, window-wide: on the row focused in the chat list while it has the
        # focus, else on the chat on screen
        self.act_pin = add("Ctrl+P", lambda: self._on_target(self.toggle_pin), "Pin or unpin chat")
        self.act_rename = add("F2", lambda: self._on_target(self.rename_chat), "Rename chat")
        self.act_duplicate = add("Ctrl+D", lambda: self._on_target(self.duplicate_chat), "Duplicate chat")
        self.act_delete = add("Ctrl+Shift+Backspace", lambda: self._on_target(self.delete_chat),
                              "Delete chat")
        self.act_undo_delete = add(QKeySequence.StandardKey.Undo, self.undo_delete, "Undo delete")
        self.act_settings = add("Ctrl+,", self.open_settings, "Settings")
        self.act_regen = add("Ctrl+R", self._regenerate_last, "Regenerate")
        self.act_stop = add("Ctrl+.", self.stop, "Stop")
        self.act_quit = add(QKeySequence.StandardKey.Quit, self.close, "Quit")

    def chat_target(self) -> str | None:
        """The chat a chat action from the keyboard acts on: the row focused in the chat list
        while the list has the focus, else the chat on screen."""
        if self.sidebar.view.hasFocus():
            return self.sidebar.current_id()
        return self.current_id

    def _on_target(self, act: Callable[[str], Any]) -> None:
        target = self.chat_target()
        if target is not None:
            act(target)

    def _on_current(self, act: Callable[[str], Any]) -> None:
        if self.current_id is not None:
            act(self.current_id)

    def rename_chat(self, chat_id: str) -> None:
        """Rename in place in the chat list (or, with the list folded away, in a small dialog)."""
        row = self.chat_model.chat(chat_id)
        if row is None:
            return
        if self.view_ctl.sidebar_shown():
            self.sidebar.select(chat_id)
            self.sidebar.view.setFocus()
            self.sidebar.rename_current()
            return
        from PySide6.QtWidgets import QInputDialog  # noqa: PLC0415

        title, ok = QInputDialog.getText(self, "Rename chat", "Title", text=row.title)
        if ok:
            self.chat_model.setData(self.chat_model.index_of(chat_id), title)

    def _focus_search(self) -> None:
        self.sidebar.search.setFocus()
        self.sidebar.search.selectAll()

    # --- startup -----------------------------------------------------------------------------
    def start(self) -> None:
        self.load_chats()
        self.load_engine()
        self.refresh_models()
        QTimer.singleShot(1500, self, self._warm_up)   # cancelled if the window goes first

    def _warm_up(self) -> None:
        """Compile the Pygments lexers off the UI thread (once): the first code block of a
        streaming reply would otherwise compile its lexer on the UI thread (~70 ms)."""
        if not self.shutdown_started and lifecycle.claim_warm_up():   # once per process
            # a window task: it holds the GIL in turns with the UI thread, so it should be done
            # before a reply starts streaming (it is when the window counts as started)
            self.tasks.run_task(warm_up_rendering)

    def load_chats(self) -> None:
        self.sidebar.set_loading(True)
        self.chats.load(self.home / "amber.sqlite3", self.backend.make_store)

    def _on_chats_loaded(self) -> None:
        self.sidebar.set_loading(False)
        freeze_heap()   # the chat rows live as long as the window
        self._warm_up()  # now rather than later: a reply may start at once
        last = self.settings.last_chat_id
        if self.current_id is None and self.draft is None and last and self.chat_model.chat(last):
            self.open_chat(last)
        elif self.current_id is None and self.draft is None:
            self.new_chat()
        self.engines.retry_deletes(self.store, self.deletions.is_pending)

    def _on_chats_failed(self, error: str) -> None:
        self.sidebar.set_loading(True, f"Could not open the chat history:\n{error}")
        self.status.set_message(f"Chat history unavailable: {error}")

    def load_engine(self) -> None:
        self.engines.load(self.settings.copy(), self.api.started)

    def _reload_engine(self) -> None:
        self.stop()
        self.load_engine()

    # --- chats (the work is ChatsController's; closing and deleting also stop a reply) -------
    def new_chat(self, temporary: bool = False) -> None:
        self.chats.new(temporary)

    def _on_draft(self) -> None:
        self.update_model_notice()
        self.update_header()
        self.update_composer()
        self.composer.focus()

    def open_chat(self, chat_id: str) -> None:
        if chat_id == self.current_id and self.chat_view.message_ids():
            return
        row = self.chat_model.chat(chat_id)
        if row is not None and not row.temporary:
            self.settings.last_chat_id = chat_id
        self.chats.open(chat_id)

    def _on_chat_shown(self, chat_id: str) -> None:
        self.update_header()
        self.update_composer()
        self.update_model_notice()
        self.model_choice.learn(chat_id, self.chats.store_for(chat_id), self.tasks)

    def _on_chat_created(self, chat_id: str) -> None:
        self.sidebar.select(chat_id)
        self.update_header()

    def _on_list_changed(self) -> None:
        self.sidebar.view.doItemsLayout()   # search hits are two-line rows, others one
        self.sidebar.select(self.current_id)

    def toggle_pin(self, chat_id: str) -> None:
        self.chats.toggle_pin(chat_id)

    def duplicate_chat(self, chat_id: str, upto_message_id: Any = None) -> None:
        self.chats.duplicate(chat_id, upto_message_id)

    def branch_from(self, message_id: Any) -> None:
        if self.current_id is not None:
            self.chats.duplicate(self.current_id, message_id)

    def flip_sibling(self, message_id: Any, delta: int) -> None:
        if self.stream is None and self.chat_view.widget_for(message_id) is not None:
            self.chats.flip_sibling(message_id, delta)

    def close_chat(self, chat_id: str | None, *, ask: bool = False) -> None:
        """Close a chat: a temporary one is discarded entirely (with `ask`, after the user said
        so: it cannot be undone); others just leave the view."""
        if chat_id is None:
            if self.draft is not None:
                self.new_chat()
            return
        row = self.chat_model.chat(chat_id)
        if ask and row is not None and row.temporary and not self.confirm(
                "Discard temporary chat?",
                f"“{chat_title(row.title, 40)}” is temporary: closing it discards it for good."):
            return
        if self.stream is not None and self.stream.chat_id == chat_id:
            self.stop()
        if self.chats.is_temporary(chat_id):
            self.chats.discard_temporary(chat_id)
        else:
            self.chats.close_in_engine(chat_id)
        if chat_id == self.current_id:
            self.settings.last_chat_id = None
            self.new_chat()

    def delete_chat(self, chat_id: str) -> None:
        """One gesture: no confirmation, an undo toast instead (10 s, paused while hovered)."""
        row = self.chat_model.chat(chat_id)
        if row is None:
            return
        if row.temporary:
            self.close_chat(chat_id, ask=True)
            return
        if self.stream is not None and self.stream.chat_id == chat_id:
            self.stop()
        neighbour = self.chats.neighbour(chat_id)
        self.deletions.hide(chat_id, row.title)
        if chat_id == self.current_id:
            if neighbour is not None:
                self.open_chat(neighbour)
            else:
                self.new_chat()

    def _on_deleted(self, chat_id: str, title: str) -> None:
        self.toast.popup(f"Deleted “{chat_title(title, 40)}”")
        self._toast_timer.start(deletions_mod.UNDO_MS)
        if self.toast_pause.paused:   # the pointer already rests on the toast
            self.toast_pause.pause()

    def undo_delete(self) -> None:
        """Bring back the last deleted chat (Ctrl+Z, Undo on the toast): any time until Amber
        closes, one chat per press, the last deleted first."""
        if self.deletions.undo() is None:
            self.status.set_message("Nothing to undo")

    def _on_restored(self, chat_id: str) -> None:
        self.toast.hide()
        self.open_chat(chat_id)

    def update_header(self) -> None:
        cur, draft = self.current_id, self.draft
        temporary = self.chats.is_temporary(cur) or bool(draft and draft.temporary)
        row = self.chat_model.chat(cur) if cur else None
        title = row.title if row is not None else ("New temporary chat" if temporary else "New chat")
        sub = ("Temporary chat" if row.temporary else ("Pinned" if row.pinned else "")) if row else ""
        self.header.show_chat(title, sub, settings_enabled=row is not None and not row.temporary)
        self.header.show_state(pinned=bool(row and row.pinned), temporary=temporary,
                               can_pin=row is not None and not row.temporary,
                               can_switch_temporary=row is None and draft is not None)
        self.temp_notice.setVisible(temporary)
        self.save_notice.show_for(cur)
        self.empty.set_temporary(temporary)
        self.setWindowTitle(f"{title} — Amber")

    _update_header = update_header

    def _on_temporary_toggled(self, temporary: bool) -> None:
        """The header's temporary switch: a new, empty chat becomes temporary (or regular)."""
        if self.current_id is None and self.draft is not None and self.draft.temporary != temporary:
            self.new_chat(temporary=temporary)
        else:
            self.update_header()   # nothing to change: the button shows the chat as it is

    def update_composer(self) -> None:
        if self.engine is None:
            reason = self.engine_error and f"No model: {self.engine_error}" or "Loading the model…"
            self.composer.set_ready(False, reason)
        elif self.stream is not None and not self.stream.stopped and \
                self.stream.chat_id != self.chats.target_id:
            self.composer.set_ready(True)
            self.composer.send_btn.setToolTip("Send (Enter) — queued until the reply in the other "
                                              "chat is done")
        else:
            self.composer.set_ready(True)
        self.composer.set_generating(self.replies.streaming(self.chats.target_id))

    # --- replies (RepliesController) ---------------------------------------------------------
    def send(self, text: str) -> None:
        choice = self.model_choice.pinned_elsewhere()
        if choice is None:
            self.replies.send(text)
        elif self.model_choice.switch_for_pinned(choice):
            self.replies.enqueue(text)     # sent once the chat's model is loaded
        else:
            self.composer.set_text(text)

    def stop(self) -> None:
        self.replies.stop()

    def regenerate(self, message_id: Any) -> None:
        def run() -> None:
            w = self.chat_view.widget_for(message_id)
            self.replies.regenerate(w.item if w is not None else None)
        self.model_choice.on_own_model(run)

    def _regenerate_last(self) -> None:
        ws = self.chat_view.widgets
        if ws and ws[-1].item.role == "assistant":
            self.regenerate(ws[-1].item.id)

    def edit_message(self, message_id: Any, text: str) -> None:
        def run() -> None:
            w = self.chat_view.widget_for(message_id)
            self.replies.edit(w.item if w is not None else None, text)
        self.model_choice.on_own_model(run)

    # --- models and settings -----------------------------------------------------------------
    def refresh_models(self) -> None:
        self.engines.refresh_models(self._report_error)

    def open_model_library(self) -> Any:
        """Hugging Face search, download and conversion (app/gui/dialogs/model_library.py)."""
        from .dialogs.model_library import open_model_library  # noqa: PLC0415
        return open_model_library(self)

    def connect_remote_dialog(self) -> Any:
        """Base URL, optional key, model: chats then stream from that server."""
        from .dialogs.remote_dialog import open_connect_dialog  # noqa: PLC0415
        return open_connect_dialog(self)

    def import_gguf_dialog(self) -> None:
        import_dialog.choose_gguf(self, self.settings, self.save_settings,
                                  lambda src, gguf: self.import_model(src, gguf=gguf))

    def import_folder_dialog(self) -> None:
        import_dialog.choose_folder(self, self.settings, self.save_settings,
                                    lambda src, gguf: self.import_model(src, gguf=gguf))

    def import_model(self, src: Path, *, gguf: bool) -> QProgressDialog:
        """Import with a progress dialog (app/gui/dialogs/import_dialog.py)."""
        return self.imports.import_model(src, gguf=gguf)

    import_dialog = property(lambda self: self.imports.dialog)        # the import in progress, if any
    duplicate_box = property(lambda self: self.imports.duplicate_box)   # "already imported", the last said

    # --- the settings, the API server ------------------------------------------------------
    settings = property(lambda self: self.prefs.settings,
                        lambda self, value: setattr(self.prefs, "settings", value))
    settings_path = property(lambda self: self.prefs.path)
    api_server_started = property(lambda self: self.api.started)   # the API server's control, if made
    settings_dialog = property(lambda self: self.settings_ctl.dialog)
    chat_settings_dialog = property(lambda self: self.settings_ctl.chat_dialog)
    confirm_box = property(lambda self: self.questions.confirm_box)

    # --- geometry, errors --------------------------------------------------------------------
    def _restore_geometry(self) -> None:
        s = self.settings
        try:
            if s.window_geometry:
                self.restoreGeometry(QByteArray(base64.b64decode(s.window_geometry)))
            if s.splitter_state:
                self.splitter.restoreState(QByteArray(base64.b64decode(s.splitter_state)))
        except (ValueError, TypeError):
            pass

    def _remember_geometry(self) -> None:
        self.settings.window_geometry = base64.b64encode(bytes(self.saveGeometry().data())).decode()
        self.settings.splitter_state = base64.b64encode(bytes(self.splitter.saveState().data())).decode()

    def _report_error(self, exc: BaseException) -> None:
        log.error("background task failed: %r", exc)
        self.status.set_message(f"Error: {in_words(exc)}")

    def open_data_folder(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.home)))

    def resizeEvent(self, event: Any) -> None:  # noqa: N802
        super().resizeEvent(event)
        if self.toast.isVisible():
            self.toast.place()

    # --- quit --------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        if self.shutdown.complete:
            event.accept()
            return
        event.ignore()
        if self.shutdown.started:
            return
        self.shutdown.begin()

    shutdown_started = property(lambda self: self.shutdown.started)
    shutdown_complete = property(lambda self: self.shutdown.complete)
    _quit_dialog = property(lambda self: self.shutdown.dialog)   # “Saving pinned chats…”
