"""Amber's main window: sidebar, chat view, composer, status bar; all I/O off the UI thread."""
from __future__ import annotations

import base64
import gc
import logging
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QByteArray, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDesktopServices, QKeySequence
from PySide6.QtCore import QUrl
from PySide6.QtWidgets import (QComboBox, QFileDialog, QFrame, QHBoxLayout, QLabel, QMainWindow,
                               QMessageBox, QProgressBar, QProgressDialog, QPushButton, QSplitter,
                               QToolButton, QVBoxLayout, QWidget, QMenu)

from engine import paths
from engine.api import ChatMessage, GenerationResult, PrefillProgress, SessionKind, TextChunk

from . import accessibility as a11y
from . import theme
from .backend import Backend, ImportCancelled, _accepting
from .chat_view import ChatView, MessageItem, copy_to_clipboard
from .save_notice import SaveNotice
from .composer import Composer
from .markdown_render import render
from app.store.memory import MemoryStore
from app.store.titles import chat_title as _title_from  # the stores' title: it never changes later
from .remote_config import (chat_salt, is_remote_choice, is_remote_engine, load_remotes,
                            temporary_notice)
from .settings import Settings
from .sidebar import Sidebar
from .sidebar_model import ChatListModel, ChatRow, build_items
from .status import StatusBar
from .tasks import GeneratorWorker, ProgressRelay, TaskRunner
from .widgets.turn import LiveTurn
from .titles import derived_title
from .send_queue import SendQueue
from .widgets.hover_pause import HoverPause
from .widgets.search_jump import SearchJump
from .widgets.elided import ElidedLabel
from .window_view import ViewController, apply_theme_choice
from .import_progress import staged
from . import chat_figures

log = logging.getLogger(__name__)

UNDO_MS = 10000         # how long a deleted chat can be brought back (paused while hovered)
CHAT_EMPTY = "Everything runs on this computer. Pinned chats resume instantly after a restart."
TEMP_EMPTY = ("Everything runs on this computer. Nothing of this chat is written to disk, and it "
              "is gone when you close it.")
QUIT_WAIT_S = 10.0      # the longest quit waits for pending KV saves
PIN_POLL_S = 0.05


@dataclass
class Draft:
    """A chat that exists only in the window until its first message is sent."""
    id: str
    temporary: bool


@dataclass
class StreamState:
    chat_id: str
    worker: GeneratorWorker
    text: str = ""
    stopped: bool = False           # Stop pressed: the UI has already moved on
    figures: dict | None = None
    after_done: list[Callable[[], None]] = field(default_factory=list)
    live: LiveTurn = field(default_factory=LiveTurn)   # this turn's figures so far


class Banner(QFrame):
    """A slim notice above the chat: model preparation progress or errors."""

    retry = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("Banner")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 8)
        self.label = QLabel("")
        self.label.setWordWrap(True)
        lay.addWidget(self.label, 1)
        self.bar = QProgressBar()
        self.bar.setFixedWidth(180)
        self.bar.setRange(0, 1000)
        lay.addWidget(self.bar)
        self.button = QPushButton("Retry")
        self.button.clicked.connect(self.retry)
        self.button.hide()
        lay.addWidget(self.button)

    def show_progress(self, text: str, fraction: float) -> None:
        self.label.setText(text)
        if fraction < 0:
            self.bar.setRange(0, 0)
        else:
            self.bar.setRange(0, 1000)
            self.bar.setValue(int(fraction * 1000))
        self.bar.show()
        self.button.hide()
        self.show()

    def show_error(self, text: str) -> None:
        self.label.setText(text)
        self.bar.hide()
        self.button.show()
        self.show()


