"""The sidebar: new chat buttons, the search field and the chat list with its actions."""
from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPoint, QRect, QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor, QFont, QKeySequence, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import (QAbstractItemView, QFrame, QHBoxLayout, QLabel, QLineEdit,
                               QListView, QMenu, QPushButton, QStyle, QStyledItemDelegate,
                               QStyleOptionViewItem, QToolButton, QVBoxLayout, QWidget)

from .. import theme
from ..models.chat_list import ChatListModel, Header, IdRole, IsHeaderRole, RowRole

ROW_HEIGHT = 34
SEARCH_ROW_HEIGHT = 50   # while searching: the title, and the snippet with the matches marked
MARK_OPEN, MARK_CLOSE = "\u00ab", "\u00bb"   # how the store marks matched words in a snippet
LAYOUT_BATCH = 400   # rows laid out per event-loop turn (about 1 ms)
KV_ICONS = {"disk": "disk", "memory": "memory", "none": "kv-none"}


class ChatDelegate(QStyledItemDelegate):
    """Paints headers and chat rows (kv state, title, pinned / temporary / saving / busy marks).

    Fonts and icon pixmaps are cached: a paint must stay cheap with a list of 10,000 chats."""

    def __init__(self, parent: Any = None):
        super().__init__(parent)
        self._fonts: dict[tuple[str, str], QFont] = {}
        self._pixmaps: dict[tuple[str, str, int], Any] = {}
        theme.changed_signal().connect(self._on_theme)

    def _on_theme(self, *_: Any) -> None:
        self._pixmaps.clear()

    def _font(self, base: QFont, kind: str) -> QFont:
        key = (base.key(), kind)
        f = self._fonts.get(key)
        if f is None:
            f = QFont(base)
            if kind == "header":
                f.setPointSizeF(max(7.0, f.pointSizeF() * 0.85))
                f.setBold(True)
            elif kind == "italic":
                f.setItalic(True)
            self._fonts[key] = f
        return f

    def _pixmap(self, name: str, color: str, size: int = 14) -> Any:
        key = (name, color, size)
        pm = self._pixmaps.get(key)
        if pm is None:
            pm = theme.icon(name, color, size).pixmap(size, size)
            self._pixmaps[key] = pm
        return pm

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:  # noqa: N802
        model = index.model()
        searching = bool(getattr(model, "searching", False))
        return QSize(200, SEARCH_ROW_HEIGHT if searching else ROW_HEIGHT)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        t = theme.current()
        r = option.rect
        item = index.data(RowRole)
        painter.save()
        if isinstance(item, Header):
            painter.setFont(self._font(option.font, "header"))
            painter.setPen(QColor(t.muted))
            painter.drawText(r.adjusted(14, 0, -8, -4),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignBottom, item.label)
            painter.restore()
            return
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        state = option.state
        selected = bool(state & QStyle.StateFlag.State_Selected)
        if selected or state & QStyle.StateFlag.State_MouseOver:
            path = QPainterPath()
            path.addRoundedRect(QRectF(r.adjusted(6, 2, -6, -2)), 7, 7)
            c = QColor(t.selection)
            if not selected:
                c.setAlpha(110)
            painter.fillPath(path, c)
        x = r.left() + 14
        cy = r.center().y()
        kv = item.kv_state or "none"
        kv_color = t.accent if kv == "disk" else (t.text if kv == "memory" else t.muted)
        painter.drawPixmap(x, cy - 7, self._pixmap(KV_ICONS.get(kv, "kv-none"), kv_color))
        x += 22
        right = r.right() - 12
        if item.saving:
            rect = QRectF(right - 14, cy - 7, 14, 14)
            painter.setPen(QPen(QColor(t.border), 2))
            painter.drawEllipse(rect)
            pen = QPen(QColor(t.accent), 2)
            pen.setCapStyle(Qt.PenCapStyle.RoundCap)
            painter.setPen(pen)
            angle = int((time.monotonic() * 360) % 360)
            painter.drawArc(rect, -angle * 16, 100 * 16)
            right -= 20
        if item.temporary:
            painter.drawPixmap(right - 14, cy - 7, self._pixmap("temporary", t.muted))
            right -= 20
        if item.pinned:
            painter.drawPixmap(right - 14, cy - 7, self._pixmap("pin", t.accent))
            right -= 20
        if item.busy:
            painter.setBrush(QColor(t.accent))
            painter.setPen(Qt.PenStyle.NoPen)
            painter.drawEllipse(QRectF(right - 8, cy - 3, 6, 6))
            right -= 14
        painter.setFont(self._font(option.font, "italic" if item.temporary else "normal"))
        painter.setPen(QColor(t.text))
        fm = painter.fontMetrics()
        avail = max(10, right - x - 4)
        text = fm.elidedText(item.title, Qt.TextElideMode.ElideRight, avail)
        two_lines = r.height() >= SEARCH_ROW_HEIGHT
        if two_lines:   # a search hit: the title above, the snippet with its matches below
            half = r.height() // 2
            painter.drawText(QRect(x, r.top() + 2, avail, half - 2),
                             Qt.AlignmentFlag.AlignBottom | Qt.AlignmentFlag.AlignLeft, text)
            if item.snippet:
                draw_marked(painter, item.snippet, QRect(x, r.top() + half, avail, half - 4), t)
            painter.restore()
            return
        painter.drawText(QRect(x, r.top(), avail, r.height()),
                         Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, text)
        if item.snippet:
            used = fm.horizontalAdvance(text) + 8
            if used + 20 < avail:
                painter.setPen(QColor(t.muted))
                snip = fm.elidedText(plain_snippet(item.snippet), Qt.TextElideMode.ElideRight,
                                     avail - used)
                painter.drawText(QRect(x + used, r.top(), avail - used, r.height()),
                                 Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, snip)
        painter.restore()

    def updateEditorGeometry(self, editor: QWidget, option: QStyleOptionViewItem,  # noqa: N802
                             index: QModelIndex | QPersistentModelIndex) -> None:
        editor.setGeometry(option.rect.adjusted(30, 4, -8, -4))


