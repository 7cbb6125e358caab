"""What a screen reader gets from Amber: every interactive control in the main window and its
dialogs has an accessible name (walking the real QAccessible tree), chat rows and message bubbles
expose their text, a streamed reply is announced once (not per token), and text meets WCAG AA
contrast (4.5:1) in both themes — computed from the real style sheet and palette."""
from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAccessible, QPalette
from PySide6.QtWidgets import QDialog, QWidget

from app.gui import accessibility as a11y
from app.gui import theme
from tests.support.gui import send, wait_idle


def _describe(nodes: list[a11y.Node]) -> str:
    return "\n".join(f"  {n.path} (role {n.role.name})" for n in nodes)


def _assert_all_named(root: QWidget, min_nodes: int = 6) -> list[a11y.Node]:
    nodes = list(a11y.walk(root))
    assert len(nodes) >= min_nodes, f"the accessible tree is (nearly) empty: the walk is broken ({nodes})"
    missing = a11y.unnamed_controls(root)
    assert not missing, f"interactive controls without an accessible name:\n{_describe(missing)}"
    return nodes


def test_the_walk_finds_an_unnamed_control(qtbot):
    """The checker itself: a bare icon button has no name, and naming it fixes that."""
    from PySide6.QtWidgets import QToolButton, QVBoxLayout
    root = QWidget()
    qtbot.addWidget(root)
    layout = QVBoxLayout(root)
    bare = QToolButton(root)
    bare.setIcon(theme.icon("copy"))
    layout.addWidget(bare)
    root.show()
    qtbot.waitExposed(root)
    missing = a11y.unnamed_controls(root)
    assert [n.obj for n in missing] == [bare]
    a11y.name(bare, "Copy", "Copies the message")
    assert a11y.unnamed_controls(root) == []
    node = next(n for n in a11y.walk(root) if n.obj is bare)
    assert node.role == QAccessible.Role.PushButton and node.focusable
    assert node.description == "Copies the message"


def test_main_window_controls_all_have_names(make_window, engine, qtbot):
    w = make_window(engine)
    send(qtbot, w, "Hello there")
    wait_idle(qtbot, w)
    nodes = _assert_all_named(w)
    names = {n.name for n in nodes}
    # the controls a user reaches first, by the names a screen reader reads
    assert {"Message", "Send"} <= names, sorted(names)
    roles = {n.role for n in nodes}
    assert QAccessible.Role.EditableText in roles and QAccessible.Role.PushButton in roles
    # the tree is read in screen order: sidebar (left), header, messages, composer, status bar
    order = [n.name for n in nodes if n.interactive]
    landmarks = ["New chat", "Search chats", "Chats", "Import a model", "Settings", "Conversation",
                 "Your message", "Reply", "Message", "Send", "Context window used"]
    positions = [order.index(x) for x in landmarks]
    assert positions == sorted(positions), order
    # the sidebar's rows are list items named by Qt.AccessibleTextRole
    rows = [n for n in nodes if n.role == QAccessible.Role.ListItem]
    assert any(n.name.startswith("Hello there") for n in rows), [n.name for n in rows]


def test_chat_rows_and_message_bubbles_expose_their_text(make_window, engine, qtbot):
    engine.reply = "Paris is the capital of France."
    w = make_window(engine)
    send(qtbot, w, "What is the capital of France?")
    wait_idle(qtbot, w)
    model = w.sidebar.list.model() if hasattr(w.sidebar, "list") else w.sidebar.view.model()
    texts = [model.index(r, 0).data(Qt.ItemDataRole.AccessibleTextRole) for r in range(model.rowCount())]
    assert any(t and "France" in t for t in texts), texts
    bubbles = w.chat_view.widgets
    assert bubbles[0].accessibleName() == "You said"
    assert bubbles[-1].accessibleName().endswith(" replied")
    assert "capital of France?" in bubbles[0].accessibleDescription()
    assert "Paris is the capital" in bubbles[-1].accessibleDescription()
    tree = {n.obj: n for n in a11y.walk(w)}
    assert tree[bubbles[-1]].description.startswith("Paris is the capital")


def test_a_streamed_reply_is_announced_once_when_it_finishes(make_window, engine, qtbot):
    engine.delay = 0.005
    engine.reply = " ".join(f"word{i}" for i in range(40))
    w = make_window(engine)
    heard: list[str] = []
    a11y.announcer.announced.connect(heard.append)
    try:
        send(qtbot, w, "Stream please")
        wait_idle(qtbot, w)
    finally:
        a11y.announcer.announced.disconnect(heard.append)
    replies = [h for h in heard if h.startswith("Reply")]
    assert len(replies) == 1, heard                   # not once per token
    assert replies[0].startswith("Reply finished: word0 word1") and "word39" in replies[0]


