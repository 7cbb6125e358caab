"""Amber's main window, wiring only: it makes the controllers (app/gui/controllers: the chat
state and all work, off the UI thread), the widgets, and the bindings that join them, each with
one job and given the widgets and controllers it drives: what the chat area shows
(bindings.py), the header and composer (header_binding.py), the chat actions (chat_actions.py),
replies (reply_actions.py), the model choice (model_choice.py), the tools (tool_binding.py), the
settings and the API server (settings_binding.py, api_binding.py), importing, files, the draft's
size, starting and quitting. What the window itself offers (`w.open_chat`, `w.settings`, …) is the
bindings' own, named here for the dialogs and the tests."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QUrl, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QDesktopServices, QKeySequence
from PySide6.QtWidgets import QMainWindow, QProgressDialog, QSplitter

from engine.base import paths

from . import geometry, theme
from .api_binding import ApiBinding
from .backend import Backend
from .bindings import ChatBinding, EngineBinding
from .chat_actions import ChatActions
from .chat_files import ChatFiles
from .controllers.auto_titles import AutoTitles
from .controllers.chats import ChatsController, Draft  # noqa: F401 - Draft: where it was
from .controllers.deletions import Deletions
from .controllers.engine import EngineController
from .controllers.replies import RepliesController
from .controllers.tools import ToolsController
from .dialogs import import_dialog
from .draft_tokens import DraftTokens
from .error_words import in_words
from .header_binding import HeaderBinding
from .lifecycle import freeze_heap
from .model_choice import ModelChoice
from .preferences import Preferences
from .questions import Questions
from .reply_actions import ReplyActions
from .settings import Settings
from .settings_binding import SettingsBinding
from .shortcuts import shortcut
from .shutdown import Shutdown
from .startup import Startup
from .tasks import TaskRunner
from .tool_binding import ToolBinding
from .widgets.chat_area import ChatArea
from .widgets.chat_view import copy_to_clipboard
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
        self.mcp_path = paths.mcp_config_path() if home is None else self.home / "mcp.json"
        self._controllers()
        self.questions = Questions(self)
        self.confirm: Callable[[str, str], bool] = self.questions.ask_confirm
        self.confirm_switch: Callable[[str, str], bool] = self.questions.ask_switch   # a model switch's cost

        self.setWindowTitle("Amber")
        self.setWindowIcon(theme.app_icon())
        screen = self.screen().availableGeometry()   # a 1366×768 laptop: the window fits it
        self.resize(min(1180, screen.width() - 40), min(780, screen.height() - 48))
        self.setMinimumSize(640, 480)
        self._widgets()
        self._bindings()
        self.tools.load()
        self._connect()
        self._shortcuts()
        self._extras()
        self.view_ctl = ViewController(self)   # sidebar toggle, small windows, keyboard
        if self.settings.theme != theme.choice() or self.settings.theme != "system":
            apply_theme_choice(self.settings.theme)
        geometry.restore(self, self.splitter, self.settings)
        freeze_heap()
        if autostart:
            QTimer.singleShot(0, self.start)

    # --- what the window offers: its parts' state and actions (the dialogs and tests use them) ---
    settings = property(lambda self: self.prefs.settings,
                        lambda self, value: setattr(self.prefs, "settings", value))
    settings_path = property(lambda self: self.prefs.path)
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
    api_server_started = property(lambda self: self.api.started)   # the API server's control, if made
    settings_dialog = property(lambda self: self.settings_ctl.dialog)
    chat_settings_dialog = property(lambda self: self.settings_ctl.chat_dialog)
    confirm_box = property(lambda self: self.questions.confirm_box)
    import_dialog = property(lambda self: self.imports.dialog)        # the import in progress, if any
    duplicate_box = property(lambda self: self.imports.duplicate_box)   # "already imported", the last said
    shutdown_started = property(lambda self: self.shutdown.started)
    shutdown_complete = property(lambda self: self.shutdown.complete)
    _quit_dialog = property(lambda self: self.shutdown.dialog)   # “Saving pinned chats…”

    @property
    def store(self) -> Any:
        return self.chats.store

    @store.setter
    def store(self, value: Any) -> None:
        self.chats.store = value

    # --- construction ------------------------------------------------------------------------
    def _controllers(self) -> None:
        self.tasks = TaskRunner(max_threads=4, parent=self)
        self.engines = EngineController(self.backend, self.home, self.tasks, self)
        self.chats = ChatsController(self.engines, self.tasks, self)
        self.deletions = Deletions(self.chats, self.engines, self)
        self.replies = RepliesController(self.chats, self.engines, self.deletions,
                                         lambda: self.settings, self.tasks, self)
        self.auto_titles = AutoTitles(self.chats, self.engines, self.replies, self)
        self.tools = ToolsController(self.mcp_path, self.tasks, lambda: self.settings.mcp_tools, parent=self)
        self.chat_model = self.chats.model

    def _widgets(self) -> None:
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
        self.prefs.status = self.status
        self.heading = HeaderBinding(self.chats, self.engines, self.replies, self.area,
                                     window_title=self.setWindowTitle)
        self.update_header, self.update_composer = self.heading.update, self.heading.update_composer
        self._update_header = self.update_header
        self.chat_actions = ChatActions(
            self.chats, self.deletions, self.replies, self.sidebar, self.chat_view, self.toast, self.status,
            self.prefs, confirm=lambda title, text: self.confirm(title, text),
            sidebar_shown=lambda: self.view_ctl.sidebar_shown(), header=self.update_header, parent=self)
        a = self.chat_actions
        self._toast_timer, self.toast_pause = a.toast_timer, a.toast_pause
        self.new_chat, self.open_chat, self.close_chat, self.delete_chat = a.new, a.open, a.close, a.delete
        self.toggle_pin, self.duplicate_chat, self.branch_from = a.toggle_pin, a.duplicate, a.branch_from
        self.flip_sibling, self.undo_delete, self.rename_chat = a.flip_sibling, a.undo_delete, a.rename
        self.chat_target = a.target
        self.shutdown = Shutdown(self, self.engines, self.chats, self.replies, self.deletions, self.auto_titles,
                                 self.tasks, self.prefs, api_server=lambda: self.api.started,
                                 remember_geometry=lambda: geometry.remember(self, self.splitter, self.settings),
                                 finished=self.shutdownFinished.emit)
        self.begin_shutdown = self.shutdown.begin
        self.api = ApiBinding(self.engines, self.tasks, self.status, self.prefs, self.home / "state",
                              closing=lambda: self.shutdown.started, parent=self)
        self.api_server, self.restore_api_server = self.api.server, self.api.restore
        self.imports = import_dialog.ModelImports(
            self, self.engines, self.status, settings=lambda: self.settings, save_settings=self.save_settings,
            load_engine=self.load_engine, refresh_models=self.refresh_models,
            pick_model=lambda choice: self.pick_model(choice))
        self.import_clear = self.imports.clear   # an import's last word leaves the status bar
        self.composer.set_ready(False, "Loading the model…")
        self.update_header()

    def _bindings(self) -> None:
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
        s = self.settings_ctl
        self.open_settings, self.open_api_settings = s.open, s.open_at_api
        self.open_chat_settings, self.clear_cache = s.open_chat, s.clear_cache

    def _connect(self) -> None:
        self.model_choice = mc = ModelChoice(
            self.engines, self.chats, self.replies, self.header, self.model_notice,
            settings=lambda: self.settings, save_settings=self.save_settings, load_engine=self.load_engine,
            confirm_switch=lambda title, text: self.confirm_switch(title, text), engine_ready=self.engineReady)
        self.pick_model, self.switch_model, self._on_model_picked = mc.pick, mc.switch, mc.on_picked
        self.model_name, self.switch_cost, self.update_model_notice = mc.name, mc.cost, mc.update_notice
        self.chat_models, self.kept_model = mc.chat_models, mc.kept_model
        self.reply_actions = ra = ReplyActions(self.replies, mc, self.chat_view, self.composer)
        self.send, self.stop, self.regenerate, self.edit_message = ra.send, ra.stop, ra.regenerate, ra.edit
        self.startup = Startup(self.chats, self.engines, self.deletions, self.tasks, self.sidebar, self.status,
                               self.prefs, self.home, self.backend, open_chat=self.open_chat,
                               new_chat=self.new_chat, load_engine=self.load_engine,
                               refresh_models=self.refresh_models, closing=lambda: self.shutdown.started,
                               parent=self)
        self.start, self.load_chats = self.startup.start, self.startup.load_chats

        a, sb, c, r = self.chat_actions, self.sidebar, self.chats, self.replies
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
        h.pinClicked.connect(lambda: a.on_current(self.toggle_pin))
        h.temporaryToggled.connect(a.on_temporary_toggled)
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

        def on_draft() -> None:                 # a new chat: what is said around it
            self.update_model_notice()
            self.update_header()
            self.update_composer()
            self.composer.focus()

        def on_opening(chat_id: str) -> None:   # another chat on screen
            self.update_header()
            self.update_composer()
            self.update_model_notice()
            mc.learn(chat_id, c.store_for(chat_id), self.tasks)

        c.draftStarted.connect(on_draft)
        c.chatOpening.connect(on_opening)
        c.openRequested.connect(self.open_chat)
        c.headerChanged.connect(self.update_header)
        c.listChanged.connect(a.on_list_changed)
        c.errorOccurred.connect(self._report_error)
        r.chatCreated.connect(a.on_created)
        r.composerChanged.connect(self.update_composer)

    def _extras(self) -> None:
        self.chat_files = ChatFiles(     # File ▸ Import chat…, Export chat as
            self, self.chats, self.status, self.tasks, settings=lambda: self.settings,
            save_settings=self.save_settings, open_chat=self.open_chat)
        self.draft_tokens = DraftTokens(  # “1,234 tokens” under the composer
            self.composer, self.engines, self.tasks,
            figures=lambda: self.binding.last_figures if self.current_id else None,
            chat_loaded=self.chatLoaded, reply_finished=self.replyFinished, parent=self)

    def _shortcuts(self) -> None:
        a, ra = self.chat_actions, self.reply_actions

        def add(seq: Any, slot: Callable[[], Any], name: str) -> Any:
            return shortcut(self, seq, slot, name)

        self.act_new = add("Ctrl+N", self.new_chat, "New chat")
        self.act_new_temp = add("Ctrl+Shift+N", lambda: self.new_chat(temporary=True), "New temporary chat")
        self.act_search = add("Ctrl+K", self._focus_search, "Search chats")
        self.act_find = add(QKeySequence.StandardKey.Find, self._focus_search, "Find")
        self.act_close_chat = add("Ctrl+W", lambda: self.close_chat(a.target(), ask=True), "Close chat")
        # the chat actions, window-wide: on the row focused in the chat list while it has the
        # focus, else on the chat on screen
        self.act_pin = add("Ctrl+P", lambda: a.on_target(self.toggle_pin), "Pin or unpin chat")
        self.act_rename = add("F2", lambda: a.on_target(self.rename_chat), "Rename chat")
        self.act_duplicate = add("Ctrl+D", lambda: a.on_target(self.duplicate_chat), "Duplicate chat")
        self.act_delete = add("Ctrl+Shift+Backspace", lambda: a.on_target(self.delete_chat), "Delete chat")
        self.act_undo_delete = add(QKeySequence.StandardKey.Undo, self.undo_delete, "Undo delete")
        self.act_settings = add("Ctrl+,", self.open_settings, "Settings")
        self.act_regen = add("Ctrl+R", ra.regenerate_last, "Regenerate")
        self.act_stop = add("Ctrl+.", self.stop, "Stop")
        self.act_quit = add(QKeySequence.StandardKey.Quit, self.close, "Quit")

    def _focus_search(self) -> None:
        self.sidebar.search.setFocus()
        self.sidebar.search.selectAll()

    # --- the model, the dialogs that open from the window -------------------------------------
    def load_engine(self) -> None:
        self.engines.load(self.settings.copy(), self.api.started)

    def _reload_engine(self) -> None:
        self.stop()
        self.load_engine()

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

    def open_data_folder(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.home)))

    def _report_error(self, exc: BaseException) -> None:
        log.error("background task failed: %r", exc)
        self.status.set_message(f"Error: {in_words(exc)}")

    # --- Qt's events ---------------------------------------------------------------------------
    def resizeEvent(self, event: Any) -> None:  # noqa: N802
        super().resizeEvent(event)
        if self.toast.isVisible():
            self.toast.place()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        if self.shutdown.complete:
            event.accept()
            return
        event.ignore()
        if not self.shutdown.started:
            self.shutdown.begin()