class Toast(QFrame):
    """“Chat deleted — Undo”, bottom of the chat area."""

    undo = Signal()

    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.setObjectName("Toast")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(14, 8, 8, 8)
        self.label = QLabel("")
        lay.addWidget(self.label)
        self.button = QPushButton("Undo")
        self.button.setObjectName("UndoButton")
        self.button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.button.clicked.connect(self.undo)
        lay.addWidget(self.button)
        self.hide()

    def popup(self, text: str) -> None:
        self.label.setText(text)
        self.adjustSize()
        self._place()
        self.show()
        self.raise_()

    def _place(self) -> None:
        p = self.parentWidget()
        if p is not None:
            self.move((p.width() - self.width()) // 2, p.height() - self.height() - 110)


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
        self.settings_path = paths.settings_path() if home is None else self.home / "settings.json"
        self.settings = settings or Settings.load(self.settings_path)
        self.tasks = TaskRunner(max_threads=4, parent=self)
        self.stream_pool_runner = TaskRunner(max_threads=1, parent=self)  # the token stream
        self.store: Any = None
        self.temp = MemoryStore()
        self.engine: Any = None
        self.engine_error: str | None = None
        self.engine_loading = False
        self.provider_fallback: str | None = None
        self.current_id: str | None = None
        self.draft: Draft | None = None
        self.stream: StreamState | None = None
        self.queued = SendQueue(self)   # sends waiting for the running reply, in order
        self.engine_kv: dict[str, str] = {}  # what the engine last said of each chat's KV
        self.opened: dict[str, SessionKind] = {}
        self.pending_deletes: dict[str, QTimer] = {}
        self.shutdown_started = False
        self.shutdown_complete = False
        self.last_figures: dict | None = None
        self.chats_loaded = False
        self._rendered_cache: dict[str, Any] = {}
        self._watching: set[str] = set()
        self._load_seq = 0
        self.confirm: Callable[[str, str], bool] = self._ask_confirm

        self.setWindowTitle("Amber")
        self.setWindowIcon(theme.app_icon())
        self.resize(1180, 780)
        self.setMinimumSize(640, 480)
        self._build()
        self._make_shortcuts()
        self.view_ctl = ViewController(self)   # sidebar toggle, small windows, keyboard
        if self.settings.theme != theme.choice() or self.settings.theme != "system":
            apply_theme_choice(self.settings.theme)
        self._restore_geometry()
        freeze_heap()
        if autostart:
            QTimer.singleShot(0, self.start)

    # ======================================================================= construction ====
    def _build(self) -> None:
        self.chat_model = ChatListModel(self)
        self.chat_model.renameRequested.connect(self.rename_chat)
        self.sidebar = Sidebar(self.chat_model)
        self.sidebar.chatSelected.connect(self.open_chat)
        self.sidebar.newChatRequested.connect(self.new_chat)
        self.sidebar.newTemporaryRequested.connect(lambda: self.new_chat(temporary=True))
        self.sidebar.pinToggled.connect(self.toggle_pin)
        self.sidebar.deleteRequested.connect(self.delete_chat)
        self.sidebar.duplicateRequested.connect(self.duplicate_chat)
        self.sidebar.closeRequested.connect(self.close_chat)
        self.sidebar.searchChanged.connect(self.search)

        right = QWidget()
        right.setObjectName("ChatArea")
        right.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.setSpacing(0)

        header = QFrame()
        header.setObjectName("ChatHeader")
        header.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        hl = QHBoxLayout(header)
        hl.setContentsMargins(18, 10, 12, 10)
        titles = QVBoxLayout()
        titles.setSpacing(0)
        self.title_label = ElidedLabel("New chat")
        self.title_label.setObjectName("ChatTitle")
        self.subtitle_label = QLabel("")
        self.subtitle_label.setObjectName("ChatSubtitle")
        titles.addWidget(self.title_label)
        titles.addWidget(self.subtitle_label)
        hl.addLayout(titles, 1)
        self.model_picker = QComboBox()
        self.model_picker.setObjectName("ModelPicker")
        self.model_picker.setToolTip("Model")
        a11y.name(self.model_picker, "Model", "The model that writes the replies")
        self.model_picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.model_picker.activated.connect(self._on_model_picked)
        hl.addWidget(self.model_picker)
        self.import_btn = QToolButton()
        self.import_btn.setToolTip("Import a model, or connect to a server")
        a11y.name(self.import_btn, "Import a model",
                  "A GGUF file, an ONNX model folder, or an OpenAI-compatible server")
        self.import_btn.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.import_btn)
        self.act_get_models = menu.addAction("Get models…", self.open_model_library)   # app/gui/model_library.py
        self.act_import_gguf = menu.addAction("Import GGUF file…", self.import_gguf_dialog)
        self.act_import_folder = menu.addAction("Import ONNX model folder…", self.import_folder_dialog)
        self.act_connect_remote = menu.addAction("Connect to an OpenAI-compatible server…",
                                                 self.connect_remote_dialog)
        self.import_btn.setMenu(menu)
        hl.addWidget(self.import_btn)
        self.chat_settings_btn = QToolButton()
        self.chat_settings_btn.setToolTip("This chat's settings (system prompt, sampling)")
        a11y.name(self.chat_settings_btn, "Chat settings", "This chat's system prompt and sampling")
        self.chat_settings_btn.clicked.connect(self.open_chat_settings)
        hl.addWidget(self.chat_settings_btn)
        self.settings_btn = QToolButton()
        self.settings_btn.setToolTip("Settings (Ctrl+,)")
        a11y.name(self.settings_btn, "Settings")
        self.settings_btn.clicked.connect(self.open_settings)
        hl.addWidget(self.settings_btn)
        rl.addWidget(header)

        banner_holder = QWidget()
        bl = QVBoxLayout(banner_holder)
        bl.setContentsMargins(16, 8, 16, 0)
        self.banner = Banner()
        self.banner.retry.connect(self.load_engine)
        self.banner.hide()
        bl.addWidget(self.banner)
        self.temp_notice_base = "Temporary chat — nothing is saved, and it is discarded when closed."
        self.temp_notice = QLabel(self.temp_notice_base)
        self.temp_notice.setWordWrap(True)
        self.temp_notice.setObjectName("ChatSubtitle")
        self.temp_notice.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.temp_notice.hide()
        bl.addWidget(self.temp_notice)
        self.save_notice = SaveNotice()       # "couldn't save to disk: …; kept in memory"
        bl.addWidget(self.save_notice)
        rl.addWidget(banner_holder)

        self.chat_view = ChatView()
        self.chat_view.copyRequested.connect(copy_to_clipboard)
        self.chat_view.editSubmitted.connect(self.edit_message)
        self.chat_view.regenerateRequested.connect(self.regenerate)
        self.chat_view.siblingRequested.connect(self.flip_sibling)
        self.chat_view.branchRequested.connect(self.branch_from)
        self.search_jump = SearchJump(self.chat_view)
        self.empty = self._build_empty_state()
        rl.addWidget(self.empty, 1)
        rl.addWidget(self.chat_view, 1)
        self.chat_view.hide()

        comp_holder = QWidget()
        cl = QHBoxLayout(comp_holder)
        cl.setContentsMargins(16, 6, 16, 14)
        cl.addStretch(1)
        self.composer = Composer()
        self.composer.setMaximumWidth(852)
        self.composer.sendRequested.connect(self.send)
        self.composer.stopRequested.connect(self.stop)
        cl.addWidget(self.composer, 100)
        cl.addStretch(1)
        rl.addWidget(comp_holder)

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
        self.toast = Toast(right)
        self.toast.undo.connect(self.undo_delete)
        self._toast_timer = QTimer(self)
        self._toast_timer.setSingleShot(True)
        self._toast_timer.timeout.connect(self.toast.hide)
        self.toast_pause = HoverPause(self.toast, self)   # the countdown waits while hovered
        self.toast_pause.watch(self._toast_timer)
        self.import_clear = QTimer(self)   # an import's last word leaves the status bar
        self.import_clear.setSingleShot(True)
        self.import_clear.setInterval(4000)
        self.import_clear.timeout.connect(self._clear_import_message)
        self._update_icons()
        theme.changed_signal().connect(self._update_icons)
        self.composer.set_ready(False, "Loading the model…")
        self._update_header()

    def _build_empty_state(self) -> QWidget:
        w = QWidget()
        w.setObjectName("EmptyState")
        lay = QVBoxLayout(w)
        lay.addStretch(2)
        logo = QLabel()
        logo.setPixmap(theme.app_icon().pixmap(64, 64))
        logo.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(logo)
        self.empty_title = QLabel("How can I help?")
        self.empty_title.setObjectName("EmptyTitle")
        self.empty_title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(self.empty_title)
        self.empty_sub = QLabel(CHAT_EMPTY)
        self.empty_sub.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_sub.setWordWrap(True)
        lay.addWidget(self.empty_sub)
        lay.addStretch(3)
        return w

    def _update_icons(self, *_: Any) -> None:
        t = theme.current()
        self.import_btn.setIcon(theme.icon("import", t.text, 18))
        self.settings_btn.setIcon(theme.icon("settings", t.text, 18))
        self.chat_settings_btn.setIcon(theme.icon("sliders", t.text, 18))
        self.act_import_gguf.setIcon(theme.icon("import", t.text, 16))
        self.act_import_folder.setIcon(theme.icon("folder", t.text, 16))

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
        self.act_close_chat = add("Ctrl+W", lambda: self.close_chat(self.current_id), "Close chat")
        self.act_settings = add("Ctrl+,", self.open_settings, "Settings")
        self.act_regen = add("Ctrl+R", self._regenerate_last, "Regenerate")
        self.act_stop = add("Ctrl+.", self.stop, "Stop")
        self.act_quit = add(QKeySequence.StandardKey.Quit, self.close, "Quit")

    def _focus_search(self) -> None:
        self.sidebar.search.setFocus()
        self.sidebar.search.selectAll()

    # ======================================================================= startup =========
    def start(self) -> None:
        self.load_chats()
        self.load_engine()
        self.refresh_models()
        QTimer.singleShot(1500, self, self._warm_up)   # cancelled if the window goes first

    def _warm_up(self) -> None:
        """Compile the Pygments lexers off the UI thread (once): the first code block of a
        streaming reply would otherwise compile its lexer on the UI thread (~70 ms)."""
        global _WARMED_UP
        if not self.shutdown_started and not _WARMED_UP:
            _WARMED_UP = True   # lexers are compiled once per process
            # a window task: it holds the GIL in turns with the UI thread, so it should be done
            # before a reply starts streaming (it is when the window counts as started)
            self.tasks.run_task(_warm_up_rendering)

    def load_chats(self) -> None:
        db = self.home / "amber.sqlite3"
        self.sidebar.set_loading(True)

        def work() -> tuple[Any, list[ChatRow], list[Any]]:
            store = self.store or self.backend.make_store(db)
            rows = [ChatRow.from_store(r) for r in store.list_conversations()]
            # KV kept in memory by an earlier process is gone: show "none" until told otherwise
            rows = [r if r.kv_state != "memory" else ChatRow(**{**r.__dict__, "kv_state": "none"})
                    for r in rows]
            return store, rows, build_items(rows)

        def done(result: tuple[Any, list[ChatRow], list[Any]]) -> None:
            self.store, rows, items = result
            temps = [r for r in self.chat_model.all_chats() if r.temporary]
            self.chat_model.set_rows(rows + temps, items if not temps else None)
            self.sidebar.set_loading(False)
            self.chats_loaded = True
            freeze_heap()   # the chat rows live as long as the window
            self._warm_up()  # now rather than later: a reply may start at once
            last = self.settings.last_chat_id
            if self.current_id is None and self.draft is None and last and self.chat_model.chat(last):
                self.open_chat(last)
            elif self.current_id is None and self.draft is None:
                self.new_chat()
            if self.engine is not None:
                self._retry_engine_deletes()

        def failed(exc: BaseException) -> None:
            self.sidebar.set_loading(True, f"Could not open the chat history:\n{exc}")
            self.status.set_message(f"Chat history unavailable: {exc}")
            log.error("store failed: %s", exc)

        self.tasks.run_task(work, done, failed)

    def load_engine(self) -> None:
        if self.engine_loading:
            return
        self.engine_loading = True
        self.engine_error = None
        progress = ProgressRelay(self)
        progress.progressed.connect(
            lambda f, m: self.banner.show_progress(m or "Preparing the model…", f))
        self.banner.show_progress("Preparing the model…", -1)
        self.composer.set_ready(False, "Loading the model…")
        self.status.set_message("Loading the model…")
        settings = self.settings.copy()
        old = self.engine
        self.engine = None
        self.opened.clear()
        self.engine_kv.clear()
        for r in [r for r in self.chat_model.all_chats() if r.kv_state == "memory"]:
            self.chat_model.update(r.id, kv_state="none", kv_bytes=0)   # gone with the old engine
        self._update_composer()

        server = getattr(self, "_api_server", None)

        def work() -> Any:
            if server is not None:
                server.stop_now()     # it serves the old engine
            if old is not None:
                old.shutdown(timeout=QUIT_WAIT_S)
            if is_remote_choice(settings.model):    # an OpenAI-compatible server (engine.remote)
                progress(-1.0, "Connecting to the server…")
                return self.backend.remote_factory(settings.model, self.home)
            model_dir = self.backend.model_preparer(settings.model, progress)
            progress(-1.0, f"Loading {model_dir.name}…")
            # A factory that takes `progress` reports making the GPU variant on first use of a GPU.
            return self.backend.engine_factory(model_dir, self.home / "state", settings,
                                               **_accepting(self.backend.engine_factory, {"progress": progress}))

        def done(engine: Any) -> None:
            self.engine_loading = False
            self.engine = engine
            self.banner.hide()
            provider = getattr(engine, "provider", "")
            self.provider_fallback = getattr(getattr(engine, "model", None),
                                             "provider_fallback_reason", None)
            self.status.set_provider(provider, self.provider_fallback)
            self.status.show_chat(self.last_figures, int(getattr(engine, "context_window", 0) or 0),
                                  self._kv_for(self.current_id))
            self.status.set_message("")
            self.chat_view.model_name = getattr(engine, "model_name", "Assistant") or "Assistant"
            self.temp_notice.setText(temporary_notice(engine, self.temp_notice_base))
            for mw in self.chat_view.widgets:
                mw.set_model_name(self.chat_view.model_name)
            self._update_composer()
            self._retry_engine_deletes()
            if server is not None:
                server.engine_replaced()
            if self.current_id is not None:
                self._open_in_engine(self.current_id)
            self.refresh_models()
            self.queued.run_next()   # messages queued while the model was (re)loading
            freeze_heap()
            self.engineReady.emit()

        def failed(exc: BaseException) -> None:
            self.engine_loading = False
            self.engine_error = str(exc)
            self.banner.show_error(f"The model could not be loaded: {exc}")
            self.status.set_message("No model loaded")
            self._update_composer()
            log.error("engine failed to load: %s", exc)

        self.tasks.run_task(work, done, failed)

    def _retry_engine_deletes(self) -> None:
        store, engine = self.store, self.engine
        if store is None or engine is None or is_remote_engine(engine):
            return    # a remote engine cannot delete local KV files: the next local engine does

        def work() -> int:
            n = 0
            for cid in list(store.pending_engine_deletes()):
                if cid in self.pending_deletes:
                    continue
                engine.delete(cid)
                store.confirm_engine_deleted(cid)
                n += 1
            return n

        self.tasks.run_task(work)

    # ======================================================================= chats ===========
    def _store_for(self, chat_id: str) -> Any:
        row = self.chat_model.chat(chat_id)
        if (row is not None and row.temporary) or self.temp.has(chat_id):
            return self.temp
        return self.store

    def _is_temporary(self, chat_id: str | None) -> bool:
        if chat_id is None:
            return False
        if self.draft is not None and self.draft.id == chat_id:
            return self.draft.temporary
        row = self.chat_model.chat(chat_id)
        return bool(row and row.temporary)

    def _kind(self, chat_id: str) -> SessionKind:
        if self._is_temporary(chat_id):
            return SessionKind.TEMPORARY
        row = self.chat_model.chat(chat_id)
        return SessionKind.PINNED if row is not None and row.pinned else SessionKind.REGULAR

    def new_chat(self, temporary: bool = False) -> None:
        """Start a draft; the chat is created when its first message is sent."""
        self.current_id = None
        self.draft = Draft(str(uuid.uuid4()), temporary)
        self._load_seq += 1
        self.sidebar.select(None)
        self.chat_view.clear()
        self._show_messages(False)
        self.last_figures = None
        self.status.show_chat(None, int(getattr(self.engine, "context_window", 0) or 0))
        self._update_header()
        self._update_composer()
        self.composer.focus()

    def open_chat(self, chat_id: str) -> None:
        if chat_id == self.current_id and self.chat_view.message_ids():
            return
        row = self.chat_model.chat(chat_id)
        if row is None:
            return
        self.current_id = chat_id
        self.draft = None
        self._load_seq += 1
        seq = self._load_seq
        self.sidebar.select(chat_id)
        self.chat_view.clear()
        self.last_figures = None   # none of the previous chat's figures stay on screen
        self.status.show_chat(None, int(getattr(self.engine, "context_window", 0) or 0),
                              self._kv_for(chat_id))
        self._update_header()
        self._update_composer()
        if not row.temporary:
            self.settings.last_chat_id = chat_id
        store = self._store_for(chat_id)
        th = theme.current()
        # opened from a search hit: show it at the match
        query = self.sidebar.search.text().strip() if self.chat_model.searching else ""
        if store is None:
            return

        def work() -> tuple[Any, list[MessageItem]]:
            detail = store.get_conversation(chat_id)
            items = [MessageItem.from_row(m, th) for m in store.active_path(chat_id)]
            if store is self.store:
                store.mark_opened(chat_id)
            return detail, items

        def done(result: tuple[Any, list[MessageItem]]) -> None:
            if seq != self._load_seq:
                return
            detail, items = result
            self._show_messages(bool(items))
            if self.stream is not None and self.stream.chat_id == chat_id and not self.stream.stopped:
                self.chat_view.set_messages(items)
                self.chat_view.begin_stream()
                self.chat_view.append_stream(self.stream.text)
            else:
                self.chat_view.set_messages(items)
            if self.queued.has(chat_id):
                self._show_messages(True)
                self.queued.show_bubbles(chat_id)
            if query:
                self.search_jump.jump_when_loaded(query)
            figs = chat_figures.last_figures(items)
            self.last_figures = figs
            self.status.show_chat(figs, chat_figures.window(self.engine, figs),
                                  self._kv_for(chat_id))
            if self.stream is not None and self.stream.chat_id == chat_id and not self.stream.stopped:
                self.status.set_live(self.stream.live)
            self.chatLoaded.emit(chat_id)

        self.tasks.run_task(work, done, self._report_error)
        self._open_in_engine(chat_id)

    def _open_in_engine(self, chat_id: str) -> None:
        """Ask the engine to open the chat's session (a pinned one resumes from disk)."""
        engine = self.engine
        if engine is None or (self.draft is not None and self.draft.id == chat_id):
            return
        kind = self._kind(chat_id)
        if self.opened.get(chat_id) == kind:
            return
        self.opened[chat_id] = kind
        store = self._store_for(chat_id)

        def work() -> Any:
            salt = None
            if store is self.store and store is not None:
                salt = chat_salt(engine, store, chat_id)
            return engine.open(chat_id, kind, salt)

        def done(info: Any) -> None:
            self._apply_info(chat_id, info)
            if info is not None:
                self.engine_kv[chat_id] = chat_figures.info_text(info)
            if chat_id == self.current_id and info is not None:
                self.status.set_kv(self._kv_for(chat_id))

        def failed(exc: BaseException) -> None:
            self.opened.pop(chat_id, None)
            self._report_error(exc)

        self.tasks.run_task(work, done, failed)

    def _apply_info(self, chat_id: str, info: Any) -> None:
        if info is None:
            return
        self.save_notice.note(chat_id, info)
        where, nbytes = kv_state_of(info)
        saving = bool(getattr(info, "saving", False))
        self.engine_kv[chat_id] = chat_figures.info_text(info)
        if chat_id == self.current_id:
            self.status.set_kv(self.engine_kv[chat_id])
        self.chat_model.update(chat_id, kv_state=where, kv_bytes=int(nbytes or 0), saving=saving)
        if saving:
            self._watch_saving(chat_id)

    def _watch_saving(self, chat_id: str) -> None:
        """A background save is in flight: show progress until the engine says it is done."""
        engine, store = self.engine, self._store_for(chat_id)
        if engine is None or chat_id in self._watching:
            return
        self._watching.add(chat_id)

        def work() -> Any:
            deadline = time.monotonic() + 600
            info = engine.info(chat_id)
            while getattr(info, "saving", False) and time.monotonic() < deadline:
                time.sleep(PIN_POLL_S)
                info = engine.info(chat_id)
            if store is not None and store is self.store:
                store.set_kv_state(chat_id, *kv_state_of(info))
            return info

        def done(info: Any) -> None:
            self._watching.discard(chat_id)
            self.save_notice.note(chat_id, info)
            if self.chat_model.chat(chat_id) is not None:
                where, nbytes = kv_state_of(info)
                self.chat_model.update(chat_id, kv_state=where, kv_bytes=nbytes, saving=False)

        def failed(exc: BaseException) -> None:
            self._watching.discard(chat_id)
            self.chat_model.update(chat_id, saving=False)

        self.tasks.run_task(work, done, failed)

    def _show_messages(self, has_messages: bool) -> None:
        self.chat_view.setVisible(has_messages)
        self.empty.setVisible(not has_messages)

    def _update_header(self) -> None:
        temporary = self._is_temporary(self.current_id) or bool(self.draft and self.draft.temporary)
        row = self.chat_model.chat(self.current_id) if self.current_id else None
        if row is not None:
            self.title_label.setText(row.title)
            bits = ["Temporary chat" if row.temporary else ("Pinned" if row.pinned else "")]
            self.subtitle_label.setText(" · ".join(b for b in bits if b))
        else:
            self.title_label.setText("New temporary chat" if temporary else "New chat")
            self.subtitle_label.setText("")
        self.subtitle_label.setVisible(bool(self.subtitle_label.text()))
        self.temp_notice.setVisible(temporary)
        self.save_notice.show_for(self.current_id)
        self.empty_title.setText("Temporary chat" if temporary else "How can I help?")
        self.empty_sub.setText(TEMP_EMPTY if temporary else CHAT_EMPTY)
        self.chat_settings_btn.setEnabled(row is not None and not row.temporary)
        title = row.title if row is not None else ("New temporary chat" if temporary else "New chat")
        self.setWindowTitle(f"{title} — Amber")

    def _update_composer(self) -> None:
        if self.engine is None:
            reason = self.engine_error and f"No model: {self.engine_error}" or "Loading the model…"
            self.composer.set_ready(False, reason)
        elif self.stream is not None and not self.stream.stopped and \
                self.stream.chat_id != self._target_id():
            self.composer.set_ready(True)
            self.composer.send_btn.setToolTip("Send (Enter) — queued until the reply in the other "
                                              "chat is done")
        else:
            self.composer.set_ready(True)
        mine = self.stream is not None and not self.stream.stopped and \
            self.stream.chat_id == self._target_id()
        self.composer.set_generating(mine)

    def _kv_for(self, chat_id: str | None) -> str:
        """The status bar's KV text for this chat: the engine's word if it has spoken (this
        model), else what the chat list knows."""
        if chat_id is None:
            return ""
        if chat_id in self.engine_kv:
            return self.engine_kv[chat_id]
        return chat_figures.kv_text(self.chat_model.chat(chat_id))

    def _target_id(self) -> str | None:
        return self.current_id or (self.draft.id if self.draft else None)

    # --- sidebar actions ---------------------------------------------------------------------
    def rename_chat(self, chat_id: str, title: str) -> None:
        store = self._store_for(chat_id)
        if chat_id == self.current_id:
            self._update_header()
        if store is not None:
            self.tasks.run_task(lambda: store.rename(chat_id, title), None, self._report_error)

    def toggle_pin(self, chat_id: str) -> None:
        row = self.chat_model.chat(chat_id)
        if row is None or row.temporary or self.store is None:
            return
        store, engine = self.store, self.engine
        pin = not row.pinned
        self.chat_model.update(chat_id, pinned=pin, saving=pin and engine is not None)
        self.sidebar.select(self.current_id)
        if chat_id == self.current_id:
            self._update_header()
        if engine is not None:
            self.opened[chat_id] = SessionKind.PINNED if pin else SessionKind.REGULAR

        def work() -> Any:
            store.set_pinned(chat_id, pin)
            if engine is None:
                return None
            if pin:
                try:
                    engine.info(chat_id)
                except KeyError:
                    engine.open(chat_id, SessionKind.PINNED,
                                getattr(store.get_conversation(chat_id), "cache_salt", None))
                engine.pin(chat_id)
                deadline = time.monotonic() + 600
                info = engine.info(chat_id)
                while info.saving and time.monotonic() < deadline:
                    time.sleep(PIN_POLL_S)
                    info = engine.info(chat_id)
            else:
                try:
                    engine.unpin(chat_id)
                except KeyError:
                    pass
                try:
                    info = engine.info(chat_id)
                except KeyError:
                    info = None
            if info is not None:
                store.set_kv_state(chat_id, *kv_state_of(info))
            else:
                store.set_kv_state(chat_id, "none", 0)
            return info

        def done(info: Any) -> None:
            if info is not None:
                self._apply_info(chat_id, info)
            else:
                self.chat_model.update(chat_id, saving=False,
                                       **({} if pin else {"kv_state": "none", "kv_bytes": 0}))

        def failed(exc: BaseException) -> None:
            self.chat_model.update(chat_id, saving=False)
            self._report_error(exc)

        self.tasks.run_task(work, done, failed)

    def duplicate_chat(self, chat_id: str, upto_message_id: str | None = None) -> None:
        store = self._store_for(chat_id)
        if store is None or store is self.temp:
            return

        row = self.chat_model.chat(chat_id)
        title = derived_title(row.title if row else "New chat",
                              (r.title for r in self.chat_model.all_chats()),
                              branch=upto_message_id is not None)

        def work() -> Any:
            return store.duplicate(chat_id, upto_message_id=upto_message_id, title=title)

        def done(detail: Any) -> None:
            self.chat_model.upsert(ChatRow.from_store(detail))
            self.open_chat(detail.id)

        self.tasks.run_task(work, done, self._report_error)

    def branch_from(self, message_id: str) -> None:
        if self.current_id is not None:
            self.duplicate_chat(self.current_id, upto_message_id=message_id)

    def close_chat(self, chat_id: str | None) -> None:
        """Close a chat: a temporary one is discarded entirely; others just leave the view."""
        if chat_id is None:
            if self.draft is not None:
                self.new_chat()
            return
        if self.stream is not None and self.stream.chat_id == chat_id:
            self.stop()
        if self._is_temporary(chat_id):
            self.discard_temporary(chat_id)
        else:
            engine = self.engine
            if engine is not None and chat_id in self.opened:
                self.opened.pop(chat_id, None)
                self.tasks.run_task(lambda: engine.close(chat_id))
        if chat_id == self.current_id:
            self.settings.last_chat_id = None
            self.new_chat()

    def discard_temporary(self, chat_id: str) -> None:
        engine = self.engine
        self.chat_model.remove(chat_id)
        self.temp.delete(chat_id)
        self.opened.pop(chat_id, None)
        if engine is not None:
            self.tasks.run_task(lambda: engine.close(chat_id), None, self._report_error)

    def delete_chat(self, chat_id: str) -> None:
        row = self.chat_model.chat(chat_id)
        if row is None:
            return
        if row.temporary:
            self.close_chat(chat_id)
            return
        # one gesture: no confirmation, an undo toast instead (10 s, paused while hovered)
        if self.stream is not None and self.stream.chat_id == chat_id:
            self.stop()
        neighbour = _neighbour(self.chat_model, chat_id)
        self.chat_model.hide(chat_id)
        if chat_id == self.current_id:
            if neighbour is not None:
                self.open_chat(neighbour)
            else:
                self.new_chat()
        timer = QTimer(self)
        timer.setSingleShot(True)
        timer.setInterval(UNDO_MS)
        timer.timeout.connect(lambda: self._commit_delete(chat_id))
        self.pending_deletes[chat_id] = timer
        timer.start()
        self._last_deleted = chat_id
        self.toast.popup(f"Deleted “{_title_from(row.title, 40)}”")
        self._toast_timer.start(UNDO_MS)
        self.toast_pause.watch(timer)
        if self.toast_pause.paused:   # the pointer already rests on the toast
            self.toast_pause.pause()

    def undo_delete(self) -> None:
        chat_id = getattr(self, "_last_deleted", None)
        timer = self.pending_deletes.pop(chat_id, None) if chat_id else None
        if timer is None:
            return
        timer.stop()
        timer.deleteLater()
        self.chat_model.unhide(chat_id)
        self.toast.hide()
        self.open_chat(chat_id)

    def _commit_delete(self, chat_id: str, *, wait: bool = False) -> None:
        timer = self.pending_deletes.pop(chat_id, None)
        if timer is None:
            return
        timer.stop()
        timer.deleteLater()
        self.chat_model.remove(chat_id)
        self.opened.pop(chat_id, None)
        store, engine = self.store, self.engine

        def work() -> None:
            if store is not None:
                store.delete(chat_id)
            if engine is not None:
                engine.delete(chat_id)
                if store is not None and not is_remote_engine(engine):   # else retried locally later
                    store.confirm_engine_deleted(chat_id)

        if wait:
            work()
        else:
            self.tasks.run_task(work, None, self._report_error)

    def search(self, text: str) -> None:
        query = text.strip()
        if not query:
            self.chat_model.set_search(None)
            self.sidebar.view.doItemsLayout()   # back to one-line rows
            self.sidebar.select(self.current_id)
            return
        store, temp = self.store, self.temp

        def work() -> tuple[list[str], dict[str, str]]:
            hits = []
            if store is not None:
                try:
                    hits.extend(store.search(query, limit=200))
                except Exception as exc:  # noqa: BLE001 - e.g. FTS syntax; show no hits
                    log.info("search failed for %r: %s", query, exc)
            hits.extend(temp.search(query))
            hits.sort(key=lambda h: -h.rank if isinstance(h.rank, (int, float)) else 0)
            ids, snippets = [], {}
            for h in hits:
                if h.conversation_id not in snippets:
                    ids.append(h.conversation_id)
                    snippets[h.conversation_id] = _clean_snippet(h.snippet)
            return ids, snippets

        def done(result: tuple[list[str], dict[str, str]]) -> None:
            if self.sidebar.search.text().strip() == query:
                # the list changes; the chat on screen does not (nothing opens while typing)
                self.chat_model.set_search(*result)
                self.sidebar.view.doItemsLayout()   # search hits are two-line rows
                self.sidebar.select(self.current_id)

        self.tasks.run_task(work, done, self._report_error)

    # ======================================================================= generation ======
    def send(self, text: str) -> None:
        if self.engine is None:
            return
        if self.stream is not None:
            if not self.stream.stopped:
                if self.stream.chat_id != self._target_id():
                    self.queued.add(text)   # another chat is generating: wait for it, visibly
                return
            self.stream.after_done.append(lambda: self.send(text))  # previous reply winding down
            return
        if self.queued.has(self._target_id()):
            self.queued.add(text)   # keep this chat's order
            return
        if self.current_id is None:
            draft = self.draft or Draft(str(uuid.uuid4()), False)
            self._create_and_send(draft, text)
            return
        self._start_reply(self.current_id, mode="send", text=text)

    def _create_and_send(self, draft: Draft, text: str) -> None:
        chat_id = draft.id
        now_row = ChatRow(id=chat_id, title=_title_from(text), temporary=draft.temporary,
                          updated_at=_utcnow())
        self.chat_model.upsert(now_row)
        self.current_id = chat_id
        self.draft = None
        if not draft.temporary:
            self.settings.last_chat_id = chat_id
        self.sidebar.select(chat_id)
        self._update_header()
        self._start_reply(chat_id, mode="send", text=text, create=True)

    def regenerate(self, message_id: str) -> None:
        if self.current_id is None or self.stream is not None:
            return
        w = self.chat_view.widget_for(message_id)
        if w is None or w.item.role != "assistant":
            return
        self._start_reply(self.current_id, mode="regenerate", parent_id=w.item.parent_id,
                          remove_id=message_id)

    def _regenerate_last(self) -> None:
        ws = self.chat_view.widgets
        if ws and ws[-1].item.role == "assistant":
            self.regenerate(ws[-1].item.id)

    def edit_message(self, message_id: str, text: str) -> None:
        if self.current_id is None or self.stream is not None:
            return
        w = self.chat_view.widget_for(message_id)
        if w is None or w.item.role != "user":
            return
        self._start_reply(self.current_id, mode="edit", text=text, parent_id=w.item.parent_id,
                          remove_id=message_id)

    def _start_reply(self, chat_id: str, *, mode: str, text: str = "",
                     parent_id: str | None = None, remove_id: str | None = None,
                     create: bool = False) -> None:
        engine = self.engine
        temporary = self._is_temporary(chat_id)
        store = self.temp if temporary else self.store
        if engine is None or store is None:
            return
        kind = self._kind(chat_id)
        need_open = self.opened.get(chat_id) != kind
        self.opened[chat_id] = kind
        settings = self.settings.copy()
        th = theme.current()
        model_name = getattr(engine, "model_name", "") or None
        if temporary and create:
            self.temp.create_conversation(id=chat_id, system_prompt=settings.system_prompt,
                                          model_id=getattr(engine, "model_name", ""))

        # The view changes at once; the store and the engine follow on the worker.
        on_screen = chat_id == self._target_id()   # a queued send may run in another chat
        if on_screen:
            self._show_messages(True)
            self.queued.hide_bubbles()   # shown again below the new turn
        if on_screen and mode == "edit" and remove_id:
            self.chat_view.truncate_after(remove_id, keep=False)
        elif on_screen and mode == "regenerate" and remove_id:
            self.chat_view.truncate_after(remove_id, keep=False)
        if on_screen and mode in ("send", "edit"):
            self.chat_view.append_message(MessageItem(
                id="pending:user", role="user", content=text, rendered=render(text, th),
                parent_id=parent_id))
        if on_screen:
            self.chat_view.scroll_to_bottom()
            self.chat_view.begin_stream()
            self.queued.show_bubbles(chat_id)
        self.chat_model.update(chat_id, busy=True)

        def factory(cancel: Any):
            if create and not temporary:
                store.create_conversation(id=chat_id, system_prompt=settings.system_prompt,
                                          model_id=getattr(engine, "model_name", ""))
            detail = store.get_conversation(chat_id)
            if mode == "send":
                user = store.add_message(chat_id, "user", text)
            elif mode == "edit":
                user = store.add_message(chat_id, "user", text, parent_id=parent_id)
            else:
                user = None
            path = store.active_path(chat_id)
            if mode == "regenerate":
                ids = [m.id for m in path]
                path = path[: ids.index(parent_id) + 1] if parent_id in ids else path
            yield ("user", user, MessageItem.from_row(user, th) if user else None)
            if need_open:
                engine.open(chat_id, kind, chat_salt(engine, store, chat_id, detail, temporary))
            overrides = dict(getattr(detail, "settings", None) or {})
            system = getattr(detail, "system_prompt", "") or settings.system_prompt
            messages = ([ChatMessage("system", system)] if system else []) + \
                [ChatMessage(m.role, m.content) for m in path]
            sampling = settings.sampling.to_params(overrides.get("sampling"))
            sampling.overflow = chat_figures.overflow_policy(overrides, settings)
            reply, result, error = "", None, None
            try:
                for ev in engine.generate(chat_id, messages, sampling, cancel):
                    if isinstance(ev, TextChunk):
                        reply += ev.text
                        yield ("chunk", ev.text, len(ev.token_ids))
                    elif isinstance(ev, PrefillProgress):
                        yield ("prefill", ev.done, ev.total)
                    elif isinstance(ev, GenerationResult):
                        result = ev
            except Exception as exc:  # noqa: BLE001 - shown in the bubble
                error = exc
            figures = result.figures.to_dict() if result is not None else None
            if result is not None and result.text and len(result.text) >= len(reply):
                reply = result.text
            if figures is not None and cancel.is_set():
                figures["finish_reason"] = "cancelled"
            assistant = None
            if reply or result is not None:
                assistant = store.add_message(chat_id, "assistant", reply,
                                              parent_id=user.id if user else parent_id,
                                              figures=figures, model_name=model_name)
            rows = store.active_path(chat_id)
            try:
                info = engine.info(chat_id)
            except Exception:  # noqa: BLE001
                info = None
            if info is not None and store is not self.temp:
                store.set_kv_state(chat_id, *kv_state_of(info))
            detail = store.get_conversation(chat_id)
            a_item = MessageItem.from_row(assistant, th) if assistant else None
            if a_item is not None and error is not None:
                a_item.error = f"Generation failed: {error}"
            return {"rows": rows, "assistant": a_item, "figures": figures, "info": info,
                    "error": error, "detail": detail}

        worker = GeneratorWorker(factory, self.stream_pool_runner.pool)
        state = StreamState(chat_id, worker)
        self.stream = state
        worker.yielded.connect(lambda ev: self._on_stream_event(state, ev))
        worker.finished.connect(lambda res: self._on_stream_done(state, res, None))
        worker.errored.connect(lambda exc: self._on_stream_done(state, None, exc))
        if chat_id == self._target_id():
            self.status.set_live(state.live)   # the previous turn's figures are not this turn's
        self._update_composer()
        worker.start()

    def _on_stream_event(self, state: StreamState, ev: tuple) -> None:
        if state.stopped:
            return
        kind = ev[0]
        current = state.chat_id == self.current_id
        if kind == "user":
            item = ev[2]
            if item is not None and current:
                self.chat_view.replace_message("pending:user", item)
        elif kind == "chunk":
            state.text += ev[1]
            state.live.on_chunk(ev[2])
            if current:
                self.chat_view.append_stream(ev[1])
                self.chat_view.set_stream_meta(state.live.summary())
                self.status.set_live(state.live)
        elif kind == "prefill":
            state.live.on_prefill(ev[1], ev[2])
            if current:
                self.chat_view.set_stream_prefill(ev[1], ev[2])
                self.status.set_live(state.live)

    def stop(self) -> None:
        """Stop at once: the UI is released now; the worker saves the partial reply."""
        state = self.stream
        if state is None or state.stopped:
            return
        state.worker.cancel()
        state.stopped = True
        if state.chat_id == self.current_id:
            partial = MessageItem(id="pending:assistant", role="assistant", content=state.text,
                                  rendered=render(state.text, theme.current()),
                                  figures={"finish_reason": "cancelled"})
            self.chat_view.end_stream(partial)
        self.chat_model.update(state.chat_id, busy=False)
        self._update_composer()

    def _on_stream_done(self, state: StreamState, result: dict | None,
                        exc: BaseException | None) -> None:
        if self.stream is state:
            self.stream = None
        chat_id = state.chat_id
        current = chat_id == self.current_id
        row = self.chat_model.chat(chat_id)
        if exc is not None:
            log.error("reply failed: %s", exc)
            if current:
                self.chat_view.end_stream(MessageItem(
                    id="pending:assistant", role="assistant", content=state.text,
                    rendered=render(state.text, theme.current()),
                    error=f"Could not generate a reply: {exc}"))
                self.chat_view.truncate_after(None) if False else None
            self.status.set_message(f"Generation failed: {exc}")
        elif result is not None:
            figs = result["figures"]
            detail = result["detail"]
            if row is not None:
                changes: dict[str, Any] = {"busy": False, "title": detail.title or row.title,
                                           "updated_at": detail.updated_at}
                self.chat_model.update(chat_id, **changes)
            if result["info"] is not None:
                self._apply_info(chat_id, result["info"])
            if current:
                items = self._items_for(result["rows"], result["assistant"])
                self.queued.hide_bubbles()
                if state.stopped or self.chat_view.message_ids() != [i.id for i in items][:-1] + \
                        ["pending:assistant"]:
                    self.chat_view.end_stream()
                    self._sync_view(items)
                else:
                    self.chat_view.end_stream(items[-1] if items else None)
                    self._sync_view(items)
                self.queued.show_bubbles(chat_id)
                self.last_figures = figs
                if result["info"] is not None:
                    self.engine_kv[chat_id] = chat_figures.info_text(result["info"])
                self.status.show_chat(figs, chat_figures.window(self.engine, figs),
                                      self._kv_for(chat_id))
                if result["error"] is not None:
                    self.status.set_message(f"Generation failed: {result['error']}")
                else:
                    self.status.set_message("")
                self._update_header()
        if row is not None:
            self.chat_model.update(chat_id, busy=False)
        self._update_composer()
        if self.queued.has(chat_id) and row is not None:
            self.chat_model.update(chat_id, busy=True)
        # one announcement per reply (the stream itself is not read out token by token)
        error = str(exc) if exc is not None else (result or {}).get("error")
        a11y.announce(self.chat_view, a11y.reply_announcement(
            state.text, error=error, stopped=state.stopped,
            elsewhere=None if current else (row.title if row is not None else "")), assertive=bool(error))
        self.replyFinished.emit(chat_id)
        for fn in state.after_done:
            fn()
        self.queued.run_next()

    def _items_for(self, rows: list[Any], assistant: MessageItem | None) -> list[MessageItem]:
        existing = {w.item.id: w.item for w in self.chat_view.widgets}
        items = []
        for r in rows:
            if assistant is not None and r.id == assistant.id:
                assistant.sibling_index, assistant.sibling_count = r.sibling_index, r.sibling_count
                items.append(assistant)
                continue
            old = existing.get(r.id)
            item = MessageItem.from_row(r)
            item.rendered = old.rendered if old is not None and old.content == r.content else None
            items.append(item)
        return items

    def _sync_view(self, items: list[MessageItem]) -> None:
        """Make the view show `items`, reusing widgets whose message is unchanged."""
        view = self.chat_view
        ids = [i.id for i in items]
        keep = 0
        for w, it in zip(view.widgets, items):
            if w.item.id != it.id and not w.item.pending:
                break
            keep += 1
        for w, it in zip(view.widgets[:keep], items[:keep]):
            if w.item.id != it.id or (w.item.sibling_count, w.item.sibling_index, w.item.figures) != \
                    (it.sibling_count, it.sibling_index, it.figures) or w.item.content != it.content:
                w.item = it
                w.refresh()
        for w in view.widgets[keep:]:
            w.hide()
            w.deleteLater()
        view.widgets = view.widgets[:keep]
        for it in items[keep:]:
            view._add_widget(it)  # noqa: SLF001
            view.widgets[-1].refresh()
        view._update_last_flags()  # noqa: SLF001
        assert view.message_ids() == ids

    def flip_sibling(self, message_id: str, delta: int) -> None:
        if self.current_id is None or self.stream is not None:
            return
        chat_id = self.current_id
        store = self._store_for(chat_id)
        w = self.chat_view.widget_for(message_id)
        if store is None or w is None:
            return
        th = theme.current()
        seq = self._load_seq

        def work() -> list[MessageItem]:
            sibs = _siblings(store, chat_id, message_id)
            ids = [s.id for s in sibs]
            i = ids.index(message_id) + delta
            if not 0 <= i < len(ids):
                return []
            rows = store.select_sibling(ids[i])
            return [MessageItem.from_row(r) for r in rows]

        def done(items: list[MessageItem]) -> None:
            if not items or seq != self._load_seq:
                return
            cache = {w.item.id: w.item.rendered for w in self.chat_view.widgets}
            for it in items:
                it.rendered = cache.get(it.id) or render(it.content, th)
            self._sync_view(items)
            figs = chat_figures.last_figures(items)
            self.last_figures = figs
            self.status.set_figures(figs)

        self.tasks.run_task(work, done, self._report_error)

    # ======================================================================= models ==========
    def refresh_models(self) -> None:
        def done(found: tuple[list[str], list[Any]]) -> None:
            names, remotes = found
            self.model_picker.blockSignals(True)
            self.model_picker.clear()
            current = self.settings.model
            default_label = f"{paths.DEFAULT_MODEL_NAME} (default)"
            self.model_picker.addItem(theme.icon("model", theme.current().text, 16), default_label, "")
            for n in names:
                if n != paths.DEFAULT_MODEL_NAME:
                    self.model_picker.addItem(theme.icon("model", theme.current().text, 16), n, n)
            if remotes:
                from .remote_dialog import add_remote_items  # noqa: PLC0415
                add_remote_items(self.model_picker, remotes, theme.icon("model", theme.current().text, 16))
            i = self.model_picker.findData(current)
            self.model_picker.setCurrentIndex(max(0, i))
            self.model_picker.blockSignals(False)

        self.tasks.run_task(lambda: (self.backend.model_lister(), load_remotes(self.home)), done,
                            self._report_error)

    def _on_model_picked(self, index: int) -> None:
        name = self.model_picker.itemData(index) or ""
        if name == self.settings.model:
            return
        self.stop()
        self.settings.model = name
        self.save_settings()
        self.load_engine()

    def open_model_library(self) -> Any:
        """Hugging Face search, download and conversion (app/gui/model_library.py)."""
        from .model_library import open_model_library  # noqa: PLC0415
        return open_model_library(self)

    def connect_remote_dialog(self) -> Any:
        """Base URL, optional key, model: chats then stream from that server (app/gui/remote_dialog.py)."""
        from .remote_dialog import open_connect_dialog  # noqa: PLC0415
        return open_connect_dialog(self)

    def import_gguf_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a GGUF model", self._dialog_dir(),
                                              "GGUF models (*.gguf);;All files (*)")
        if path:
            self._remember_dir(Path(path).parent)
            self.import_model(Path(path), gguf=True)

    def import_folder_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Import an ONNX model folder", self._dialog_dir())
        if path:
            self._remember_dir(Path(path).parent)
            self.import_model(Path(path), gguf=False)

    def _dialog_dir(self) -> str:
        """Where a file dialog opens: the folder the last one was in (if it still exists)."""
        last = self.settings.last_dir
        return last if last and Path(last).is_dir() else str(Path.home())

    def _remember_dir(self, folder: Path) -> None:
        self.settings.last_dir = str(folder)
        self.save_settings()

    def import_model(self, src: Path, *, gguf: bool) -> QProgressDialog:
        import threading  # noqa: PLC0415

        cancel = threading.Event()
        dlg = QProgressDialog(f"Importing {src.name}…", "Cancel", 0, 1000, self)
        dlg.setWindowTitle("Import model")
        for bar in dlg.findChildren(QProgressBar):
            a11y.name(bar, "Import progress")
        dlg.setWindowModality(Qt.WindowModality.WindowModal)
        dlg.setMinimumDuration(0)
        dlg.setAutoClose(False)
        dlg.setAutoReset(False)
        dlg.setValue(0)
        dlg.canceled.connect(cancel.set)
        dlg.canceled.connect(lambda: self.status.set_message("Import cancelled"))
        dlg.canceled.connect(self.import_clear.start)
        progress = ProgressRelay(dlg)

        def on_progress(f: float, msg: str) -> None:
            if f < 0:
                dlg.setRange(0, 0)
            else:
                dlg.setRange(0, 1000)
                dlg.setValue(int(f * 1000))
            if msg:
                dlg.setLabelText(msg)

        progress.progressed.connect(on_progress)
        importer = self.backend.gguf_importer if gguf else self.backend.folder_importer

        def done(dest: Path) -> None:
            cancelled = cancel.is_set()
            dlg.canceled.disconnect()   # closing a QProgressDialog emits canceled()
            dlg.close()
            if cancelled:   # cancelled, but the import finished first: undo it
                self.tasks.run_task(lambda: shutil.rmtree(dest, ignore_errors=True))
                self.status.set_message("Import cancelled")
                self.import_clear.start()
                return
            self.status.set_message(f"Imported {dest.name}")
            self.import_clear.start()
            if self.engine is None and self.engine_error is not None:
                # the model in use could not be loaded (e.g. the default is missing): use this one
                self.settings.model = dest.name
                self.save_settings()
                self.load_engine()
            self.refresh_models()

        def failed(exc: BaseException) -> None:
            dlg.canceled.disconnect()
            dlg.close()
            self.import_clear.start()
            if isinstance(exc, ImportCancelled) or cancel.is_set():
                self.status.set_message("Import cancelled")
            else:
                self.status.set_message(f"Import failed: {exc}")
                QMessageBox.warning(self, "Import failed", str(exc))

        feed = staged(progress) if gguf else progress   # stages that visibly move
        self.tasks.run_task(lambda: importer(src, feed, cancel), done, failed)
        dlg.show()
        self.import_dialog = dlg
        return dlg

    # ======================================================================= settings ========
    def open_settings(self) -> None:
        from .settings_dialog import SettingsDialog  # noqa: PLC0415

        dlg = SettingsDialog(self.settings, self.home, parent=self, server=self.api_server())
        dlg.clearCacheRequested.connect(self.clear_cache)
        self.settings_dialog = dlg
        if dlg.exec():
            old = self.settings
            self.settings = dlg.result_settings()
            self.save_settings()
            if old.theme != self.settings.theme:
                apply_theme_choice(self.settings.theme)
            if (old.provider, old.memory_budget_mb, old.disk_budget_mb, old.cache_max_age_days, old.kv_store) != (
                    self.settings.provider, self.settings.memory_budget_mb,
                    self.settings.disk_budget_mb, self.settings.cache_max_age_days, self.settings.kv_store):
                self.stop()
                self.load_engine()

    def api_server(self) -> Any:
        """The local API server's control (app/gui/server_control.py), made on first use."""
        if getattr(self, "_api_server", None) is None:
            from .server_control import ServerControl  # noqa: PLC0415
            self._api_server = ServerControl(lambda: self.engine, self.home / "state", parent=self,
                                             runner=self.tasks.run_task)
        return self._api_server

    def open_chat_settings(self) -> None:
        chat_id = self.current_id
        if chat_id is None or self._is_temporary(chat_id) or self.store is None:
            return
        from .settings_dialog import ChatSettingsDialog  # noqa: PLC0415

        store = self.store

        def loaded(detail: Any) -> None:
            dlg = ChatSettingsDialog(detail, self.settings, parent=self)
            self.chat_settings_dialog = dlg
            if dlg.exec():
                prompt, overrides = dlg.values()
                self.tasks.run_task(lambda: store.update_settings(
                    chat_id, system_prompt=prompt, settings=overrides), None, self._report_error)

        self.tasks.run_task(lambda: store.get_conversation(chat_id), loaded, self._report_error)

    def clear_cache(self) -> None:
        engine = self.engine
        if engine is None:
            return
        pinned = {r.id for r in self.chat_model.all_chats() if r.pinned}

        def work() -> None:
            clear = getattr(engine, "clear_cache", None)
            if clear is not None:
                clear()   # SessionManager.clear_cache: pinned sessions keep their blocks
            else:  # fall back: close every regular session so the engine drops its KV
                for cid in list(self.opened):
                    if cid not in pinned:
                        engine.close(cid)

        def done(_: Any) -> None:
            for r in self.chat_model.all_chats():
                if not r.pinned and r.kv_state != "none":
                    self.chat_model.update(r.id, kv_state="none", kv_bytes=0)
            self.opened = {k: v for k, v in self.opened.items() if k in pinned}
            self.status.set_message("Cache cleared (pinned chats keep theirs)")

        self.tasks.run_task(work, done, self._report_error)

    def _clear_import_message(self) -> None:
        if self.status.message.text().startswith(("Imported ", "Import cancelled")):
            self.status.set_message("")

    def save_settings(self) -> None:
        try:
            self.settings.save(self.settings_path)
        except OSError as exc:
            self.status.set_message(f"Could not save settings: {exc}")

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

    # ======================================================================= errors / misc ===
    def _report_error(self, exc: BaseException) -> None:
        log.error("background task failed: %r", exc)
        self.status.set_message(f"Error: {exc}")

    def _ask_confirm(self, title: str, text: str) -> bool:
        box = QMessageBox(QMessageBox.Icon.Warning, title, text,
                          QMessageBox.StandardButton.Cancel, self)
        delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return box.clickedButton() is delete

    def open_data_folder(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.home)))

    def resizeEvent(self, event: Any) -> None:  # noqa: N802
        super().resizeEvent(event)
        if self.toast.isVisible():
            self.toast._place()  # noqa: SLF001

    # ======================================================================= quit ============
    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        if self.shutdown_complete:
            event.accept()
            return
        event.ignore()
        if self.shutdown_started:
            return
        self.begin_shutdown()

    def begin_shutdown(self) -> None:
        """Stop generation now, commit pending deletes, discard temporary chats, then wait
        (bounded, visibly) for the engine's pending KV saves."""
        self.shutdown_started = True
        self.stop()
        for cid in list(self.pending_deletes):
            self._commit_delete(cid, wait=False)
        for row in [r for r in self.chat_model.all_chats() if r.temporary]:
            self.discard_temporary(row.id)
        self._remember_geometry()
        if self.current_id and self._is_temporary(self.current_id):
            self.settings.last_chat_id = None
        self.save_settings()
        engine, store, tasks = self.engine, self.store, self.tasks
        self.hide()
        self._quit_dialog: QProgressDialog | None = None
        started = time.monotonic()

        streams = self.stream_pool_runner.pool

        server = getattr(self, "_api_server", None)

        def work() -> None:
            if server is not None:
                server.stop_now()
            streams.waitForDone(2000)   # a cancelled reply stops within a token; it saves its text
            tasks.pool.waitForDone(int(QUIT_WAIT_S * 1000 / 2))
            if engine is not None:
                engine.shutdown(timeout=max(0.5, QUIT_WAIT_S - (time.monotonic() - started)))
            if store is not None:
                store.close()

        def show_wait() -> None:
            if self.shutdown_complete or not shiboken_valid(self):
                return
            dlg = QProgressDialog("Saving pinned chats…", "Quit now", 0, 0)
            dlg.setWindowTitle("Amber")
            dlg.setMinimumDuration(0)
            dlg.canceled.connect(finish)
            dlg.show()
            self._quit_dialog = dlg

        def finish(*_: Any) -> None:
            if self.shutdown_complete or not shiboken_valid(self):
                return
            self.shutdown_complete = True
            if self._quit_dialog is not None:
                self._quit_dialog.close()
            self.shutdownFinished.emit()
            self.close()

        # a separate, long-lived runner: the bounded wait never waits for itself, and a stuck
        # engine cannot take the window down with it
        shutdown_runner().run_task(work, finish, lambda exc: finish())
        QTimer.singleShot(300, show_wait)
        QTimer.singleShot(int(QUIT_WAIT_S * 1000) + 1000, finish)  # the wait is bounded


