"""What the window shows, driven by the controllers' signals.

`ChatBinding` subscribes to `ChatsController` and `RepliesController`: the messages of the chat
on screen, the reply streaming into it, the queued sends' bubbles, the status bar's figures. It
holds no chat state of its own beyond `last_figures` (what the status bar shows of the chat on
screen). `EngineBinding` subscribes to `EngineController`: the banner, the provider, the model
picker, the composer while a model loads."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from PySide6.QtCore import QTimer

from engine.base import paths

from . import accessibility as a11y
from . import theme
from .backend import Backend
from .controllers.chats import ChatsController
from .controllers.deletions import Deletions
from .controllers.engine import EngineController
from .controllers.replies import QueuedSend, RepliesController
from .error_words import in_words
from .lifecycle import freeze_heap
from .models import chat_figures
from .models.message import MessageItem
from .remote_config import temporary_notice
from .settings import Settings
from .widgets.chat_area import TEMP_NOTICE, ChatArea
from .widgets.sidebar import Sidebar
from .widgets.status import StatusBar

if TYPE_CHECKING:
    from engine.api import ChatEngine

log = logging.getLogger(__name__)


class ChatBinding:
    def __init__(self, chats: ChatsController, replies: RepliesController, engines: EngineController,
                 area: ChatArea, sidebar: Sidebar, status: StatusBar, *,
                 loaded: Callable[[str], Any], replied: Callable[[str], Any], header: Callable[[], Any]):
        """`loaded(chat_id)`: a chat's messages are on screen; `replied(chat_id)`: a reply ended;
        `header()`: show the chat on screen's title and state again."""
        self.chats, self.replies, self.engines = chats, replies, engines
        self.area, self.view, self.sidebar, self.status = area, area.chat_view, sidebar, status
        self.loaded, self.replied, self.header = loaded, replied, header
        self.last_figures: dict | None = None
        c, r = chats, replies
        c.draftStarted.connect(self.on_draft)
        c.chatOpening.connect(self.on_opening)
        c.messagesLoaded.connect(self.on_messages)
        c.siblingsLoaded.connect(self.on_siblings)
        c.kvChanged.connect(self.on_kv)
        c.infoReceived.connect(area.save_notice.note)   # a save error stays on its chat
        r.turnStarted.connect(self.on_turn_started)
        r.userStored.connect(self.on_user_stored)
        r.chunk.connect(self.on_chunk)
        r.prefill.connect(self.on_prefill)
        r.stopped.connect(self.on_stopped)
        r.turnFailed.connect(self.on_failed)
        r.turnFinished.connect(self.on_finished)
        r.replyEnded.connect(self.on_reply_ended)
        r.queued.connect(self.show_queued)
        r.dequeued.connect(self.on_dequeued)
        # the time left while a prompt is read counts down between the engine's reports
        self.prefill_tick = QTimer(area)
        self.prefill_tick.setInterval(1000)
        self.prefill_tick.timeout.connect(self.tick_prefill)

    def _current(self, chat_id: str) -> bool:
        return chat_id == self.chats.current_id

    def show_messages(self, has_messages: bool) -> None:
        self.area.show_messages(has_messages)

    # --- the chat on screen ------------------------------------------------------------------
    def on_draft(self) -> None:
        self.sidebar.select(None)
        self.view.clear()
        self.show_messages(False)
        self.last_figures = None
        self.status.show_chat(None, self.engines.context_window)

    def on_opening(self, chat_id: str) -> None:
        self.sidebar.select(chat_id)
        self.view.clear()
        self.last_figures = None   # none of the previous chat's figures stay on screen
        self.status.show_chat(None, self.engines.context_window, self.chats.kv_text(chat_id))

    def on_messages(self, chat_id: str, items: list[MessageItem], query: str) -> None:
        stream = self.replies.stream
        self.show_messages(bool(items))
        self.view.set_messages(items)
        live = self.replies.streaming(chat_id)
        if live and stream is not None:
            self.view.begin_stream()
            self.view.append_stream(stream.text)
        if self.replies.queue.has(chat_id):
            self.show_messages(True)
            self.show_bubbles(chat_id)
        if query:
            self.area.search_jump.jump_when_loaded(query)
        figs = chat_figures.last_figures(items)
        self.last_figures = figs
        self.status.show_chat(figs, chat_figures.window(self.engines.engine, figs), self.chats.kv_text(chat_id))
        if live and stream is not None:
            self.status.set_live(stream.live)
        self.loaded(chat_id)

    def on_siblings(self, items: list[MessageItem]) -> None:
        cache, th = self.view.rendered_cache(), theme.current()
        for it in items:
            cached = cache.get(it.id)
            if cached is not None:
                it.rendered = cached
            else:
                it.render(th)
        self.view.sync(items)
        figs = chat_figures.last_figures(items)
        self.last_figures = figs
        self.status.set_figures(figs)

    def on_kv(self, chat_id: str) -> None:
        if self._current(chat_id):
            self.status.set_kv(self.chats.kv_text(chat_id))

    # --- a reply -----------------------------------------------------------------------------
    def on_turn_started(self, chat_id: str, req: Any, remove_id: Any) -> None:
        view = self.view
        if chat_id != self.chats.target_id:   # a queued send runs in a chat not on screen
            return
        self.show_messages(True)
        self.hide_bubbles()   # shown again below the new turn
        if req.mode in ("edit", "regenerate") and remove_id:
            view.truncate_after(remove_id, keep=False)
        if req.mode in ("send", "edit"):
            view.append_message(MessageItem.shown("pending:user", "user", req.text, theme.current(),
                                                  parent_id=req.parent_id))
        view.scroll_to_bottom()
        view.begin_stream()
        self.show_bubbles(chat_id)
        stream = self.replies.stream
        if stream is not None:
            self.status.set_live(stream.live)   # the previous turn's figures are not this turn's

    def on_user_stored(self, chat_id: str, item: MessageItem) -> None:
        if self._current(chat_id):
            self.view.replace_message("pending:user", item)

    def on_chunk(self, chat_id: str, text: str) -> None:
        stream = self.replies.stream
        if self._current(chat_id) and stream is not None:
            self.view.append_stream(text)
            self.view.set_stream_meta(stream.live.summary())
            self.status.set_live(stream.live)

    def on_prefill(self, chat_id: str, done: int, total: int) -> None:
        stream = self.replies.stream
        if self._current(chat_id) and stream is not None:
            self.view.set_stream_prefill(done, total, stream.live.summary())
            self.status.set_live(stream.live)
            if not self.prefill_tick.isActive():
                self.prefill_tick.start()

    def tick_prefill(self) -> None:
        """Once a second while the prompt of the reply on screen is read: the time left, again."""
        stream = self.replies.stream
        if stream is None or stream.stopped or not stream.live.prefilling or not self._current(stream.chat_id):
            self.prefill_tick.stop()
            return
        done, total = stream.live.prefill or (0, 0)
        self.view.set_stream_prefill(done, total, stream.live.summary())
        self.status.set_live(stream.live)

    def on_stopped(self, chat_id: str, text: str) -> None:
        if self._current(chat_id):
            self.view.end_stream(MessageItem.shown("pending:assistant", "assistant", text, theme.current(),
                                                   figures={"finish_reason": "cancelled"}))

    def on_failed(self, chat_id: str, text: str, error: str) -> None:
        if self._current(chat_id):
            self.view.end_stream(MessageItem.shown("pending:assistant", "assistant", text, theme.current(),
                                                   error=f"Could not generate a reply: {in_words(error)}"))
        self.status.set_message(f"Generation failed: {in_words(error)}")

    def on_finished(self, chat_id: str, out: Any, a_item: MessageItem | None, stopped: bool) -> None:
        view = self.view
        if not self._current(chat_id):
            return
        items = view.items_for(out.rows, a_item)
        self.hide_bubbles()
        if stopped or view.message_ids() != [i.id for i in items][:-1] + ["pending:assistant"]:
            view.end_stream()
        else:
            view.end_stream(items[-1] if items else None)
        view.sync(items)
        self.show_bubbles(chat_id)
        self.last_figures = out.figures
        self.status.show_chat(out.figures, chat_figures.window(self.engines.engine, out.figures),
                           self.chats.kv_text(chat_id))
        self.status.set_message(f"Generation failed: {in_words(out.error)}" if out.error is not None else out.note)
        self.header()

    def on_reply_ended(self, chat_id: str, text: str, error: str | None, stopped: bool) -> None:
        """One announcement per reply (the stream itself is not read out token by token)."""
        row = self.chats.model.chat(chat_id)
        elsewhere = None if self._current(chat_id) else (row.title if row is not None else "")
        a11y.announce(self.view, a11y.reply_announcement(
            text, error=in_words(error) if error else error, stopped=stopped, elsewhere=elsewhere),
            assertive=bool(error))
        self.replied(chat_id)

    # --- queued sends ------------------------------------------------------------------------
    def show_queued(self, q: QueuedSend) -> None:
        """A queued message's bubble, marked “Queued”, at the end of its chat's view."""
        stream = self.replies.stream
        running = self.chats.model.chat(stream.chat_id) if stream is not None else None
        self.show_messages(True)
        item = MessageItem.shown(q.bubble_id, "user", q.text, theme.current())
        item.extra["queued"] = (f"Queued — sends when the reply in “{running.title[:30]}” is done"
                                if running is not None else "Queued")
        self.view.append_message(item)
        self.view.scroll_to_bottom()

    def hide_bubbles(self) -> None:
        """Take the queued bubbles off the view (they are always the last ones)."""
        view = self.view
        ids = [mw.item.id for mw in view.widgets if mw.item.extra.get("queued")]
        if ids:
            view.truncate_after(ids[0], keep=False)

    def show_bubbles(self, chat_id: str) -> None:
        """The chat's queued messages at the end of its view (after a reload or a new turn)."""
        shown = set(self.view.message_ids())
        for q in self.replies.queue.of(chat_id):
            if q.bubble_id not in shown:
                self.show_queued(q)

    def on_dequeued(self, q: QueuedSend) -> None:
        view = self.view
        if self._current(q.chat_id) and view.widget_for(q.bubble_id) is not None:
            view.truncate_after(q.bubble_id, keep=False)


