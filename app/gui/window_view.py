"""The main window's view in daily use: a collapsible sidebar (Ctrl+B, and on its own when the
window gets narrow), a layout that holds down to 640×480, a keyboard path through the window
(Tab order, Enter/Space on buttons, a visible focus ring from the stylesheet) and the theme
setting (system / light / dark)."""
from __future__ import annotations

import itertools
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QAbstractButton, QApplication, QToolButton, QWidget

from . import theme

MIN_SIZE = (640, 480)
NARROW_PX = 760        # below this the sidebar folds away by itself (unless shown on purpose)
WIDE_PX = 900          # ... and comes back above this, if it was folded by the width
SHORT_PLACEHOLDER = "Message Amber…"
LONG_PLACEHOLDER = "Message Amber…  (Enter to send, Shift+Enter for a new line)"
THEMES = {"light": theme.LIGHT, "dark": theme.DARK}


class EnterClicks(QObject):
    """Enter (and Return) press the focused button, as Space does."""

    def eventFilter(self, obj: Any, event: Any) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.KeyPress and isinstance(obj, QAbstractButton) and \
                event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not event.modifiers():
            if obj.isEnabled():
                if isinstance(obj, QToolButton) and obj.menu() is not None:
                    obj.showMenu()
                else:
                    obj.animateClick()
            return True
        return False


class UndoPassThrough(QObject):
    """Ctrl+Z in a text box (the composer, the search field) undoes typing while there is typing
    to undo; with none, it reaches the window's "Undo delete" (a text box otherwise keeps Ctrl+Z
    for itself)."""

    def __init__(self, w: Any):
        super().__init__(w)
        self.w = w

    def eventFilter(self, obj: Any, event: Any) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.ShortcutOverride and \
                event.matches(QKeySequence.StandardKey.Undo) and \
                not _undo_available(obj) and self.w.deletions.pending:
            event.ignore()
            return True
        return False


def _undo_available(edit: Any) -> bool:
    return bool(edit.isUndoAvailable() if hasattr(edit, "isUndoAvailable") else
                edit.document().isUndoAvailable())