def kv_state_of(info: Any) -> tuple[str, int]:
    """What the sidebar shows for a session: "disk" when its KV is saved (a pinned chat, even
    while it is also in memory), else where the engine has it."""
    disk = int(getattr(info, "kv_bytes_disk", 0) or 0)
    if disk > 0:
        return "disk", disk
    where = getattr(info.kv_location, "value", str(info.kv_location))
    if where == "memory":
        return "memory", int(getattr(info, "kv_bytes_memory", 0) or 0)
    return ("disk", disk) if where == "disk" else ("none", 0)


def freeze_heap() -> None:
    """Move every object alive now (modules, the chat list, the engine) out of the garbage
    collector's reach. A full collection otherwise walks them all: 50–85 ms with the GIL held,
    usually on a worker thread, and the UI thread stalls for as long. Called at a few points
    where what exists is long-lived; objects freed by reference counting are still freed."""
    gc.freeze()


def _warm_up_rendering() -> None:
    """Import Markdown / Pygments lexers off the UI thread before the first reply needs them."""
    from pygments.lexers import get_lexer_by_name  # noqa: PLC0415

    sample = "# x\n\n- a\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
    for lang in ("python", "javascript", "typescript", "bash", "json", "c", "cpp", "rust", "go",
                 "java", "html", "css", "sql", "yaml", "text"):
        try:
            get_lexer_by_name(lang)
        except Exception:  # noqa: BLE001
            pass
        sample += f"```{lang}\nx = 1\n```\n\n"
        time.sleep(0.01)  # a background nicety: leave the GIL to the UI thread now and then
    for th in (theme.LIGHT, theme.DARK):
        render(sample, th)


