"""Replies: send, regenerate, edit, stop; the reply streaming now (`stream`) and the sends waiting
for it (`queue`). A turn runs as `app.chat.turn.run_turn` on a `GeneratorWorker`; what happens
on screen is the subscribers' business (signals)."""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from PySide6.QtCore import QObject, Signal

from app.store.titles import chat_title

from ...chat.turn import Chunk, Prefill, ToolAsked, ToolRan, TurnOutcome, TurnRequest, UserSaved, run_turn
from ...tools.toolbox import Toolbox
from ..error_words import in_words
from ..settings import Settings
from ..tasks import GeneratorWorker, TaskRunner
from ..models.message import items_of
from ..models.turn_figures import LiveTurn
from .chats import ChatsController, Draft
from .deletions import Deletions
from .engine import EngineController

log = logging.getLogger(__name__)


@dataclass
class StreamState:
    """The reply being written: its chat, its worker, its text so far."""
    chat_id: str
    worker: GeneratorWorker
    text: str = ""
    stopped: bool = False           # Stop pressed: the UI has already moved on
    after_done: list[Callable[[], None]] = field(default_factory=list)
    live: LiveTurn = field(default_factory=LiveTurn)   # this turn's figures so far


@dataclass
class QueuedSend:
    chat_id: str
    text: str
    bubble_id: str      # the "pending:queued:…" bubble that shows it meanwhile


class SendQueue:
    """Messages sent while another chat's reply is generating (the engine runs one generation
    at a time): sent in order when the running reply ends. `items` is the queue, oldest first."""

    def __init__(self) -> None:
        self.items: list[QueuedSend] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> QueuedSend:
        return self.items[i]

    def has(self, chat_id: str | None) -> bool:
        return any(q.chat_id == chat_id for q in self.items)

    def of(self, chat_id: str) -> list[QueuedSend]:
        return [q for q in self.items if q.chat_id == chat_id]