class ViewController(QObject):
    def __init__(self, w: Any):
        super().__init__(w)
        self.w = w
        self.auto_folded = False     # the sidebar was folded because the window got narrow
        w.setMinimumSize(*MIN_SIZE)
        self.toggle_btn = QToolButton()
        self.toggle_btn.setObjectName("SidebarToggle")
        self.toggle_btn.setToolTip("Show or hide the chat list (Ctrl+B)")
        self.toggle_btn.setAccessibleName("Toggle the chat list")
        self.toggle_btn.setCheckable(True)
        self.toggle_btn.setChecked(True)
        self.toggle_btn.clicked.connect(lambda: self.set_sidebar(not self.sidebar_shown(), user=True))
        header_layout = w.title_label.parentWidget().layout()
        header_layout.insertWidget(0, self.toggle_btn)
        self.act_sidebar = QAction("Toggle sidebar", w)
        self.act_sidebar.setShortcut(QKeySequence("Ctrl+B"))
        self.act_sidebar.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.act_sidebar.triggered.connect(lambda: self.set_sidebar(not self.sidebar_shown(),
                                                                    user=True))
        w.addAction(self.act_sidebar)
        # message actions are not Tab stops (a long chat would need hundreds of Tabs); the
        # last reply's are on keys: Ctrl+Shift+C copies it, Ctrl+R regenerates it
        self.act_copy_last = QAction("Copy the last reply", w)
        self.act_copy_last.setShortcut(QKeySequence("Ctrl+Shift+C"))
        self.act_copy_last.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.act_copy_last.triggered.connect(self.copy_last_reply)
        w.addAction(self.act_copy_last)
        w.model_picker.setMinimumContentsLength(10)
        w.title_label.setMinimumWidth(60)
        w.composer.edit.setPlaceholderText(LONG_PLACEHOLDER)
        self.enter = EnterClicks(self)
        self.undo_pass = UndoPassThrough(w)
        w.composer.edit.installEventFilter(self.undo_pass)
        w.sidebar.search.installEventFilter(self.undo_pass)
        self._keyboard()
        self._icons()
        theme.changed_signal().connect(self._icons)
        w.installEventFilter(self)

    # --- sidebar -------------------------------------------------------------------------------
    def sidebar_shown(self) -> bool:
        return not self.w.sidebar.isHidden()

    def set_sidebar(self, shown: bool, *, user: bool = False) -> None:
        if user:
            self.auto_folded = False
        self.w.sidebar.setVisible(shown)
        self.toggle_btn.setChecked(shown)
        if shown and self.w.width() < WIDE_PX:   # a narrow window: the list takes its least
            self.w.splitter.setSizes([self.w.sidebar.minimumWidth(),
                                      self.w.width() - self.w.sidebar.minimumWidth()])
        self._fit_header()
        if not shown and self.w.sidebar.isAncestorOf(QApplication.focusWidget()):
            self.w.composer.focus()

    def _on_width(self, width: int) -> None:
        if width < NARROW_PX and self.sidebar_shown() and not self.auto_folded:
            self.set_sidebar(False)
            self.auto_folded = True
        elif width > WIDE_PX and self.auto_folded:
            self.set_sidebar(True)
            self.auto_folded = False
        short = self.w.composer.edit.width() < 430 or width < NARROW_PX
        self.w.composer.edit.setPlaceholderText(SHORT_PLACEHOLDER if short else LONG_PLACEHOLDER)
        # the status bar keeps what matters most when narrow: speed, context, provider
        st = self.w.status
        st.kv.setVisible(width >= NARROW_PX)
        st.started.setVisible(width >= 700 or not self.sidebar_shown())
        self._fit_header(width)

    def _fit_header(self, width: int | None = None) -> None:
        """The model picker shows its whole name when there is room, a short one when not."""
        from PySide6.QtWidgets import QComboBox  # noqa: PLC0415

        w = self.w
        room = (width or w.width()) - (w.sidebar.width() if self.sidebar_shown() else 0)
        picker = w.model_picker
        if room < 620:
            picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            picker.setMinimumContentsLength(8 if room < 480 else 12)
            picker.setMaximumWidth(150 if room < 480 else 200)
        else:
            picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
            picker.setMaximumWidth(340)

    def eventFilter(self, obj: Any, event: Any) -> bool:  # noqa: N802
        if obj is self.w and event.type() == QEvent.Type.Resize:
            self._on_width(event.size().width())
        return False

    # --- keyboard ------------------------------------------------------------------------------
    def tab_chain(self) -> list[QWidget]:
        """The window's Tab order: write (and send), read (the chat scrolls with the arrow and
        page keys), the chat list, then the header's controls."""
        w = self.w
        sb = w.sidebar
        return [w.composer.edit, w.composer.send_btn, w.chat_view, sb.new_btn, sb.temp_btn,
                sb.search, sb.view,
                self.toggle_btn, w.header.pin_btn, w.header.temp_btn, w.model_picker, w.import_btn,
                w.chat_settings_btn,
                w.settings_btn]

    def _keyboard(self) -> None:
        w = self.w
        chain = self.tab_chain()
        for a, b in itertools.pairwise(chain):
            w.setTabOrder(a, b)
        for widget in chain:
            if isinstance(widget, QAbstractButton):
                widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
                widget.installEventFilter(self.enter)
        w.composer.stop_btn.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        w.composer.stop_btn.installEventFilter(self.enter)
        w.toast.button.installEventFilter(self.enter)
        # a reply's text is for reading and selecting with the mouse; Tab does not stop in
        # every message, but once on the chat itself, which then scrolls with the keys
        w.chat_view.setFocusPolicy(Qt.FocusPolicy.StrongFocus)

    def copy_last_reply(self) -> None:
        replies = [mw for mw in self.w.chat_view.widgets if mw.item.role == "assistant"]
        if replies:
            self.w.chat_view.copyRequested.emit(replies[-1].item.content)
            self.w.status.set_message("Copied the last reply")

    def _icons(self, *_: Any) -> None:
        self.toggle_btn.setIcon(theme.icon("sidebar", theme.current().text, 18))


def apply_theme_choice(choice: str) -> theme.Theme:
    """Apply the theme setting: "system" follows the system (and its changes), else fixed."""
    app = QApplication.instance()
    theme.set_choice(choice)
    t = THEMES.get(choice)
    return theme.apply(app, t) if isinstance(app, QApplication) else theme.current()