class EngineBinding:
    def __init__(self, engines: EngineController, chats: ChatsController, deletions: Deletions,
                 replies: RepliesController, area: ChatArea, status: StatusBar, backend: Backend, *,
                 settings: Callable[[], Settings], figures: Callable[[], dict | None],
                 composer: Callable[[], Any], model_notice: Callable[[], Any], api: Callable[[], Any],
                 refresh_models: Callable[[], Any], ready: Callable[[], Any]):
        """`figures()`: the chat on screen's last figures; `composer()`, `model_notice()`: show
        them again; `api()`: the API server serves the new engine (started if it was on);
        `ready()`: the engine is ready and everything above is done."""
        self.engines, self.chats, self.deletions, self.replies = engines, chats, deletions, replies
        self.area, self.status, self.backend = area, status, backend
        self.settings, self.figures, self.composer, self.model_notice = settings, figures, composer, model_notice
        self.api, self.refresh_models, self.ready = api, refresh_models, ready
        e = engines
        e.loadStarted.connect(self._on_engine_loading)
        e.progress.connect(lambda f, m: area.banner.show_progress(m or "Preparing the model…", f))
        e.ready.connect(self._on_engine_ready)
        e.failed.connect(self._on_engine_failed)
        e.modelsListed.connect(self._fill_models)
        e.cacheCleared.connect(self._on_cache_cleared)

    def _on_engine_loading(self) -> None:
        self.area.banner.show_progress("Preparing the model…", -1)
        self.area.composer.set_ready(False, "Loading the model…")
        self.status.set_message("Loading the model…")
        self.chats.forget_engine()
        self.composer()
        self.model_notice()

    def _on_engine_ready(self, engine: ChatEngine) -> None:
        area, status, chats, view = self.area, self.status, self.chats, self.area.chat_view
        area.banner.hide()
        area.empty.set_no_model(None)
        fallback = self.engines.provider_fallback
        gpu = self.backend.gpu_presence() if fallback else "none"
        status.set_provider(engine.provider, fallback, gpu)
        if fallback:   # the whole reason, for a bug report; the status bar says it in words
            log.log(logging.WARNING if gpu != "none" else logging.INFO, "GPU provider not used: %s", fallback)
        status.show_chat(self.figures(), self.engines.context_window, chats.kv_text(chats.current_id))
        status.set_message("")
        view.model_name = self.engines.model_name or "Assistant"
        area.temp_notice.setText(temporary_notice(engine, TEMP_NOTICE))
        for mw in view.widgets:
            mw.set_model_name(view.model_name)
        self.composer()
        self.engines.retry_deletes(chats.store, self.deletions.is_pending)
        self.api()
        self.model_notice()
        if chats.current_id is not None:
            chats.open_in_engine(chats.current_id)
        self.refresh_models()
        self.replies.run_next()   # messages queued while the model was (re)loading
        freeze_heap()
        self.ready()

    def _on_engine_failed(self, error: str) -> None:
        self.area.banner.show_error(f"The model could not be loaded: {in_words(error)}")
        self.area.empty.set_no_model("The model could not be loaded.")
        self.status.set_message("No model loaded")
        self.composer()

    def _fill_models(self, names: list[str], remotes: list[Any]) -> None:
        local = [(f"{paths.DEFAULT_MODEL_NAME} (default)", "", "")] + \
            [(n, n, "") for n in names if n != paths.DEFAULT_MODEL_NAME]
        servers = [(f"{r.endpoint.label} (remote)", r.choice,
                    f"{r.endpoint.base_url} · model {r.endpoint.model}") for r in remotes]
        self.area.header.show_models(local + servers, self.settings().model)
        self.model_notice()

    def _on_cache_cleared(self, pinned: set[str]) -> None:
        self.chats.cache_cleared(pinned)
        self.status.set_message("Cache cleared (pinned chats keep theirs)")
