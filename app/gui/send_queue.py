"""Messages sent while another chat's reply is generating: shown at once, marked “Queued”,
and sent in order when the running reply ends (the engine runs one generation at a time)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from . import theme
from .chat_view import MessageItem
from .markdown_render import render
from .sidebar_model import ChatRow


@dataclass
class QueuedSend:
    chat_id: str
    text: str
    bubble_id: str      # the "pending:queued:…" bubble that shows it meanwhile


class SendQueue:
    """Owned by the main window; `items` is the queue, oldest first."""

    def __init__(self, window: Any):
        self.w = window
        self.items: list[QueuedSend] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> QueuedSend:
        return self.items[i]

    def has(self, chat_id: str | None) -> bool:
        return any(q.chat_id == chat_id for q in self.items)

    def add(self, text: str) -> QueuedSend:
        """Queue `text` for the chat on screen (a new chat is created now, so it is listed)."""
        w = self.w
        if w.current_id is None:
            self._create_draft(text)
        q = QueuedSend(w.current_id, text, f"pending:queued:{uuid.uuid4().hex[:8]}")
        self.items.append(q)
        self._show(q)
        w.chat_model.update(q.chat_id, busy=True)
        w._update_composer()  # noqa: SLF001
        return q

    def _create_draft(self, text: str) -> None:
        from .main_window import Draft, _title_from, _utcnow  # noqa: PLC0415

        w = self.w
        draft = w.draft or Draft(str(uuid.uuid4()), False)
        w.chat_model.upsert(ChatRow(id=draft.id, title=_title_from(text),
                                    temporary=draft.temporary, updated_at=_utcnow()))
        w.current_id, w.draft = draft.id, None
        model = getattr(w.engine, "model_name", "")
        prompt = w.settings.system_prompt
        if draft.temporary:
            w.temp.create_conversation(id=draft.id, system_prompt=prompt, model_id=model)
        elif w.store is not None:
            store = w.store
            w.tasks.run_task(lambda: store.create_conversation(
                id=draft.id, system_prompt=prompt, model_id=model), None, w._report_error)  # noqa: SLF001
            w.settings.last_chat_id = draft.id
        w.sidebar.select(draft.id)
        w._update_header()  # noqa: SLF001

    def _show(self, q: QueuedSend) -> None:
        w = self.w
        running = w.chat_model.chat(w.stream.chat_id) if w.stream is not None else None
        w._show_messages(True)  # noqa: SLF001
        item = MessageItem(id=q.bubble_id, role="user", content=q.text,
                           rendered=render(q.text, theme.current()))
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
        for q in self.items:
            if q.chat_id == chat_id and q.bubble_id not in shown:
                self._show(q)

    def run_next(self) -> None:
        """No reply is running: send the oldest queued message, in its own chat."""
        w = self.w
        if w.stream is not None or not self.items or w.engine is None or w.shutdown_started:
            return
        q = self.items.pop(0)
        if w.chat_model.chat(q.chat_id) is None or q.chat_id in w.pending_deletes:
            self.run_next()   # deleted or closed meanwhile: nothing to send it to
            return
        if q.chat_id == w.current_id and w.chat_view.widget_for(q.bubble_id) is not None:
            w.chat_view.truncate_after(q.bubble_id, keep=False)
        w._start_reply(q.chat_id, mode="send", text=q.text)  # noqa: SLF001
