"""The chats: the list (`model`), the chat on screen (`current_id`, or a `draft`), which chats the
engine has open and what it last said of their KV; open, new, pin, rename, duplicate / branch,
close, search, siblings. Work runs off the UI thread; what changed is a signal."""
from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, Signal

from engine.api import ChatEngine, SessionInfo, SessionKind, SessionNotOpen

from ...chat.kv import chat_salt, kv_state_of
from ..models import chat_figures
from ..models.chat_list import ChatListModel, ChatRow, build_items
from ..models.message import items_of
from ..tasks import TaskRunner
from ..models.titles import derived_title
from .engine import EngineController

log = logging.getLogger(__name__)

PIN_POLL_S = 0.05


@dataclass
class Draft:
    """A chat that exists only in the window until its first message is sent."""
    id: str
    temporary: bool


class ChatsController(QObject):
    listLoaded = Signal()
    listFailed = Signal(str)
    draftStarted = Signal()
    chatOpening = Signal(str)                       # the view empties; its messages follow
    messagesLoaded = Signal(str, object, str)       # chat id, view items, search query to show
    siblingsLoaded = Signal(object)                 # the chat's new path, as view items
    openRequested = Signal(str)                     # e.g. a duplicate, made: show it
    kvChanged = Signal(str)                         # chat id: its KV text changed
    infoReceived = Signal(str, object)              # chat id, the engine's SessionInfo (save errors)
    headerChanged = Signal()                        # the chat on screen was renamed / pinned
    listChanged = Signal()                          # the list re-sorted or its search changed
    errorOccurred = Signal(object)

    def __init__(self, engines: EngineController, tasks: TaskRunner,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.engines, self.tasks = engines, tasks
        self.model = ChatListModel(self)
        self.store: Any = None
        self._temp: Any = None                # the temporary chats' store, made on first use
        self._temp_lock = threading.Lock()
        self.current_id: str | None = None
        self.draft: Draft | None = None
        self.opened: dict[str, SessionKind] = {}
        self.engine_kv: dict[str, str] = {}   # what the engine last said of each chat's KV
        self.loaded = False
        self.search_query = ""
        self.load_seq = 0                     # a chat's messages arrive only if still wanted
        self._watching: set[str] = set()
        self._engine_work: dict[str, threading.Event] = {}   # each chat's last pin / close: done?
        self.model.renameRequested.connect(self.rename)

    def _fail(self, exc: BaseException) -> None:
        self.errorOccurred.emit(exc)

    def _in_chat_order(self, chat_id: str, work: Callable[[], Any]) -> Callable[[], Any]:
        """`work` run once the pin / unpin / close asked before it for the same chat is done (on
        the UI thread): a pin followed at once by a close saves the pinned KV, then closes."""
        before, done = self._engine_work.get(chat_id), threading.Event()
        self._engine_work[chat_id] = done

        def run() -> Any:
            try:
                if before is not None:
                    before.wait()
                return work()
            finally:
                done.set()
        return run

    @property
    def temp(self) -> Any:
        """The temporary chats' store: the SQLite store on a database only in memory (made on
        first use, so a window that never has a temporary chat never loads SQLAlchemy for it)."""
        with self._temp_lock:
            if self._temp is None:
                from app.store import ConversationStore  # noqa: PLC0415 - SQLAlchemy: not at start-up

                self._temp = ConversationStore(in_memory=True)
            return self._temp

    def close_temp(self) -> None:
        """Free every temporary chat's rows (the window is quitting)."""
        with self._temp_lock:
            temp, self._temp = self._temp, None
        if temp is not None:
            temp.close()

    # --- what a chat is ----------------------------------------------------------------------
    @property
    def target_id(self) -> str | None:
        """The chat the composer writes to: the one on screen, or the draft."""
        return self.current_id or (self.draft.id if self.draft else None)

    def store_for(self, chat_id: str) -> Any:
        row = self.model.chat(chat_id)
        if (row is not None and row.temporary) or (self._temp is not None and self._temp.has(chat_id)):
            return self.temp
        return self.store

    def is_temporary(self, chat_id: str | None) -> bool:
        if chat_id is None:
            return False
        if self.draft is not None and self.draft.id == chat_id:
            return self.draft.temporary
        row = self.model.chat(chat_id)
        return bool(row and row.temporary)

    def kind(self, chat_id: str) -> SessionKind:
        if self.is_temporary(chat_id):
            return SessionKind.TEMPORARY
        row = self.model.chat(chat_id)
        return SessionKind.PINNED if row is not None and row.pinned else SessionKind.REGULAR

    def kv_text(self, chat_id: str | None) -> str:
        """The status bar's KV text for this chat: the engine's word if it has spoken (this
        model), else what the chat list knows."""
        if chat_id is None:
            return ""
        if chat_id in self.engine_kv:
            return self.engine_kv[chat_id]
        return chat_figures.kv_text(self.model.chat(chat_id))

    # --- the list ----------------------------------------------------------------------------
    def load(self, db: Path, make_store: Callable[[Path], Any]) -> None:
        def work() -> tuple[Any, list[ChatRow], list[Any]]:
            store = self.store or make_store(db)
            rows = [ChatRow.from_store(r) for r in store.list_conversations()]
            # KV kept in memory by an earlier process is gone: show "none" until told otherwise
            rows = [r if r.kv_state != "memory" else ChatRow(**{**r.__dict__, "kv_state": "none"})
                    for r in rows]
            return store, rows, build_items(rows)

        def done(result: tuple[Any, list[ChatRow], list[Any]]) -> None:
            self.store, rows, items = result
            temps = [r for r in self.model.all_chats() if r.temporary]
            self.model.set_rows(rows + temps, items if not temps else None)
            self.loaded = True
            self.listLoaded.emit()

        def failed(exc: BaseException) -> None:
            log.error("store failed: %s", exc)
            self.listFailed.emit(str(exc))

        self.tasks.run_task(work, done, failed)

    def forget_engine(self) -> None:
        """The engine is being replaced: nothing is open in the next one, no KV is in memory."""
        self.opened.clear()
        self.engine_kv.clear()
        for r in [r for r in self.model.all_chats() if r.kv_state == "memory"]:
            self.model.update(r.id, kv_state="none", kv_bytes=0)   # gone with the old engine

    def cache_cleared(self, pinned: set[str]) -> None:
        for r in self.model.all_chats():
            if not r.pinned and r.kv_state != "none":
                self.model.update(r.id, kv_state="none", kv_bytes=0)
        self.opened = {k: v for k, v in self.opened.items() if k in pinned}

    # --- the chat on screen ------------------------------------------------------------------
    def new(self, temporary: bool = False) -> None:
        """Start a draft; the chat is created when its first message is sent."""
        self.current_id = None
        self.draft = Draft(str(uuid.uuid4()), temporary)
        self.load_seq += 1
        self.draftStarted.emit()

    def create_from_draft(self, title: str, now: Any) -> tuple[str, bool]:
        """The draft's first message is sent: list it (the store follows on the worker)."""
        draft = self.draft or Draft(str(uuid.uuid4()), False)
        self.model.upsert(ChatRow(id=draft.id, title=title, temporary=draft.temporary,
                                  updated_at=now))
        self.current_id, self.draft = draft.id, None
        return draft.id, draft.temporary

    def open(self, chat_id: str) -> bool:
        """Show a chat: `chatOpening` now, `messagesLoaded` when its path is read."""
        row = self.model.chat(chat_id)
        if row is None:
            return False
        self.current_id = chat_id
        self.draft = None
        self.load_seq += 1
        seq = self.load_seq
        self.chatOpening.emit(chat_id)
        store = self.store_for(chat_id)
        query = self.search_query if self.model.searching else ""   # opened from a search hit
        if store is None:
            return True
        item = items_of()

        def work() -> list[Any]:
            store.get_conversation(chat_id)   # a chat that is gone fails here (reported)
            items = [item(m) for m in store.active_path(chat_id)]
            if store is self.store:
                store.mark_opened(chat_id)
            return items

        def done(items: list[Any]) -> None:
            if seq == self.load_seq:
                self.messagesLoaded.emit(chat_id, items, query)

        self.tasks.run_task(work, done, self._fail)
        self.open_in_engine(chat_id)
        return True

    def open_in_engine(self, chat_id: str) -> None:
        """Ask the engine to open the chat's session (a pinned one resumes from disk)."""
        engine = self.engines.engine
        if engine is None or (self.draft is not None and self.draft.id == chat_id):
            return
        kind = self.kind(chat_id)
        if self.opened.get(chat_id) == kind:
            return
        self.opened[chat_id] = kind
        store = self.store_for(chat_id)

        def work() -> Any:
            salt = None
            if store is self.store and store is not None:
                salt = chat_salt(engine, store, chat_id)
            return engine.open(chat_id, kind, salt)

        def failed(exc: BaseException) -> None:
            self.opened.pop(chat_id, None)
            self._fail(exc)

        self.tasks.run_task(work, lambda info: self.apply_info(chat_id, info), failed)

    def apply_info(self, chat_id: str, info: Any) -> None:
        """The engine said where a chat's KV is: the list and the status bar follow."""
        if info is None:
            return
        self.infoReceived.emit(chat_id, info)
        where, nbytes = kv_state_of(info)
        saving = bool(getattr(info, "saving", False))
        self.engine_kv[chat_id] = chat_figures.info_text(info)
        self.kvChanged.emit(chat_id)
        self.model.update(chat_id, kv_state=where, kv_bytes=int(nbytes or 0), saving=saving)
        if saving:
            self._watch_saving(chat_id)

    def _watch_saving(self, chat_id: str) -> None:
        """A background save is in flight: show progress until the engine says it is done."""
        engine, store = self.engines.engine, self.store_for(chat_id)
        if engine is None or chat_id in self._watching:
            return
        self._watching.add(chat_id)

        def work() -> Any:
            info = _wait_saved(engine, chat_id)
            if store is not None and store is self.store:
                store.set_kv_state(chat_id, *kv_state_of(info))
            return info

        def done(info: Any) -> None:
            self._watching.discard(chat_id)
            self.infoReceived.emit(chat_id, info)
            if self.model.chat(chat_id) is not None:
                where, nbytes = kv_state_of(info)
                self.model.update(chat_id, kv_state=where, kv_bytes=nbytes, saving=False)

        def failed(exc: BaseException) -> None:
            self._watching.discard(chat_id)
            self.model.update(chat_id, saving=False)

        self.tasks.run_task(work, done, failed)

    # --- sidebar actions ---------------------------------------------------------------------
    def rename(self, chat_id: str, title: str) -> None:
        store = self.store_for(chat_id)
        if chat_id == self.current_id:
            self.headerChanged.emit()
        if store is not None:
            self.tasks.run_task(lambda: store.rename(chat_id, title), None, self._fail)

    def toggle_pin(self, chat_id: str) -> None:
        row = self.model.chat(chat_id)
        if row is None or row.temporary or self.store is None:
            return
        store, engine = self.store, self.engines.engine
        pin = not row.pinned
        self.model.update(chat_id, pinned=pin, saving=pin and engine is not None)
        self.listChanged.emit()
        if chat_id == self.current_id:
            self.headerChanged.emit()
        if engine is not None:
            self.opened[chat_id] = SessionKind.PINNED if pin else SessionKind.REGULAR

        def work() -> Any:
            store.set_pinned(chat_id, pin)
            if engine is None:
                return None
            try:
                (_pin if pin else _unpin)(engine, store, chat_id)
            except BaseException:
                store.set_pinned(chat_id, not pin)   # the engine did not follow: as it was
                raise
            info = _settled(engine, chat_id)
            if info is not None:
                store.set_kv_state(chat_id, *kv_state_of(info))
            return info

        def done(info: Any) -> None:
            if info is not None:
                self.apply_info(chat_id, info)
            else:
                self.model.update(chat_id, saving=False,
                                  **({} if pin else {"kv_state": "none", "kv_bytes": 0}))

        def failed(exc: BaseException) -> None:
            # As it was; what the engine has open is unknown now: the next send opens it again.
            self.opened.pop(chat_id, None)
            if self.model.chat(chat_id) is not None:
                self.model.update(chat_id, pinned=not pin, saving=False)
                self.listChanged.emit()
                if chat_id == self.current_id:
                    self.headerChanged.emit()
            self._fail(exc)

        self.tasks.run_task(self._in_chat_order(chat_id, work), done, failed)

    def duplicate(self, chat_id: str, upto_message_id: Any = None) -> None:
        """A copy of the chat (up to a message: a branch), listed and opened."""
        store = self.store_for(chat_id)
        if store is None or store is self.temp:
            return
        row = self.model.chat(chat_id)
        title = derived_title(row.title if row else "New chat",
                              (r.title for r in self.model.all_chats()),
                              branch=upto_message_id is not None)

        def done(detail: Any) -> None:
            self.model.upsert(ChatRow.from_store(detail))
            self.openRequested.emit(detail.id)

        self.tasks.run_task(lambda: store.duplicate(chat_id, upto_message_id=upto_message_id,
                                                    title=title), done, self._fail)

    def close_in_engine(self, chat_id: str) -> None:
        """A chat leaves the view: the engine may drop its session (a pinned one stays saved)."""
        engine = self.engines.engine
        if engine is not None and chat_id in self.opened:
            self.opened.pop(chat_id, None)
            self.tasks.run_task(self._in_chat_order(chat_id, lambda: engine.close(chat_id)))

    def discard_temporary(self, chat_id: str) -> None:
        engine = self.engines.engine
        self.model.remove(chat_id)
        if self._temp is not None:
            self._temp.delete(chat_id)
        self.opened.pop(chat_id, None)
        if engine is not None:
            self.tasks.run_task(lambda: engine.close(chat_id), None, self._fail)

    def search(self, text: str) -> None:
        """Rank the chats matching `text` (both stores); the chat on screen stays."""
        query = text.strip()
        self.search_query = query
        if not query:
            self.model.set_search(None)
            self.listChanged.emit()
            return
        store, temp = self.store, self._temp

        def work() -> tuple[list[str], dict[str, str]]:
            hits = []
            if store is not None:
                try:
                    hits.extend(store.search(query, limit=200))
                except Exception as exc:  # noqa: BLE001 - e.g. FTS syntax; show no hits
                    log.info("search failed for %r: %s", query, exc)
            if temp is not None:
                hits.extend(temp.search(query))
            hits.sort(key=lambda h: -h.rank if isinstance(h.rank, (int, float)) else 0)
            ids, snippets = [], {}
            for h in hits:
                if h.conversation_id not in snippets:
                    ids.append(h.conversation_id)
                    snippets[h.conversation_id] = clean_snippet(h.snippet)
            return ids, snippets

        def done(result: tuple[list[str], dict[str, str]]) -> None:
            if self.search_query == query:   # else a newer search is on its way
                self.model.set_search(*result)
                self.listChanged.emit()

        self.tasks.run_task(work, done, self._fail)

    def flip_sibling(self, message_id: Any, delta: int) -> None:
        """Show the message's previous / next alternative (`siblingsLoaded`)."""
        chat_id = self.current_id
        if chat_id is None:
            return
        store = self.store_for(chat_id)
        if store is None:
            return
        seq = self.load_seq
        item = items_of()

        def work() -> list[Any]:
            ids = [s.id for s in store.siblings(message_id)]
            i = ids.index(message_id) + delta
            if not 0 <= i < len(ids):
                return []
            return [item(r) for r in store.select_sibling(ids[i])]

        def done(items: list[Any]) -> None:
            if items and seq == self.load_seq:
                self.siblingsLoaded.emit(items)

        self.tasks.run_task(work, done, self._fail)

    def neighbour(self, chat_id: str) -> str | None:
        """The chat to show after `chat_id` goes: the next one down the list, else the one
        above; never a temporary chat."""
        ids = self.model.visible_chat_ids()
        if chat_id not in ids:
            return None
        i = ids.index(chat_id)
        for cid in ids[i + 1:] + list(reversed(ids[:i])):
            row = self.model.chat(cid)
            if row is not None and not row.temporary:
                return cid
        return None


def _wait_saved(engine: ChatEngine, chat_id: str) -> SessionInfo:
    deadline = time.monotonic() + 600
    info = engine.info(chat_id)
    while info.saving and time.monotonic() < deadline:
        time.sleep(PIN_POLL_S)
        info = engine.info(chat_id)
    return info


def _settled(engine: ChatEngine, chat_id: str) -> SessionInfo | None:
    """The session's info once its save is done; None when the chat was closed meanwhile (a
    pinned one's save goes on without it)."""
    try:
        return _wait_saved(engine, chat_id)
    except SessionNotOpen:
        return None


def _pin(engine: ChatEngine, store: Any, chat_id: str) -> None:
    """Pins the chat's session (saved in the background). A chat the engine has not open (not
    opened since launch, or closed) is opened first, with its salt, as it is on disk."""
    try:
        engine.pin(chat_id)
    except SessionNotOpen:
        engine.open(chat_id, SessionKind.PINNED, chat_salt(engine, store, chat_id))
        engine.pin(chat_id)      # saved now: a session opened as new has nothing on disk yet


def _unpin(engine: ChatEngine, store: Any, chat_id: str) -> None:
    """Unpins the chat's session: what was saved for it goes. A chat the engine has not open
    is opened as regular, which unpins the session saved on disk."""
    try:
        engine.unpin(chat_id)
    except SessionNotOpen:
        engine.open(chat_id, SessionKind.REGULAR, chat_salt(engine, store, chat_id))


def clean_snippet(s: str) -> str:
    """One line; the «» around matched words stay (the sidebar highlights them)."""
    for mark in ("<b>", "</b>"):
        s = (s or "").replace(mark, "")
    return " ".join((s or "").split())