def snippet_parts(snippet: str) -> list[tuple[str, bool]]:
    """“a «match» b” → [("a ", False), ("match", True), (" b", False)]."""
    parts: list[tuple[str, bool]] = []
    rest = " ".join((snippet or "").split())
    while rest:
        i = rest.find(MARK_OPEN)
        if i < 0:
            parts.append((rest, False))
            break
        j = rest.find(MARK_CLOSE, i + 1)
        if j < 0:
            parts.append((rest.replace(MARK_OPEN, ""), False))
            break
        if i:
            parts.append((rest[:i], False))
        parts.append((rest[i + 1:j], True))
        rest = rest[j + 1:]
    return [(p, m) for p, m in parts if p]


def plain_snippet(snippet: str) -> str:
    return "".join(p for p, _ in snippet_parts(snippet))


def draw_marked(painter: QPainter, snippet: str, rect: QRect, t: Any) -> None:
    """The snippet in the muted colour, its matched words bold in the text colour on the
    selection colour, cut with an ellipsis where the row ends."""
    base = painter.font()
    bold = QFont(base)
    bold.setBold(True)
    x, right = rect.left(), rect.right()
    for text, marked in snippet_parts(snippet):
        painter.setFont(bold if marked else base)
        fm = painter.fontMetrics()
        room = right - x
        if room <= fm.horizontalAdvance("…"):
            break
        shown = fm.elidedText(text, Qt.TextElideMode.ElideRight, room)
        width = fm.horizontalAdvance(shown)
        if marked:
            painter.fillRect(QRect(x - 1, rect.top() + 2, width + 2, rect.height() - 4),
                             QColor(t.selection))
        painter.setPen(QColor(t.text if marked else t.muted))
        painter.drawText(QRect(x, rect.top(), width + 1, rect.height()),
                         Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, shown)
        x += width
        if shown != text:
            break
    painter.setFont(base)


def _with_key(action: QAction, label: str) -> str:
    """A menu label with the key the window gives the action ("Pin\tCtrl+P")."""
    key = action.property("key")
    return f"{label}\t{key}" if key else label


class ChatListView(QListView):
    """The chat list. Arrow keys only move the focus (nothing opens); Enter or Space opens
    the focused chat, and so does a click."""

    activatedChat = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("ChatList")
        self.setUniformItemSizes(True)
        # Lay 10,000 rows out in small batches: every row of a layout costs two Python calls
        # (the model's rowCount), ~20 ms for one pass over 10,000 chats on the UI thread.
        self.setLayoutMode(QListView.LayoutMode.Batched)
        self.setBatchSize(LAYOUT_BATCH)
        self.setMouseTracking(True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.setItemDelegate(ChatDelegate(self))
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.clicked.connect(self._open)

    def _open(self, idx: QModelIndex) -> None:
        if idx.isValid() and not idx.data(IsHeaderRole):
            self.activatedChat.emit(idx.data(IdRole))

    def keyPressEvent(self, event: Any) -> None:  # noqa: N802
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter, Qt.Key.Key_Space) and \
                self.state() != QAbstractItemView.State.EditingState and not event.modifiers():
            self._open(self.currentIndex())
            event.accept()
            return
        super().keyPressEvent(event)


