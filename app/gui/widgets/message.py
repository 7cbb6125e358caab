"""One message on screen: its auto-sized `MessageBrowser`, the `StreamRenderer` that puts a
streaming reply's incremental HTML (`models.stream_markup`) into it, and the `MessageWidget`
bubble with its tools (copy, edit, regenerate, branch, siblings). What it shows is a
`models.message.MessageItem`, built off the UI thread."""
from __future__ import annotations

import math
from typing import Any, Callable

from PySide6.QtCore import QEvent, QSize, Qt, QUrl, Signal
from PySide6.QtGui import (QTextCursor,
                           QTextOption)
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton,
                               QSizePolicy, QTextBrowser, QToolButton, QToolTip,
                               QVBoxLayout, QWidget)

from .. import theme
from ..models.markdown_render import Rendered, document_css
from ..models.message import MessageItem, reply_of
from ..models.stream_markup import CURSOR, StreamMarkup
from .status import short_figures
from .turn import PrefillIndicator, overflow_notice
from .thinking import ThinkingPanel
from .tool_calls import ToolCallsPanel

RENDER_MS = 80          # re-render a streaming reply at most this often


class MessageBrowser(QTextBrowser):
    """A read-only rich-text view whose height follows its document (no own scrollbars)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("MessageBody")
        # for reading and mouse selection: Tab does not stop in every message of a chat
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # text wraps at the message's width; only what cannot wrap (a long code line) is wider,
        # and then the message scrolls sideways rather than clipping it (and its Copy link)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.document().setDocumentMargin(2)
        self.viewport().setAutoFillBackground(False)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.DefaultContextMenu)
        self.document().documentLayout().documentSizeChanged.connect(self.fit)
        self.setFixedHeight(24)
        self.fit_width = False      # size to the content's width (user bubbles)
        self._ideal_width = 200

    def loadResource(self, kind: int, name: QUrl | str) -> Any:  # noqa: N802
        name = QUrl(name) if isinstance(name, str) else name
        if name.scheme() == "amber":  # small icons inside messages (the code blocks' copy link)
            return theme.icon(name.path(), theme.current().muted, 12).pixmap(12, 12)
        return None  # never load anything else (no remote or local files)

    def set_html(self, html: str, css: str) -> None:
        doc = self.document()
        if doc.defaultStyleSheet() != css:
            doc.setDefaultStyleSheet(css)
        self.setHtml(html)
        if self.fit_width:
            probe = doc.clone()
            probe.setTextWidth(-1)
            self._ideal_width = int(math.ceil(probe.idealWidth())) + 8
            self.updateGeometry()
        self.fit()

    def resizeEvent(self, event: Any) -> None:  # noqa: N802
        super().resizeEvent(event)
        w = self.viewport().width()
        if w > 0 and abs(self.document().textWidth() - w) > 0.5:
            self.document().setTextWidth(w)
        self.fit()

    def fit(self, *_: Any) -> None:
        """Height to the document (no inner scroll bar); the stream renderer calls it too."""
        h = math.ceil(self.document().size().height()) + 2
        if self.wide():
            h += self.horizontalScrollBar().sizeHint().height()
        if h != self.height():
            self.setFixedHeight(h)

    def wide(self) -> bool:
        """Whether some content (a long code line) is wider than the message: it scrolls."""
        w = self.viewport().width()
        return w > 0 and self.document().size().width() > w + 1

    def wheelEvent(self, event: Any) -> None:  # noqa: N802 - let the chat scroll area scroll
        d = event.angleDelta()
        if self.wide() and abs(d.x()) > abs(d.y()):   # sideways: scroll this wide message
            super().wheelEvent(event)
            return
        event.ignore()

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(self._ideal_width if self.fit_width else 200, self.height())


class StreamRenderer:
    """Puts a growing Markdown text into a `MessageBrowser` incrementally: the finished blocks
    `StreamMarkup` renders are appended once; only the unfinished tail is replaced."""

    CURSOR = CURSOR

    def __init__(self, browser: "MessageBrowser", th: theme.Theme):
        self.browser = browser
        self.theme = th
        self.markup = StreamMarkup(th)
        self.tail_pos = 0            # document position where the tail starts
        self.started = False

    @property
    def stable_len(self) -> int:
        """Characters of the text rendered as finished blocks."""
        return self.markup.stable_len

    def update(self, text: str, *, final: bool = False) -> Rendered:
        step = self.markup.update(text, final=final)
        sink = getattr(self.browser, "reasoning_sink", None)   # the reasoning: the ThinkingPanel's
        if sink is not None:
            sink(step.reply, not final)
        doc = self.browser.document()
        if not self.started:
            doc.setDefaultStyleSheet(document_css(self.theme))
            doc.setHtml("")
            self.started = True
        cursor = QTextCursor(doc)
        if step.finished is not None:
            self._replace_tail(cursor, step.finished)
            self.tail_pos = self._end(doc)
        if step.tail is not None:
            self._replace_tail(cursor, step.tail)
        self.browser.fit()
        return step.rendered

    @staticmethod
    def _end(doc: Any) -> int:
        return max(0, doc.characterCount() - 1)

    def _replace_tail(self, cursor: QTextCursor, html: str) -> None:
        doc = self.browser.document()
        cursor.beginEditBlock()
        cursor.setPosition(min(self.tail_pos, self._end(doc)))
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        if html:
            if self.tail_pos > 0:
                cursor.insertBlock()
                # the new block must not continue the list (or quote) the previous part ended
                # with: it showed as a stray "3." above a code block that followed a list
                lst = cursor.currentList()
                if lst is not None:
                    lst.remove(cursor.block())
                    fmt = cursor.blockFormat()
                    fmt.setIndent(0)
                    cursor.setBlockFormat(fmt)
            cursor.insertHtml(html)
        cursor.endEditBlock()


def _tool(icon: str, tip: str, slot: Callable[[], None], name: str) -> QToolButton:
    b = QToolButton()
    b.setObjectName(name)
    b.setIcon(theme.icon(icon, theme.current().muted, 16))
    b.setIconSize(QSize(16, 16))
    b.setToolTip(tip)
    b.setAccessibleName(tip)
    b.setAutoRaise(True)
    b.setCursor(Qt.CursorShape.PointingHandCursor)
    b.setFocusPolicy(Qt.FocusPolicy.ClickFocus)   # reached by shortcuts, not by every Tab
    b.clicked.connect(slot)
    return b


class MessageWidget(QFrame):
    copyRequested = Signal(str)
    editSubmitted = Signal(object, str)     # message id, new text
    regenerateRequested = Signal(object)    # assistant message id
    siblingRequested = Signal(object, int)  # message id, +1 / -1
    branchRequested = Signal(object)        # message id
    linkActivated = Signal(QUrl)

    def __init__(self, item: MessageItem, *, model_name: str = "Assistant",
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.item = item
        self.streaming = False
        self._model_name = model_name
        self.setObjectName("MessageUser" if item.role == "user" else "MessageAssistant")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        outer = QVBoxLayout(self)
        user = item.role == "user"
        outer.setContentsMargins(14 if user else 4, 10 if user else 6, 14 if user else 4, 6)
        outer.setSpacing(4)
        head = QHBoxLayout()
        head.setSpacing(6)
        self.role_label = QLabel("You" if user else (item.model_name or model_name))
        self.role_label.setObjectName("MessageRole")
        head.addWidget(self.role_label)
        head.addStretch(1)
        self.meta = QLabel("")
        self.meta.setObjectName("MessageMeta")
        head.addWidget(self.meta)
        outer.addLayout(head)
        self.overflow_label = QLabel("")
        self.overflow_label.setObjectName("OverflowNotice")
        self.overflow_label.setWordWrap(True)
        self.overflow_label.hide()
        outer.addWidget(self.overflow_label)
        self.prefill = PrefillIndicator(self)
        outer.addWidget(self.prefill)
        self.thinking = ThinkingPanel(self)
        outer.addWidget(self.thinking)
        self.tool_calls = ToolCallsPanel(self)
        outer.addWidget(self.tool_calls)
        self.body = MessageBrowser(self)
        self.body.reasoning_sink = lambda reply, streaming: self.thinking.set_reply(  # type: ignore[attr-defined]
            reply, streaming=streaming, figures=self.item.figures)
        self.body.setAccessibleName("Your message" if user else "Reply")
        self.body.fit_width = user
        if user:
            self.body.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
            self.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Preferred)
        self.body.anchorClicked.connect(self._on_anchor)
        outer.addWidget(self.body)
        self.error_label = QLabel("")
        self.error_label.setObjectName("MessageError")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        outer.addWidget(self.error_label)
        self.editor: QPlainTextEdit | None = None
        self._edit_box: QWidget | None = None

        actions = QHBoxLayout()
        actions.setSpacing(2)
        self.prev_btn = _tool("chevron-left", "Previous version", lambda: self._flip(-1), "PrevSibling")
        self.sib_label = QLabel("")
        self.sib_label.setObjectName("MessageMeta")
        self.next_btn = _tool("chevron-right", "Next version", lambda: self._flip(+1), "NextSibling")
        for w in (self.prev_btn, self.sib_label, self.next_btn):
            actions.addWidget(w)
        self.copy_btn = _tool("copy", "Copy message", lambda: self.copyRequested.emit(self.item.content),
                              "CopyMessage")
        self.edit_btn = _tool("edit", "Edit and resend", self.start_edit, "EditMessage")
        self.regen_btn = _tool("regenerate", "Regenerate reply",
                               lambda: self.regenerateRequested.emit(self.item.id), "Regenerate")
        self.branch_btn = _tool("branch", "Branch into a new chat from here",
                                lambda: self.branchRequested.emit(self.item.id), "Branch")
        for w in (self.copy_btn, self.edit_btn, self.regen_btn, self.branch_btn):
            actions.addWidget(w)
        actions.addStretch(1)
        outer.addLayout(actions)
        self.edit_btn.setVisible(user)
        self.regen_btn.setVisible(False)
        self.refresh()

    # --- content -----------------------------------------------------------------------------
    def refresh(self, rendered: Rendered | None = None) -> None:
        t = theme.current()
        if rendered is not None:
            self.item.rendered = rendered
        reply = reply_of(self.item.role, self.item.content)
        if self.item.rendered is None or (reply is not None and reply.reasoning is not None):
            # a reply with reasoning: its body is the answer alone, whatever a caller rendered
            self.item.render(t)
        if reply is not None:
            self.thinking.set_reply(reply, streaming=self.streaming, figures=self.item.figures)
        assert self.item.rendered is not None
        self.body.set_html(self.item.rendered.html, document_css(t))
        self.tool_calls.set_steps(self.item.tool_steps)
        self.update_chrome()

    def update_chrome(self) -> None:
        """The role label, figures, tools and notices for `item` (the text is not re-rendered)."""
        it = self.item
        multi = it.sibling_count > 1 and not self.streaming
        self.prev_btn.setVisible(multi)
        self.next_btn.setVisible(multi)
        self.sib_label.setVisible(multi)
        if multi:
            self.sib_label.setText(f"{it.sibling_index + 1} / {it.sibling_count}")
            self.prev_btn.setEnabled(it.sibling_index > 0)
            self.next_btn.setEnabled(it.sibling_index < it.sibling_count - 1)
        if it.role == "assistant":
            self.role_label.setText(self.display_name() + ("  ●" if self.streaming else ""))
        persisted = not it.pending
        for b in (self.copy_btn, self.branch_btn):
            b.setVisible(not self.streaming)
        self.branch_btn.setEnabled(persisted)
        self.edit_btn.setEnabled(persisted and not self.streaming)
        if not self.streaming:
            self.meta.setText(short_figures(it.figures) if it.figures and it.role == "assistant" else "")
            self.prefill.hide()
        if it.extra.get("queued"):     # sent while another chat generates: waiting its turn
            self.meta.setText(str(it.extra["queued"]))
        notice = overflow_notice(it.figures) if it.role == "assistant" else ""
        self.overflow_label.setText(notice)
        self.overflow_label.setVisible(bool(notice))
        # The bubble's text for screen readers: set here (load, end of a stream), not per token.
        self.setAccessibleName("You said" if it.role == "user" else
                               f"{self.display_name()} {'is writing' if self.streaming else 'replied'}")
        self.setAccessibleDescription(it.content)
        if it.error:
            self.error_label.setText(it.error)
            self.error_label.show()
        else:
            self.error_label.hide()

    def display_name(self) -> str:
        """Who wrote it: the model stored with the message, else the one loaded now."""
        return self.item.model_name or self._model_name

    def set_model_name(self, name: str) -> None:
        """The loaded model changed: relabels only replies whose writer is not stored."""
        self._model_name = name
        if self.item.role == "assistant":
            self.role_label.setText(self.display_name() + ("  ●" if self.streaming else ""))

    def set_regenerate_visible(self, visible: bool) -> None:
        self.regen_btn.setVisible(visible and self.item.role == "assistant" and not self.streaming)

    def set_streaming(self, streaming: bool) -> None:
        self.streaming = streaming
        if self.item.role == "assistant":
            self.role_label.setText(self.display_name() + ("  ●" if streaming else ""))
        self.update_chrome()

    def _flip(self, delta: int) -> None:
        self.siblingRequested.emit(self.item.id, delta)

    def _on_anchor(self, url: QUrl) -> None:
        if url.scheme() == "copy":
            try:
                code = self.item.rendered.code_blocks[int(url.path())]  # type: ignore[union-attr]
            except (ValueError, IndexError, AttributeError):
                return
            self.copyRequested.emit(code)
            QToolTip.showText(self.body.mapToGlobal(self.body.cursorRect().center()), "Copied", self.body)
        elif url.scheme() in ("http", "https", "mailto"):
            self.linkActivated.emit(url)

    # --- editing a user message --------------------------------------------------------------
    def start_edit(self) -> None:
        if self.item.role != "user" or self._edit_box is not None:
            return
        box = QWidget(self)
        lay = QVBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        self.editor = QPlainTextEdit(self.item.content, box)
        self.editor.setObjectName("EditBox")
        self.editor.setMinimumHeight(80)
        lay.addWidget(self.editor)
        row = QHBoxLayout()
        row.addStretch(1)
        cancel = QPushButton("Cancel")
        cancel.clicked.connect(self.cancel_edit)
        send = QPushButton("Save && send")
        send.setObjectName("PrimaryButton")
        send.setDefault(True)
        send.clicked.connect(self._submit_edit)
        row.addWidget(cancel)
        row.addWidget(send)
        lay.addLayout(row)
        self.layout().insertWidget(2, box)  # type: ignore[union-attr]
        self.body.hide()
        self._edit_box = box
        self.editor.setFocus()
        self.editor.installEventFilter(self)

    def eventFilter(self, obj: Any, event: Any) -> bool:  # noqa: N802
        if obj is self.editor and event.type() == QEvent.Type.KeyPress:
            if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (
                    event.modifiers() & Qt.KeyboardModifier.ShiftModifier):
                self._submit_edit()
                return True
            if event.key() == Qt.Key.Key_Escape:
                self.cancel_edit()
                return True
        return super().eventFilter(obj, event)

    def _submit_edit(self) -> None:
        if self.editor is None:
            return
        text = self.editor.toPlainText().strip()
        self.cancel_edit()
        if text:
            self.editSubmitted.emit(self.item.id, text)

    def cancel_edit(self) -> None:
        if self._edit_box is not None:
            self._edit_box.deleteLater()
            self._edit_box = None
            self.editor = None
        self.body.show()
