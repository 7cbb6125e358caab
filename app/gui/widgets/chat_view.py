"""The chat view: one auto-sized `QTextBrowser` per message in a scroll area.

* HTML is produced off the UI thread when a chat is loaded; message widgets are added in small
  time-boxed batches so a long chat never blocks the event loop.
* A streaming reply accumulates text and is re-rendered by a throttling timer (`RENDER_MS`).
* The view stays pinned to the bottom only while the user is at the bottom.
"""
from __future__ import annotations

import time
from dataclasses import replace  # noqa: F401 - exported
from typing import Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QFrame, QHBoxLayout, QScrollArea, QSizePolicy, QVBoxLayout, QWidget
from PySide6.QtCore import Qt

from .. import theme
from ..models.markdown_render import Rendered
from ..models.message import MessageItem
from .message import RENDER_MS, MessageBrowser, MessageWidget, StreamRenderer  # noqa: F401

BATCH_BUDGET_S = 0.005  # UI time per batch when filling the view with a loaded chat (the
                        # layout, polish and paint of the new widgets follow in the same turn)
AT_BOTTOM_PX = 24


class ChatView(QScrollArea):
    """A vertical list of `MessageWidget`s with the stay-at-bottom rule and a streaming bubble."""

    copyRequested = Signal(str)
    editSubmitted = Signal(object, str)
    regenerateRequested = Signal(object)
    siblingRequested = Signal(object, int)
    branchRequested = Signal(object)
    loaded = Signal()   # all widgets of a set_messages call are in place

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("ChatScroll")
        self.setAccessibleName("Conversation")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        holder = QWidget()
        holder.setObjectName("ChatArea")
        h = QHBoxLayout(holder)
        h.setContentsMargins(16, 16, 16, 16)
        h.addStretch(1)
        self.column = QWidget()
        self.column.setMaximumWidth(820)
        self.column.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.col_layout = QVBoxLayout(self.column)
        self.col_layout.setContentsMargins(0, 0, 0, 0)
        self.col_layout.setSpacing(14)
        self.col_layout.addStretch(1)
        h.addWidget(self.column, 100)
        h.addStretch(1)
        self.setWidget(holder)
        bar = self.verticalScrollBar()
        bar.setSingleStep(24)
        bar.valueChanged.connect(self._on_scrolled)
        bar.rangeChanged.connect(self._on_range)
        self.stick_to_bottom = True
        self.model_name = "Assistant"
        self.widgets: list[MessageWidget] = []
        self._pending: list[MessageItem] = []
        self._fill_timer = QTimer(self)
        self._fill_timer.setInterval(0)
        self._fill_timer.timeout.connect(self._fill_batch)
        self._stream: MessageWidget | None = None
        self._stream_renderer: StreamRenderer | None = None
        self._stream_text = ""
        self._stream_dirty = False
        self._render_timer = QTimer(self)
        self._render_timer.setInterval(RENDER_MS)
        self._render_timer.timeout.connect(self._render_stream)
        self.render_count = 0
        self._programmatic_scroll = False
        theme.changed_signal().connect(self._on_theme)

    # --- bottom rule -------------------------------------------------------------------------
    def at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - AT_BOTTOM_PX

    def _on_scrolled(self, _value: int) -> None:
        if not self._programmatic_scroll:
            self.stick_to_bottom = self.at_bottom()

    def _on_range(self, _min: int, _max: int) -> None:
        if self.stick_to_bottom:
            self.scroll_to_bottom()

    def scroll_to_bottom(self) -> None:
        bar = self.verticalScrollBar()
        self._programmatic_scroll = True
        try:
            bar.setValue(bar.maximum())
        finally:
            self._programmatic_scroll = False
        self.stick_to_bottom = True

    # --- content -----------------------------------------------------------------------------
    def clear(self) -> None:
        self._fill_timer.stop()
        self._pending = []
        self.end_stream()
        for w in self.widgets:
            w.hide()
            w.deleteLater()
        self.widgets = []
        self.stick_to_bottom = True

    def set_messages(self, items: list[MessageItem]) -> None:
        """Show `items` (rendered off the UI thread), adding widgets in time-boxed batches."""
        self.clear()
        self._pending = list(items)
        if not self._pending:
            self.loaded.emit()
            return
        self._fill_batch()
        if self._pending:
            self._fill_timer.start()

    def _fill_batch(self) -> None:
        start = time.perf_counter()
        while self._pending:  # at least one per turn, then as many as the budget allows
            self._add_widget(self._pending.pop(0))
            if time.perf_counter() - start >= BATCH_BUDGET_S:
                break
        if not self._pending:
            self._fill_timer.stop()
            self._update_last_flags()
            self.scroll_to_bottom()
            self.loaded.emit()

    @property
    def loading(self) -> bool:
        return bool(self._pending)

    def _add_widget(self, item: MessageItem) -> MessageWidget:
        w = MessageWidget(item, model_name=self.model_name, parent=self.column)
        w.copyRequested.connect(self.copyRequested)
        w.editSubmitted.connect(self.editSubmitted)
        w.regenerateRequested.connect(self.regenerateRequested)
        w.siblingRequested.connect(self.siblingRequested)
        w.branchRequested.connect(self.branchRequested)
        w.linkActivated.connect(QDesktopServices.openUrl)
        if item.role == "user":   # a bubble on the right, as wide as its text (at most 80 %)
            w.setMaximumWidth(max(240, int(self.column.width() * 0.8)))
            self.col_layout.insertWidget(self.col_layout.count() - 1, w, 0,
                                         Qt.AlignmentFlag.AlignRight)
        else:
            self.col_layout.insertWidget(self.col_layout.count() - 1, w)
        self.widgets.append(w)
        return w

    def append_message(self, item: MessageItem) -> MessageWidget:
        self.stick_to_bottom = True
        w = self._add_widget(item)
        self._update_last_flags()
        return w

    def replace_message(self, old_id: str, item: MessageItem) -> None:
        for w in self.widgets:
            if w.item.id == old_id:
                w.item = item
                w.refresh()
                break
        self._update_last_flags()

    def _update_last_flags(self) -> None:
        last_assistant = None
        for w in self.widgets:
            if w.item.role == "assistant":
                last_assistant = w
        busy = self._stream is not None
        for w in self.widgets:
            w.set_regenerate_visible(w is last_assistant and not busy and
                                     w is self.widgets[-1])
            w.edit_btn.setEnabled(w.item.role == "user" and not busy
                                  and not w.item.pending)

    def truncate_after(self, message_id: str | None, *, keep: bool = True) -> None:
        """Remove the widgets after `message_id` (or from it on, with keep=False)."""
        idx = -1
        for i, w in enumerate(self.widgets):
            if w.item.id == message_id:
                idx = i if keep else i - 1
                break
        for w in self.widgets[idx + 1:]:
            w.hide()
            w.deleteLater()
        self.widgets = self.widgets[: idx + 1]
        self._update_last_flags()

    def sync(self, items: list[MessageItem]) -> None:
        """Show `items`, reusing the widgets whose message is unchanged (after a turn or a
        sibling flip: the bubbles above stay as they are)."""
        keep = 0
        for w, it in zip(self.widgets, items, strict=False):   # stops at the shorter
            if w.item.id != it.id and not w.item.pending:
                break
            keep += 1
        for w, it in zip(self.widgets[:keep], items[:keep], strict=True):
            if w.item.id != it.id or (w.item.sibling_count, w.item.sibling_index, w.item.figures) != \
                    (it.sibling_count, it.sibling_index, it.figures) or w.item.content != it.content \
                    or w.item.tool_steps != it.tool_steps:
                w.item = it
                w.refresh()
        for w in self.widgets[keep:]:
            w.hide()
            w.deleteLater()
        self.widgets = self.widgets[:keep]
        for it in items[keep:]:
            self._add_widget(it)
            self.widgets[-1].refresh()
        self._update_last_flags()

    def items_for(self, rows: list[Any], assistant: MessageItem | None = None) -> list[MessageItem]:
        """Items for the store's `rows`, reusing the HTML of messages already shown unchanged
        (`assistant` is the new reply's item, rendered off the UI thread)."""
        existing = {w.item.id: w.item for w in self.widgets}
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

    def rendered_cache(self) -> dict[Any, Rendered | None]:
        """The HTML of every message shown, by id (a sibling flip reuses what it can)."""
        return {w.item.id: w.item.rendered for w in self.widgets}

    def message_ids(self) -> list[str]:
        return [w.item.id for w in self.widgets]

    def widget_for(self, message_id: str) -> MessageWidget | None:
        return next((w for w in self.widgets if w.item.id == message_id), None)

    # --- streaming ---------------------------------------------------------------------------
    def begin_stream(self, pending_id: str = "pending:assistant") -> MessageWidget:
        self.end_stream()
        item = MessageItem(id=pending_id, role="assistant", content="",
                           rendered=Rendered('<p style="color: gray;">…</p>', ()))
        w = self.append_message(item)
        w.set_streaming(True)
        w.prefill.set_waiting()   # until the first PrefillProgress / the first token
        self._stream = w
        self._stream_text = ""
        self._stream_renderer = StreamRenderer(w.body, theme.current())
        self._update_last_flags()
        return w

    def set_stream_prefill(self, done: int, total: int, text: str | None = None) -> None:
        """The engine is processing the prompt: show how far (and `text`: how long still), in the
        reply bubble."""
        if self._stream is not None and not self._stream_text:
            self._stream.prefill.set_progress(done, total, text)

    def set_stream_meta(self, text: str) -> None:
        """Live figures of the streaming reply (tokens, tok/s), in its header."""
        if self._stream is not None:
            self._stream.meta.setText(text)

    def append_stream(self, text: str) -> None:
        if self._stream is None:
            return
        self._stream.prefill.hide()
        self._stream_text += text
        self._stream_dirty = True
        if not self._render_timer.isActive():
            self._render_stream()  # first chunk at once, then throttled
            self._render_timer.start()

    def _render_stream(self) -> None:
        if self._stream is None or not self._stream_dirty:
            self._render_timer.stop()
            return
        self._stream_dirty = False
        self._stream.item.content = self._stream_text
        assert self._stream_renderer is not None    # made with the stream
        self._stream.item.rendered = self._stream_renderer.update(self._stream_text)
        self.render_count += 1

    def end_stream(self, final: MessageItem | None = None) -> None:
        self._render_timer.stop()
        w, self._stream = self._stream, None
        if w is None:
            return
        w.set_streaming(False)
        renderer = self._stream_renderer
        self._stream_renderer = None
        if renderer is None:
            pass
        elif final is not None:
            if renderer.started and \
                    final.content[: renderer.stable_len] == self._stream_text[: renderer.stable_len]:
                # finish incrementally: the finished blocks are already on screen
                final.rendered = renderer.update(final.content, final=True)
                w.item = final
                w.update_chrome()
            else:
                w.item = final
                w.refresh()   # `final` as rendered, or rendered now
        elif renderer.started:
            w.item.rendered = renderer.update(w.item.content, final=True)
        if final is not None:
            w.tool_calls.set_steps(final.tool_steps)   # the calls as stored, folded
        self._update_last_flags()

    @property
    def streaming(self) -> bool:
        return self._stream is not None

    @property
    def stream_widget(self) -> MessageWidget | None:
        """The bubble of the reply streaming now (its tool calls are asked and shown in it)."""
        return self._stream

    @property
    def stream_text(self) -> str:
        return self._stream_text

    def _on_theme(self, _t: Any) -> None:
        for w in self.widgets:
            w.item.rendered = None
            w.refresh()

    def resizeEvent(self, event: Any) -> None:  # noqa: N802
        super().resizeEvent(event)
        limit = max(240, int(self.column.width() * 0.8))
        for w in self.widgets:
            if w.item.role == "user" and w.maximumWidth() != limit:
                w.setMaximumWidth(limit)

    def keyPressEvent(self, event: Any) -> None:  # noqa: N802
        if event.matches(QKeySequence.StandardKey.MoveToEndOfDocument):
            self.scroll_to_bottom()
            return
        super().keyPressEvent(event)


def copy_to_clipboard(text: str) -> None:
    QGuiApplication.clipboard().setText(text)


__all__ = ["ChatView", "MessageItem", "MessageWidget", "copy_to_clipboard", "replace"]
