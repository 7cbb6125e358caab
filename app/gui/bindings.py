"""What the window shows, driven by the controllers' signals.

`ChatBinding` subscribes to `ChatsController` and `RepliesController`: the messages of the chat
on screen, the reply streaming into it, the queued sends' bubbles, the status bar's figures. It
holds no chat state of its own beyond `last_figures` (what the status bar shows of the chat on
screen). `EngineBinding` subscribes to `EngineController`: the banner, the provider, the model
picker, the composer while a model loads."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QTimer

from engine.base import paths

from . import accessibility as a11y
from . import chat_figures, theme
from .error_words import in_words
from .lifecycle import freeze_heap
from .remote_config import temporary_notice
from .widgets.chat_area import TEMP_NOTICE
from .controllers.replies import QueuedSend
from .markdown_render import render, render_message, render_plain
from .widgets.chat_view import MessageItem

if TYPE_CHECKING:
    from engine.api import ChatEngine

    from .main_window import MainWindow

log = logging.getLogger(__name__)


class ChatBinding:
    def __init__(self, window: "MainWindow"):
        self.w = window
        self.last_figures: dict | None = None
        c, r = window.chats, window.replies
        c.draftStarted.connect(self.on_draft)
        c.chatOpening.connect(self.on_opening)
        c.messagesLoaded.connect(self.on_messages)
        c.siblingsLoaded.connect(self.on_siblings)
        c.kvChanged.connect(self.on_kv)
        c.infoReceived.connect(window.save_notice.note)   # a save error stays on its chat
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
        self.prefill_tick = QTimer(window)
        self.prefill_tick.setInterval(1000)
        self.prefill_tick.timeout.connect(self.tick_prefill)

    def _current(self, chat_id: str) -> bool:
        return chat_id == self.w.chats.current_id

    def show_messages(self, has_messages: bool) -> None:
        self.w.area.show_messages(has_messages)

    # --- the chat on screen ------------------------------------------------------------------
    def on_draft(self) -> None:
        w = self.w
        w.sidebar.select(None)
        w.chat_view.clear()
        self.show_messages(False)
        self.last_figures = None
        w.status.show_chat(None, w.engines.context_window)

    def on_opening(self, chat_id: str) -> None:
        w = self.w
        w.sidebar.select(chat_id)
        w.chat_view.clear()
        self.last_figures = None   # none of the previous chat's figures stay on screen
        w.status.show_chat(None, w.engines.context_window, w.chats.kv_text(chat_id))

    def on_messages(self, chat_id: str, items: list[MessageItem], query: str) -> None:
        w, stream = self.w, self.w.replies.stream
        self.show_messages(bool(items))
        w.chat_view.set_messages(items)
        live = w.replies.streaming(chat_id)
        if live and stream is not None:
            w.chat_view.begin_stream()
            w.chat_view.append_stream(stream.text)
        if w.replies.queue.has(chat_id):
            self.show_messages(True)
            self.show_bubbles(chat_id)
        if query:
            w.search_jump.jump_when_loaded(query)
        figs = chat_figures.last_figures(items)
        self.last_figures = figs
        w.status.show_chat(figs, chat_figures.window(w.engines.engine, figs), w.chats.kv_text(chat_id))
        if live and stream is not None:
            w.status.set_live(stream.live)
        w.chatLoaded.emit(chat_id)

    def on_siblings(self, items: list[MessageItem]) -> None:
        cache, th = self.w.chat_view.rendered_cache(), theme.current()
        for it in items:
            it.rendered = cache.get(it.id) or render_message(it.role, it.content, th)
        self.w.chat_view.sync(items)
        figs = chat_figures.last_figures(items)
        self.last_figures = figs
        self.w.status.set_figures(figs)

    def on_kv(self, chat_id: str) -> None:
        if self._current(chat_id):
            self.w.status.set_kv(self.w.chats.kv_text(chat_id))

    # --- a reply -----------------------------------------------------------------------------
    def on_turn_started(self, chat_id: str, req: Any, remove_id: Any) -> None:
        view = self.w.chat_view
        if chat_id != self.w.chats.target_id:   # a queued send runs in a chat not on screen
            return
        self.show_messages(True)
        self.hide_bubbles()   # shown again below the new turn
        if req.mode in ("edit", "regenerate") and remove_id:
            view.truncate_after(remove_id, keep=False)
        if req.mode in ("send", "edit"):
            view.append_message(MessageItem(
                id="pending:user", role="user", content=req.text,
                rendered=render_plain(req.text), parent_id=req.parent_id))
        view.scroll_to_bottom()
        view.begin_stream()
        self.show_bubbles(chat_id)
        stream = self.w.replies.stream
        if stream is not None:
            self.w.status.set_live(stream.live)   # the previous turn's figures are not this turn's

    def on_user_stored(self, chat_id: str, item: MessageItem) -> None:
        if self._current(chat_id):
            self.w.chat_view.replace_message("pending:user", item)

    def on_chunk(self, chat_id: str, text: str) -> None:
        stream = self.w.replies.stream
        if self._current(chat_id) and stream is not None:
            self.w.chat_view.append_stream(text)
            self.w.chat_view.set_stream_meta(stream.live.summary())
            self.w.status.set_live(stream.live)

    def on_prefill(self, chat_id: str, done: int, total: int) -> None:
        stream = self.w.replies.stream
        if self._current(chat_id) and stream is not None:
            self.w.chat_view.set_stream_prefill(done, total, stream.live.summary())
            self.w.status.set_live(stream.live)
            if not self.prefill_tick.isActive():
                self.prefill_tick.start()

    def tick_prefill(self) -> None:
        """Once a second while the prompt of the reply on screen is read: the time left, again."""
        stream = self.w.replies.stream
        if stream is None or stream.stopped or not stream.live.prefilling or not self._current(stream.chat_id):
            self.prefill_tick.stop()
            return
        done, total = stream.live.prefill or (0, 0)
        self.w.chat_view.set_stream_prefill(done, total, stream.live.summary())
        self.w.status.set_live(stream.live)

    def on_stopped(self, chat_id: str, text: str) -> None:
        if self._current(chat_id):
            self.w.chat_view.end_stream(MessageItem(
                id="pending:assistant", role="assistant", content=text,
                rendered=render(text, theme.current()), figures={"finish_reason": "cancelled"}))

    def on_failed(self, chat_id: str, text: str, error: str) -> None:
        if self._current(chat_id):
            self.w.chat_view.end_stream(MessageItem(
                id="pending:assistant", role="assistant", content=text,
                rendered=render(text, theme.current()),
                error=f"Could not generate a reply: {in_words(error)}"))
        self.w.status.set_message(f"Generation failed: {in_words(error)}")

    def on_finished(self, chat_id: str, out: Any, a_item: MessageItem | None, stopped: bool) -> None:
        w, view = self.w, self.w.chat_view
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
        w.status.show_chat(out.figures, chat_figures.window(w.engines.engine, out.figures),
                           w.chats.kv_text(chat_id))
        w.status.set_message(f"Generation failed: {in_words(out.error)}" if out.error is not None else out.note)
        w.update_header()

    def on_reply_ended(self, chat_id: str, text: str, error: str | None, stopped: bool) -> None:
        """One announcement per reply (the stream itself is not read out token by token)."""
        row = self.w.chats.model.chat(chat_id)
        elsewhere = None if self._current(chat_id) else (row.title if row is not None else "")
        a11y.announce(self.w.chat_view, a11y.reply_announcement(
            text, error=in_words(error) if error else error, stopped=stopped, elsewhere=elsewhere),
            assertive=bool(error))
        self.w.replyFinished.emit(chat_id)

    # --- queued sends ------------------------------------------------------------------------
    def show_queued(self, q: QueuedSend) -> None:
        """A queued message's bubble, marked “Queued”, at the end of its chat's view."""
        w = self.w
        stream = w.replies.stream
        running = w.chats.model.chat(stream.chat_id) if stream is not None else None
        self.show_messages(True)
        item = MessageItem(id=q.bubble_id, role="user", content=q.text,
                           rendered=render_plain(q.text))
        item.extra["queued"] = (f"Queued — sends when the reply in “{running.title[:30]}” is done"
                                if running is not None else "Queued")
        w.chat_view.append_message(item)
        w.chat_view.scroll_to_bottom()

    def hide_bubbles(self) -> None:
        """Take the queued bubbles off the view (they are always the last ones)."""
        view = self.w.chat_view
        ids = [mw.item.id for mw in view.widgets if mw.item.extra.get("queued")]
        if ids:
            view.truncate_after(ids[0], keep=False)

    def show_bubbles(self, chat_id: str) -> None:
        """The chat's queued messages at the end of its view (after a reload or a new turn)."""
        shown = set(self.w.chat_view.message_ids())
        for q in self.w.replies.queue.of(chat_id):
            if q.bubble_id not in shown:
                self.show_queued(q)

    def on_dequeued(self, q: QueuedSend) -> None:
        view = self.w.chat_view
        if self._current(q.chat_id) and view.widget_for(q.bubble_id) is not None:
            view.truncate_after(q.bubble_id, keep=False)