def _dialogs(w: Any) -> list[QDialog]:
    from app.gui.dialogs.mcp_page import McpServerDialog
    from app.gui.dialogs.remote_dialog import RemoteDialog
    from app.gui.dialogs.settings_dialog import ChatSettingsDialog, SettingsDialog
    # the settings dialog as the window opens it: with the API server panel and the MCP servers
    out: list[QDialog] = [SettingsDialog(w.settings, w.home, parent=w, server=w.api_server(), tools=w.tools)]
    out.append(McpServerDialog(None, set(), parent=w))
    out.append(RemoteDialog(w.tasks.run_task, parent=w))
    detail = w.store.get_conversation(w.current_id)
    out.append(ChatSettingsDialog(detail, w.settings, parent=w))
    return out


def test_dialog_controls_all_have_names(make_window, engine, qtbot, tmp_path):
    import threading
    from app.gui.backend import ImportCancelled
    release = threading.Event()

    def importer(src, progress, cancel):          # an import that waits, so its dialog stays up
        progress(0.3, "Converting layer 3")
        release.wait(10)
        raise ImportCancelled()

    w = make_window(engine, gguf_importer=importer)
    send(qtbot, w, "Hello")
    wait_idle(qtbot, w)
    for dlg in _dialogs(w):
        dlg.show()
        qtbot.waitExposed(dlg)
        try:
            _assert_all_named(dlg)
            assert dlg.windowTitle()
        finally:
            dlg.reject()
            dlg.deleteLater()
    progress = w.import_model(tmp_path / "model.gguf", gguf=True)
    try:
        qtbot.waitUntil(lambda: progress.isVisible() and progress.value() > 0, timeout=3000)
        nodes = _assert_all_named(progress, min_nodes=3)
        assert {"Import progress", "Cancel"} <= {n.name for n in nodes}
    finally:
        release.set()
        qtbot.waitUntil(lambda: w.status.message.text() == "Import cancelled", timeout=5000)


# --- contrast ---------------------------------------------------------------------------------