class RepliesController(QObject):
    chatCreated = Signal(str)               # a draft became a listed chat
    turnStarted = Signal(str, object, object)   # chat id, TurnRequest, the id it replaces
    userStored = Signal(str, object)        # chat id, the user message's view item
    chunk = Signal(str, str)                # chat id, text
    prefill = Signal(str, int, int)         # chat id, done, total
    stopped = Signal(str, str)              # chat id, the partial text
    turnFailed = Signal(str, str, str)      # chat id, the partial text, why
    turnFinished = Signal(str, object, object, bool)   # chat id, TurnOutcome, reply item, stopped
    replyEnded = Signal(str, str, object, bool)        # chat id, text, error (or None), stopped
    queued = Signal(object)                 # a QueuedSend (show its bubble)
    dequeued = Signal(object)               # a QueuedSend about to be sent (drop its bubble)
    composerChanged = Signal()              # what the composer offers may have changed
    toolAsked = Signal(str, object)         # chat id, an app.tools.toolbox.Approval (the turn waits)
    toolRan = Signal(str, object)           # chat id, the call's record (as stored with the reply)

    def __init__(self, chats: ChatsController, engines: EngineController, deletions: Deletions,
                 settings: Callable[[], Settings], tasks: TaskRunner,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.chats, self.engines, self.deletions, self.settings = chats, engines, deletions, settings
        self.tasks = tasks
        self.stream_runner = TaskRunner(max_threads=1, parent=self)   # the token stream
        self.stream: StreamState | None = None
        self.queue = SendQueue()
        self.closed = False     # quitting: nothing more is sent
        # The tools a turn offers its model (None: none); the window sets it (ToolsController).
        self.toolbox: Callable[[], Toolbox | None] = lambda: None

    def streaming(self, chat_id: str | None) -> bool:
        """A reply is being written (and shown) in this chat."""
        s = self.stream
        return s is not None and not s.stopped and s.chat_id == chat_id

    # --- what the user asks for --------------------------------------------------------------
    def send(self, text: str) -> None:
        if self.engines.engine is None:
            return
        target = self.chats.target_id
        if self.stream is not None:
            if not self.stream.stopped:
                if self.stream.chat_id != target:
                    self.enqueue(text)   # another chat is generating: wait for it, visibly
                return
            self.stream.after_done.append(lambda: self.send(text))  # previous reply winding down
            return
        if self.queue.has(target):
            self.enqueue(text)   # keep this chat's order
            return
        if self.chats.current_id is None:
            chat_id, _ = self._create(text, store_now=False)
            self.start(chat_id, mode="send", text=text, create=True)
            return
        self.start(self.chats.current_id, mode="send", text=text)

    def regenerate(self, item: Any) -> None:
        """A new reply in place of `item` (an assistant message on screen)."""
        if self.chats.current_id is None or self.stream is not None:
            return
        if item is None or item.role != "assistant":
            return
        self.start(self.chats.current_id, mode="regenerate", parent_id=item.parent_id,
                   remove_id=item.id)

    def edit(self, item: Any, text: str) -> None:
        """`text` in place of `item` (a user message on screen), and a new reply to it."""
        if self.chats.current_id is None or self.stream is not None:
            return
        if item is None or item.role != "user":
            return
        self.start(self.chats.current_id, mode="edit", text=text, parent_id=item.parent_id,
                   remove_id=item.id)

    def stop(self) -> None:
        """Stop at once: the UI is released now; the worker saves the partial reply."""
        state = self.stream
        if state is None or state.stopped:
            return
        state.worker.cancel()
        state.stopped = True
        self.stopped.emit(state.chat_id, state.text)
        self.chats.model.update(state.chat_id, busy=False)
        self.composerChanged.emit()

    # --- the queue ---------------------------------------------------------------------------
    def enqueue(self, text: str) -> QueuedSend:
        """Queue `text` for the chat on screen (a new chat is created now, so it is listed)."""
        if self.chats.current_id is None:
            self._create(text, store_now=True)
        chat_id = self.chats.current_id
        assert chat_id is not None
        q = QueuedSend(chat_id, text, f"pending:queued:{uuid.uuid4().hex[:8]}")
        self.queue.items.append(q)
        self.queued.emit(q)
        self.chats.model.update(q.chat_id, busy=True)
        self.composerChanged.emit()
        return q

    def run_next(self) -> None:
        """No reply is running: send the oldest queued message, in its own chat."""
        if self.stream is not None or not self.queue or self.engines.engine is None or self.closed:
            return
        q = self.queue.items.pop(0)
        if self.chats.model.chat(q.chat_id) is None or self.deletions.is_pending(q.chat_id):
            self.run_next()   # deleted or closed meanwhile: nothing to send it to
            return
        self.dequeued.emit(q)
        self.start(q.chat_id, mode="send", text=q.text)

    def _create(self, text: str, *, store_now: bool) -> tuple[str, bool]:
        """The draft's first message: list the chat (and with `store_now`, store it now)."""
        chats, settings = self.chats, self.settings()
        chat_id, temporary = chats.create_from_draft(chat_title(text), datetime.now(timezone.utc))
        model, prompt = self.engines.model_name, settings.system_prompt
        if not temporary:
            settings.last_chat_id = chat_id
        if store_now and temporary:
            chats.temp.create_conversation(id=chat_id, system_prompt=prompt, model_id=model,
                                           model_choice=self.engines.choice)
        elif store_now and chats.store is not None:
            store, choice = chats.store, self.engines.choice
            self.tasks.run_task(lambda: store.create_conversation(
                id=chat_id, system_prompt=prompt, model_id=model, model_choice=choice), None,
                chats.errorOccurred.emit)
        self.chatCreated.emit(chat_id)
        return chat_id, temporary

    # --- one turn ----------------------------------------------------------------------------
    def start(self, chat_id: str, *, mode: str, text: str = "", parent_id: Any = None,
              remove_id: Any = None, create: bool = False) -> None:
        chats, engine = self.chats, self.engines.engine
        temporary = chats.is_temporary(chat_id)
        store = chats.temp if temporary else chats.store
        if engine is None or store is None:
            return
        kind = chats.kind(chat_id)
        need_open = chats.opened.get(chat_id) != kind
        chats.opened[chat_id] = kind
        settings = self.settings().copy()
        if temporary and create:
            chats.temp.create_conversation(id=chat_id, system_prompt=settings.system_prompt,
                                           model_id=self.engines.model_name,
                                           model_choice=self.engines.choice)
        req = TurnRequest(chat_id=chat_id, mode=mode, settings=settings, text=text,  # type: ignore[arg-type]
                          parent_id=parent_id, kind=kind, create=create, open_session=need_open,
                          temporary=temporary, model_name=self.engines.model_name or None,
                          model_choice=self.engines.choice, tools=self.toolbox())
        item = items_of()    # rows -> view items, rendered on the worker

        def factory(cancel: Any) -> Any:
            gen = run_turn(req, store, engine, cancel)
            try:
                while True:
                    ev = next(gen)
                    yield (ev, item(ev.row)) if isinstance(ev, UserSaved) and ev.row else (ev, None)
            except StopIteration as stop:
                out: TurnOutcome = stop.value
            a_item = item(out.assistant) if out.assistant is not None else None
            if a_item is not None and out.error is not None:
                a_item.error = f"Generation failed: {in_words(out.error)}"
            return out, a_item

        worker = GeneratorWorker(factory, self.stream_runner.pool)
        state = StreamState(chat_id, worker)
        self.stream = state
        # the view changes at once (remove_id: the message replaced); the store follows
        self.turnStarted.emit(chat_id, req, remove_id)
        chats.model.update(chat_id, busy=True)
        worker.yielded.connect(lambda ev: self._on_event(state, *ev))
        worker.finished.connect(lambda res: self._on_done(state, res, None))
        worker.errored.connect(lambda exc: self._on_done(state, None, exc))
        self.composerChanged.emit()
        worker.start()

    def _on_event(self, state: StreamState, ev: Any, item: Any) -> None:
        if state.stopped:
            return
        if isinstance(ev, UserSaved):
            if item is not None:
                self.userStored.emit(state.chat_id, item)
        elif isinstance(ev, Chunk):
            state.text += ev.text
            state.live.on_chunk(ev.tokens)
            self.chunk.emit(state.chat_id, ev.text)
        elif isinstance(ev, Prefill):
            state.live.on_prefill(ev.done, ev.total)
            self.prefill.emit(state.chat_id, ev.done, ev.total)
        elif isinstance(ev, ToolAsked):
            self.toolAsked.emit(state.chat_id, ev.approval)
        elif isinstance(ev, ToolRan):
            self.toolRan.emit(state.chat_id, ev.record)

    def _on_done(self, state: StreamState, result: tuple[TurnOutcome, Any] | None,
                 exc: BaseException | None) -> None:
        if self.stream is state:
            self.stream = None
        chat_id, model = state.chat_id, self.chats.model
        row = model.chat(chat_id)
        error: str | None = None
        if exc is not None and state.stopped and (row is None or self.deletions.is_pending(chat_id)):
            # closed (a temporary chat discarded) or deleted mid-reply: the reply went with its
            # chat, whose rows were gone when the turn wanted to save it. Normal, not a failure.
            log.debug("the reply of a closed chat ended: %r", exc)
            exc = None
        if exc is not None:
            log.error("reply failed: %s", exc)
            error = str(exc)
            self.turnFailed.emit(chat_id, state.text, error)
        elif result is not None:
            out, a_item = result
            if row is not None:
                model.update(chat_id, busy=False, title=out.detail.title or row.title,
                             updated_at=out.detail.updated_at)
            if out.info is not None:
                self.chats.apply_info(chat_id, out.info)
            error = str(out.error) if out.error is not None else None
            if error is not None:
                log.warning("reply failed: %s", error)
            self.turnFinished.emit(chat_id, out, a_item, state.stopped)
        if row is not None:
            model.update(chat_id, busy=False)
        self.composerChanged.emit()
        if self.queue.has(chat_id) and row is not None:
            model.update(chat_id, busy=True)
        self.replyEnded.emit(chat_id, state.text, error, state.stopped)
        for fn in state.after_done:
            fn()
        self.run_next()


__all__ = ["Draft", "QueuedSend", "RepliesController", "SendQueue", "StreamState"]