class EngineBinding:
    def __init__(self, window: "MainWindow"):
        self.w = window
        e = window.engines
        e.loadStarted.connect(self._on_engine_loading)
        e.progress.connect(lambda f, m: window.banner.show_progress(m or "Preparing the model…", f))
        e.ready.connect(self._on_engine_ready)
        e.failed.connect(self._on_engine_failed)
        e.modelsListed.connect(self._fill_models)
        e.cacheCleared.connect(self._on_cache_cleared)

    def _on_engine_loading(self) -> None:
        w = self.w
        w.banner.show_progress("Preparing the model…", -1)
        w.composer.set_ready(False, "Loading the model…")
        w.status.set_message("Loading the model…")
        w.chats.forget_engine()
        w.update_composer()
        w.update_model_notice()

    def _on_engine_ready(self, engine: ChatEngine) -> None:
        w = self.w
        w.banner.hide()
        w.empty.set_no_model(None)
        fallback = w.engines.provider_fallback
        gpu = w.backend.gpu_presence() if fallback else "none"
        w.status.set_provider(engine.provider, fallback, gpu)
        if fallback:   # the whole reason, for a bug report; the status bar says it in words
            log.log(logging.WARNING if gpu != "none" else logging.INFO, "GPU provider not used: %s", fallback)
        w.status.show_chat(w.last_figures, w.engines.context_window, w.chats.kv_text(w.current_id))
        w.status.set_message("")
        w.chat_view.model_name = w.engines.model_name or "Assistant"
        w.temp_notice.setText(temporary_notice(engine, TEMP_NOTICE))
        for mw in w.chat_view.widgets:
            mw.set_model_name(w.chat_view.model_name)
        w.update_composer()
        w.engines.retry_deletes(w.store, w.deletions.is_pending)
        if w.api_server_started is not None:   # it serves the new engine now
            w.api_server_started.engine_replaced()
        w.restore_api_server()
        w.update_model_notice()
        if w.current_id is not None:
            w.chats.open_in_engine(w.current_id)
        w.refresh_models()
        w.replies.run_next()   # messages queued while the model was (re)loading
        freeze_heap()
        w.engineReady.emit()

    def _on_engine_failed(self, error: str) -> None:
        w = self.w
        w.banner.show_error(f"The model could not be loaded: {in_words(error)}")
        w.empty.set_no_model("The model could not be loaded.")
        w.status.set_message("No model loaded")
        w.update_composer()

    def _fill_models(self, names: list[str], remotes: list[Any]) -> None:
        w = self.w
        local = [(f"{paths.DEFAULT_MODEL_NAME} (default)", "", "")] + \
            [(n, n, "") for n in names if n != paths.DEFAULT_MODEL_NAME]
        servers = [(f"{r.endpoint.label} (remote)", r.choice,
                    f"{r.endpoint.base_url} · model {r.endpoint.model}") for r in remotes]
        w.header.show_models(local + servers, w.settings.model)
        w.update_model_notice()

    def _on_cache_cleared(self, pinned: set[str]) -> None:
        w = self.w
        w.chats.cache_cleared(pinned)
        w.status.set_message("Cache cleared (pinned chats keep theirs)")