class Sidebar(QFrame):
    chatSelected = Signal(str)
    newChatRequested = Signal()
    newTemporaryRequested = Signal()
    pinToggled = Signal(str)
    renameRequested = Signal(str, str)
    deleteRequested = Signal(str)
    duplicateRequested = Signal(str)
    closeRequested = Signal(str)
    searchChanged = Signal(str)

    def __init__(self, model: ChatListModel, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("Sidebar")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.model = model
        self.setMinimumWidth(220)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 12, 10, 8)
        lay.setSpacing(8)

        brand = QHBoxLayout()
        logo = QLabel()
        logo.setPixmap(theme.app_icon().pixmap(22, 22))
        brand.addWidget(logo)
        name = QLabel("Amber")
        name.setObjectName("BrandLabel")
        brand.addWidget(name)
        brand.addStretch(1)
        self.temp_btn = QToolButton()
        self.temp_btn.setObjectName("NewTemporaryButton")
        self.temp_btn.setToolTip("New temporary chat (Ctrl+Shift+N)\nNever saved; discarded when closed")
        self.temp_btn.setAccessibleName("New temporary chat")
        self.temp_btn.clicked.connect(self.newTemporaryRequested)
        brand.addWidget(self.temp_btn)
        lay.addLayout(brand)

        self.new_btn = QPushButton("  New chat")
        self.new_btn.setObjectName("PrimaryButton")
        self.new_btn.setToolTip("New chat (Ctrl+N)")
        self.new_btn.setAccessibleName("New chat")     # the label's leading spaces are padding
        self.new_btn.clicked.connect(self.newChatRequested)
        lay.addWidget(self.new_btn)

        self.search = QLineEdit()
        self.search.setObjectName("SidebarSearch")
        self.search.setPlaceholderText("Search chats")
        self.search.setClearButtonEnabled(True)
        self.search.setAccessibleName("Search chats")
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(180)
        self._search_timer.timeout.connect(lambda: self.searchChanged.emit(self.search.text()))
        self.search.textChanged.connect(lambda _t: self._search_timer.start())
        self.search.returnPressed.connect(self._focus_first)
        lay.addWidget(self.search)

        self.view = ChatListView(self)
        self.view.setAccessibleName("Chats")   # rows read as Qt.AccessibleTextRole (sidebar_model)
        self.view.setModel(model)
        self.view.selectionModel().currentChanged.connect(self._on_current)
        self.view.activatedChat.connect(self.chatSelected)
        self.view.customContextMenuRequested.connect(self._context_menu)
        lay.addWidget(self.view, 1)

        self.loading = QLabel("Loading chats…")
        self.loading.setObjectName("ChatSubtitle")
        self.loading.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(self.loading)

        self._spin = QTimer(self)
        self._spin.setInterval(60)
        self._spin.timeout.connect(self._tick)
        model.dataChanged.connect(self._check_spin)
        model.modelReset.connect(self._check_spin)
        self._suppress_select = False
        self._make_actions()
        self._update_icons()
        theme.changed_signal().connect(self._update_icons)

    def _update_icons(self, *_: Any) -> None:
        t = theme.current()
        self.temp_btn.setIcon(theme.icon("temporary", t.text, 18))
        self.new_btn.setIcon(theme.icon("new-chat", t.accent_text, 16))
        if not hasattr(self, "_search_icon"):
            self._search_icon = self.search.addAction(theme.icon("search", t.muted, 16),
                                                      QLineEdit.ActionPosition.LeadingPosition)
            for b in self.search.findChildren(QToolButton):   # the icon's button and the clear one
                b.setAccessibleName("Search" if b.defaultAction() is self._search_icon else "Clear search")
        else:
            self._search_icon.setIcon(theme.icon("search", t.muted, 16))

    # --- actions -----------------------------------------------------------------------------
    def _make_actions(self) -> None:
        """The context menu's actions, on the row under the pointer. Their keys are the main
        window's (window-wide, on the focused row while the list has focus, else on the chat on
        screen): the menu shows them without registering them twice; Delete is the list's own."""
        def act(text: str, icon: str, shortcut: Any, slot: Any, *, own_key: bool = False) -> QAction:
            a = QAction(text, self.view)
            a.setData(icon)
            if shortcut and own_key:
                a.setShortcut(QKeySequence(shortcut))
                a.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            elif shortcut:
                a.setProperty("key", QKeySequence(shortcut).toString(QKeySequence.SequenceFormat.NativeText))
            a.triggered.connect(slot)
            self.view.addAction(a)
            return a

        self.act_pin = act("Pin", "pin", "Ctrl+P", lambda: self._with_current(self.pinToggled.emit))
        self.act_rename = act("Rename", "rename", "F2", self.rename_current)
        self.act_duplicate = act("Duplicate", "branch", "Ctrl+D",
                                 lambda: self._with_current(self.duplicateRequested.emit))
        self.act_close = act("Close", "close", "Ctrl+W", lambda: self._with_current(self.closeRequested.emit))
        self.act_delete = act("Delete", "trash", QKeySequence.StandardKey.Delete,
                              lambda: self._with_current(self.deleteRequested.emit), own_key=True)

    def current_id(self) -> str | None:
        idx = self.view.currentIndex()
        return idx.data(IdRole) if idx.isValid() and not idx.data(IsHeaderRole) else None

    def _with_current(self, fn: Any) -> None:
        cid = self.current_id()
        if cid:
            fn(cid)

    def rename_current(self) -> None:
        idx = self.view.currentIndex()
        if idx.isValid() and not idx.data(IsHeaderRole):
            self.view.edit(idx)

    def _context_menu(self, pos: QPoint) -> None:
        idx = self.view.indexAt(pos)
        if not idx.isValid() or idx.data(IsHeaderRole):
            return
        self.view.setCurrentIndex(idx)
        menu = self.build_menu(idx)
        menu.exec(self.view.viewport().mapToGlobal(pos))

    def build_menu(self, idx: QModelIndex) -> QMenu:
        row = idx.data(RowRole)
        menu = QMenu(self)
        t = theme.current()
        self.act_pin.setText(_with_key(self.act_pin, "Unpin" if row.pinned else "Pin"))
        self.act_pin.setEnabled(not row.temporary)
        self.act_pin.setToolTip("Temporary chats cannot be pinned" if row.temporary else "")
        self.act_duplicate.setEnabled(not row.temporary)
        self.act_close.setVisible(True)
        self.act_close.setText(_with_key(self.act_close, "Close and discard" if row.temporary else "Close"))
        self.act_rename.setText(_with_key(self.act_rename, "Rename"))
        self.act_duplicate.setText(_with_key(self.act_duplicate, "Duplicate"))
        for a in (self.act_pin, self.act_rename, self.act_duplicate, None, self.act_close,
                  self.act_delete):
            if a is None:
                menu.addSeparator()
                continue
            icon = "pin-off" if a is self.act_pin and row.pinned else a.data()
            a.setIcon(theme.icon(icon, t.danger if a is self.act_delete else t.text, 16))
            menu.addAction(a)
        return menu

    # --- selection ---------------------------------------------------------------------------
    def _on_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        """The focus moved (arrow keys, or rows coming and going): nothing opens; a click,
        Enter or Space opens (ChatListView.activatedChat)."""
        return

    def select(self, chat_id: str | None, *, emit: bool = False) -> None:
        self._suppress_select = not emit
        try:
            idx = self.model.index_of(chat_id) if chat_id else QModelIndex()
            if idx.isValid():
                self.view.setCurrentIndex(idx)
                self.view.scrollTo(idx)
            else:
                self.view.clearSelection()
        finally:
            self._suppress_select = False

    def _focus_first(self) -> None:
        """Enter in the search field: open the best hit (at the match) and focus the list."""
        for row in range(self.model.rowCount()):
            idx = self.model.index(row, 0)
            if not idx.data(IsHeaderRole):
                self.view.setFocus()
                self.view.setCurrentIndex(idx)
                self.chatSelected.emit(idx.data(IdRole))
                return

    def set_loading(self, loading: bool, text: str = "Loading chats…") -> None:
        self.loading.setText(text)
        self.loading.setVisible(loading)

    # --- saving spinner ----------------------------------------------------------------------
    def _check_spin(self, *_: Any) -> None:
        saving = bool(self.model.saving_ids)
        if saving and not self._spin.isActive():
            self._spin.start()
        elif not saving:
            self._spin.stop()

    def _tick(self) -> None:
        self._check_spin()
        self.view.viewport().update()