def test_contrast_ratio_matches_wcag_reference_values():
    assert a11y.contrast_ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert a11y.contrast_ratio("#ffffff", "#ffffff") == pytest.approx(1.0)
    assert a11y.contrast_ratio("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)   # the AA grey
    assert a11y.contrast_ratio("#777777", "#ffffff") < 4.5


def test_the_pairing_follows_states_ancestors_and_transparent_text():
    qss = """
    QMainWindow { background: #ffffff; }
    #Card { background: #000000; }
    #Card QLabel { color: #ffffff; }
    QToolButton { color: #111111; background: transparent; }
    QToolButton:hover { background: #eeeeee; }
    QToolButton:disabled { color: #dddddd; }
    #Floating { color: #222222; }
    QMenu { background: #fafafa; } QMenu::item { color: #333333; }
    QLineEdit { selection-background-color: #0000ff; selection-color: #ffffff; }
    """
    pairs = {(p.where, p.fg, p.bg) for p in a11y.stylesheet_pairs(qss, "#f0f0f0")}
    assert ("#Card QLabel", "#ffffff", "#000000") in pairs
    assert ("QToolButton:hover", "#111111", "#eeeeee") in pairs
    assert ("QMenu::item", "#333333", "#fafafa") in pairs
    assert ("QLineEdit (selection)", "#ffffff", "#0000ff") in pairs
    floating = {bg for where, fg, bg in pairs if where.startswith("#Floating")}
    assert floating == {"#f0f0f0", "#ffffff", "#fafafa"}      # every surface; #Card has its own text rules
    assert not any("disabled" in where for where, _, _ in pairs)


@pytest.mark.parametrize("t", [theme.LIGHT, theme.DARK], ids=lambda t: t.name)
def test_text_contrast_is_at_least_aa_in_both_themes(t):
    pairs = a11y.stylesheet_pairs(theme.stylesheet(t), t.window)
    assert len(pairs) > 30, "the style sheet was not read (resources/styles/amber.qss)"
    p = theme.palette_for(t)
    cr = QPalette.ColorRole
    for fg, bg in ((cr.Text, cr.Base), (cr.WindowText, cr.Window), (cr.ButtonText, cr.Button),
                   (cr.HighlightedText, cr.Highlight), (cr.ToolTipText, cr.ToolTipBase),
                   (cr.PlaceholderText, cr.Base), (cr.Link, cr.Base), (cr.Text, cr.AlternateBase)):
        pairs.append(a11y.Pair(f"palette {fg.name} on {bg.name}", p.color(fg).name(), p.color(bg).name()))
    # each message's document style sheet (markdown_render.document_css): its text sits on the
    # chat background, a user bubble, a code block or a table header — the backgrounds it sets
    from app.gui.models.markdown_render import document_css
    css = document_css(t)
    surfaces = [t.base, t.user_bubble] + [r_bg for r in a11y.parse_qss(css)
                                         if (r_bg := r.decls.get("background-color"))]
    doc = a11y.stylesheet_pairs(css, t.base, containers=surfaces)
    assert {x.fg for x in doc} >= {t.text, t.accent, t.muted}, "document_css was not read"
    # (`hr`'s colour draws a decorative line, not text: outside 1.4.3)
    pairs += [a11y.Pair(f"message document: {x.where}", x.fg, x.bg) for x in doc if not x.where.startswith("hr")]
    low = [f"  {x.where}: {x.fg} on {x.bg} = {x.ratio:.2f}" for x in pairs if x.ratio < 4.5]
    assert not low, f"{t.name} theme: text below WCAG AA 4.5:1:\n" + "\n".join(low)


class _RecordingPainter:
    """Wraps a real QPainter: records the pen colour of every drawText and the colour of every
    fill, so the contrast of what a delegate really paints can be computed."""

    def __init__(self, painter: Any):
        self._p = painter
        self.texts: list[tuple[str, str]] = []      # (text, pen colour)
        self.fills: list[Any] = []                  # QColor (with alpha)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._p, name)

    def drawText(self, *args: Any) -> None:  # noqa: N802
        self.texts.append((str(args[-1]), self._p.pen().color().name()))
        self._p.drawText(*args)

    def fillPath(self, path: Any, brush: Any) -> None:  # noqa: N802
        from PySide6.QtGui import QColor
        self.fills.append(QColor(brush))
        self._p.fillPath(path, brush)


def _over(fill: Any, bg: str) -> str:
    """`fill` (maybe translucent) composited over the opaque `bg`."""
    from PySide6.QtGui import QColor
    b, a = QColor(bg), fill.alphaF()
    mix = [round(f * a + g * (1 - a)) for f, g in ((fill.red(), b.red()), (fill.green(), b.green()),
                                                    (fill.blue(), b.blue()))]
    return QColor(*mix).name()


@pytest.mark.parametrize("t", [theme.LIGHT, theme.DARK], ids=lambda t: t.name)
def test_sidebar_rows_as_painted_meet_aa(make_window, engine, qtbot, qapp, t):
    """The chat list's delegate paints its text itself: record what it draws on which fill, for
    a header, a plain, a hovered and a selected row (with a search snippet)."""
    from PySide6.QtCore import QRect
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtWidgets import QStyle, QStyleOptionViewItem

    w = make_window(engine)
    send(qtbot, w, "Hello there")
    wait_idle(qtbot, w)
    theme.apply(qapp, t)
    try:
        sidebar_bg = next(a11y._background(r) for r in a11y.parse_qss(theme.stylesheet(t))  # noqa: SLF001
                          if r.selector == "#Sidebar")
        model, view = w.sidebar.view.model(), w.sidebar.view
        w.chat_model.update(w.current_id, snippet="a search hit")
        rows = [model.index(r, 0) for r in range(model.rowCount())]
        assert len(rows) >= 2
        low: list[str] = []
        drawn = 0
        for index in rows:
            for state in (QStyle.StateFlag.State_None, QStyle.StateFlag.State_MouseOver,
                          QStyle.StateFlag.State_Selected):
                image = QImage(300, 40, QImage.Format.Format_ARGB32)
                real = QPainter(image)
                rec = _RecordingPainter(real)
                option = QStyleOptionViewItem()
                option.rect = QRect(0, 0, 300, 40)
                option.state = state | QStyle.StateFlag.State_Enabled
                option.font = view.font()
                view.itemDelegate().paint(rec, option, index)
                real.end()
                bg = _over(rec.fills[-1], sidebar_bg) if rec.fills else sidebar_bg
                for text, pen in rec.texts:
                    drawn += 1
                    ratio = a11y.contrast_ratio(pen, bg)
                    if ratio < 4.5:
                        low.append(f"  {text!r} ({state.name}): {pen} on {bg} = {ratio:.2f}")
        assert drawn >= 6, "the delegate drew no text: the recording is broken"
        assert not low, f"{t.name} theme: sidebar text below 4.5:1:\n" + "\n".join(low)
    finally:
        theme.apply(qapp, theme.LIGHT)