_SHUTDOWN_RUNNER: TaskRunner | None = None
_WARMED_UP = False


def shutdown_runner() -> TaskRunner:
    """Runs the quit-time waits (engine saves, store close); outlives any window."""
    global _SHUTDOWN_RUNNER
    if _SHUTDOWN_RUNNER is None:
        _SHUTDOWN_RUNNER = TaskRunner(max_threads=2)
    return _SHUTDOWN_RUNNER


def _siblings(store: Any, chat_id: str, message_id: str) -> list[Any]:
    """The message's siblings (itself included), oldest first."""
    fn = getattr(store, "siblings", None)
    if fn is not None:
        return list(fn(message_id))
    if isinstance(store, MemoryStore):
        raise AttributeError("MemoryStore.siblings missing")
    data = store.export_json(chat_id)
    msgs = data.get("messages", []) if isinstance(data, dict) else []
    by_id = {m["id"]: m for m in msgs}
    parent = by_id[message_id].get("parent_id")
    sibs = [m for m in msgs if m.get("parent_id") == parent]

    @dataclass
    class _S:
        id: str
    return [_S(m["id"]) for m in sibs]


def _neighbour(model: ChatListModel, chat_id: str) -> str | None:
    """The chat to show after `chat_id` goes: the next one down the list, else the one above;
    never a temporary chat."""
    ids = model.visible_chat_ids()
    if chat_id not in ids:
        return None
    i = ids.index(chat_id)
    for cid in ids[i + 1:] + list(reversed(ids[:i])):
        row = model.chat(cid)
        if row is not None and not row.temporary:
            return cid
    return None


def shiboken_valid(obj: Any) -> bool:
    import shiboken6  # noqa: PLC0415

    return shiboken6.isValid(obj)


def _clean_snippet(s: str) -> str:
    """One line; the «» around matched words stay (the sidebar highlights them)."""
    for mark in ("<b>", "</b>"):
        s = (s or "").replace(mark, "")
    return " ".join((s or "").split())


def _utcnow() -> Any:
    from datetime import datetime, timezone  # noqa: PLC0415
    return datetime.now(timezone.utc)
