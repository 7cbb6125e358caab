"""The view at small sizes and from the keyboard: 640×480, the collapsible sidebar,
Tab order and a visible focus, Enter/Space, code blocks that scroll with Copy in view, the
theme setting, remembered folders, search that keeps the view and opens at the match, and
imports (progress that moves, Cancel that sticks, a new model replacing a missing default)."""
from __future__ import annotations

import itertools
import threading
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QFileDialog

from app.gui import theme
from app.gui.import_progress import staged
from app.gui.settings import Settings
from app.gui.widgets.sidebar import snippet_parts
from app.gui.widgets.search_jump import query_terms
from app.gui.window_view import LONG_PLACEHOLDER, SHORT_PLACEHOLDER
from tests.support.fake_engine import FakeEngine
from tests.support.gui import send, wait_idle

LONG_CODE = "Here:\n\n```python\nvalue = '" + "x" * 400 + "'\n```\n\nDone."


def _visible_inside(child, window) -> bool:
    """The child is shown and lies wholly inside the window."""
    if not child.isVisible():
        return False
    top_left = child.mapTo(window, child.rect().topLeft())
    bottom_right = child.mapTo(window, child.rect().bottomRight())
    return window.rect().contains(top_left) and window.rect().contains(bottom_right)


def test_window_works_at_640_by_480(make_window, engine, qtbot):
    w = make_window(engine)
    assert (w.minimumWidth(), w.minimumHeight()) == (640, 480)
    w.resize(640, 480)
    qtbot.waitUntil(lambda: w.width() == 640, timeout=3000)
    QApplication.processEvents()
    assert w.sidebar.isHidden()                         # folded by itself at this width
    assert not w.view_ctl.toggle_btn.isChecked()
    for child in (w.title_label, w.model_picker, w.import_btn, w.chat_settings_btn,
                  w.settings_btn, w.view_ctl.toggle_btn, w.composer, w.composer.send_btn):
        assert _visible_inside(child, w), child.objectName() or child
    # header controls do not overlap
    boxes = [c.geometry() for c in (w.title_label, w.model_picker, w.import_btn,
                                    w.chat_settings_btn, w.settings_btn)]
    for a, b in itertools.pairwise(boxes):
        assert a.right() < b.left() + 1
    assert w.composer.edit.placeholderText() == SHORT_PLACEHOLDER
    fm = w.composer.edit.fontMetrics()
    assert fm.horizontalAdvance(SHORT_PLACEHOLDER) < w.composer.edit.viewport().width()
    # a long title is cut with an ellipsis, the full title stays in the label's text
    send(qtbot, w, "A very long first message that becomes a very long title for this chat")
    w.chat_model.update(w.current_id, title="A very long title " * 6)
    w._update_header()
    QApplication.processEvents()
    assert w.title_label.text().startswith("A very long title A very long title")
    assert w.title_label.shown_text().endswith("…")
    # Ctrl+B brings the chat list back (and hides it again)
    w.activateWindow()
    qtbot.keyClick(w, Qt.Key.Key_B, Qt.KeyboardModifier.ControlModifier)
    assert not w.sidebar.isHidden() and w.view_ctl.toggle_btn.isChecked()
    qtbot.mouseClick(w.view_ctl.toggle_btn, Qt.MouseButton.LeftButton)
    assert w.sidebar.isHidden()
    w.resize(1100, 720)
    QApplication.processEvents()
    assert w.sidebar.isHidden()                 # hidden on purpose: stays hidden when wider
    assert w.composer.edit.placeholderText() == LONG_PLACEHOLDER


def test_sidebar_comes_back_when_the_window_widens_again(make_window, engine, qtbot):
    w = make_window(engine)
    w.resize(700, 500)
    qtbot.waitUntil(lambda: w.sidebar.isHidden(), timeout=3000)
    w.resize(1100, 720)
    qtbot.waitUntil(lambda: not w.sidebar.isHidden(), timeout=3000)


def test_tab_order_and_visible_focus(make_window, engine, qtbot):
    w = make_window(engine)
    send(qtbot, w, "hello")
    w.activateWindow()
    w.composer.edit.setFocus()
    qtbot.waitUntil(lambda: w.composer.edit.hasFocus(), timeout=2000)
    w.composer.set_text("draft")            # the send button is enabled
    seen = []
    chain = [c for c in w.view_ctl.tab_chain() if c.isEnabled()]   # Tab passes disabled controls by
    for _ in range(len(chain)):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        seen.append(QApplication.focusWidget())
    assert seen[:len(chain) - 1] == chain[1:]           # every Tab lands on the next control
    assert seen[-1] is chain[0]                          # ... and comes back to the composer
    # messages are not Tab stops; the chat is one, and scrolls with the keys
    assert all(mw.body not in seen for mw in w.chat_view.widgets)
    assert w.chat_view in seen
    # a focused tool button is drawn with the accent ring (the stylesheet's :focus rule)
    w.settings_btn.setFocus()
    qtbot.waitUntil(lambda: w.settings_btn.hasFocus(), timeout=2000)
    img = w.settings_btn.grab().toImage()
    accent = theme.current().accent.lower()
    edge = {img.pixelColor(x, img.height() // 2).name() for x in range(0, 3)}
    assert accent in edge
    w.import_btn.setFocus()
    qtbot.waitUntil(lambda: w.import_btn.hasFocus(), timeout=2000)
    img = w.settings_btn.grab().toImage()
    assert accent not in {img.pixelColor(x, img.height() // 2).name() for x in range(0, 3)}


def test_enter_and_space_press_the_focused_button(make_window, engine, qtbot):
    w = make_window(engine)
    w.activateWindow()
    drafts = []
    w.sidebar.newTemporaryRequested.connect(lambda: drafts.append("temp"))
    w.sidebar.temp_btn.setFocus()
    qtbot.keyClick(w.sidebar.temp_btn, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: drafts == ["temp"], timeout=2000)
    assert w.draft is not None and w.draft.temporary
    w.sidebar.new_btn.setFocus()
    qtbot.keyClick(w.sidebar.new_btn, Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: w.draft is not None and not w.draft.temporary, timeout=2000)
    w.view_ctl.toggle_btn.setFocus()
    qtbot.keyClick(w.view_ctl.toggle_btn, Qt.Key.Key_Enter)
    qtbot.waitUntil(lambda: w.sidebar.isHidden(), timeout=2000)


def test_long_code_lines_scroll_and_copy_stays_visible(make_window, engine, qtbot):
    engine.reply = LONG_CODE
    w = make_window(engine)
    w.resize(800, 600)
    send(qtbot, w, "code please")
    wait_idle(qtbot, w)
    body = w.chat_view.widgets[-1].body
    QApplication.processEvents()
    assert body.wide() and body.horizontalScrollBar().maximum() > 0
    # the message itself never grows past the column
    col = w.chat_view.column
    assert body.width() <= col.width()
    # the Copy link is inside the visible part of the message
    doc = body.document()
    pos = doc.toPlainText().find("Copy")
    assert pos >= 0
    cursor = body.textCursor()
    cursor.setPosition(pos)
    rect = body.cursorRect(cursor)
    assert 0 <= rect.left() < body.viewport().width()
    # the code's copy link copies the whole line
    copied = []
    w.chat_view.widgets[-1].copyRequested.connect(copied.append)
    from PySide6.QtCore import QUrl
    w.chat_view.widgets[-1]._on_anchor(QUrl("copy:0"))
    assert copied == ["value = '" + "x" * 400 + "'"]
    # sideways, the message scrolls; text still wraps at the column
    body.horizontalScrollBar().setValue(body.horizontalScrollBar().maximum())
    assert doc.textWidth() <= body.viewport().width() + 1


def test_theme_setting_system_light_dark(make_window, engine, qtbot, monkeypatch):
    from app.gui.dialogs.settings_dialog import SettingsDialog

    w = make_window(engine)
    try:
        dlg = SettingsDialog(w.settings, Path(w.home))
        dlg.theme.setCurrentIndex(dlg.theme.findData("dark"))
        monkeypatch.setattr(SettingsDialog, "exec", lambda self: True)
        monkeypatch.setattr(SettingsDialog, "result_settings", lambda self: _with(w.settings, theme="dark"))
        w.open_settings()
        assert theme.current() is theme.DARK and theme.choice() == "dark"
        assert Settings.load(w.settings_path).theme == "dark"
        # a new window over the same settings starts dark, whatever the current theme
        theme.set_choice("system")
        theme.apply(QApplication.instance(), theme.LIGHT)
        make_window.shutdown(w)
        w = make_window(engine)
        assert theme.current() is theme.DARK and theme.choice() == "dark"
        monkeypatch.setattr(SettingsDialog, "result_settings", lambda self: _with(w.settings, theme="light"))
        w.open_settings()
        assert theme.current() is theme.LIGHT
        monkeypatch.setattr(SettingsDialog, "result_settings", lambda self: _with(w.settings, theme="system"))
        w.open_settings()
        assert theme.choice() == "system"
        assert theme.current() is theme.LIGHT      # AMBER_THEME=light stands for the system here
        assert Settings.from_dict({"theme": "purple"}).theme == "system"
    finally:
        theme.set_choice("system")
        theme.apply(QApplication.instance(), theme.LIGHT)


def _with(s: Settings, **changes) -> Settings:
    c = s.copy()
    for k, v in changes.items():
        setattr(c, k, v)
    return c


def test_file_dialogs_remember_their_folder(make_window, engine, qtbot, monkeypatch, tmp_path):
    folder = tmp_path / "downloads"
    folder.mkdir()
    asked = []

    def fake_open(parent, caption, start, filters):
        asked.append(start)
        return str(folder / "model.gguf"), ""

    imports = []
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(fake_open))
    w = make_window(engine)
    monkeypatch.setattr(w, "import_model", lambda src, gguf: imports.append(src))
    w.import_gguf_dialog()
    assert asked == [str(Path.home())] and imports == [folder / "model.gguf"]
    w.import_gguf_dialog()
    assert asked[-1] == str(folder)
    assert Settings.load(w.settings_path).last_dir == str(folder)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory",
                        staticmethod(lambda parent, caption, start: asked.append(start) or ""))
    w.import_folder_dialog()
    assert asked[-1] == str(folder)


def test_search_keeps_the_view_highlights_and_opens_at_the_match(make_window, engine, qtbot):
    engine.reply = lambda msgs: ("Filler text. " * 30) if "pasta" not in msgs[-1].content else "Use durum wheat."
    w = make_window(engine)
    send(qtbot, w, "Tell me about pasta")
    pasta = w.current_id
    for i in range(6):
        send(qtbot, w, f"more filler {i}")
    w.new_chat()
    send(qtbot, w, "Something else entirely")
    other = w.current_id
    loads = []
    w.chatLoaded.connect(loads.append)
    w.sidebar.search.setFocus()
    qtbot.keyClicks(w.sidebar.search, "durum")
    qtbot.waitUntil(lambda: w.chat_model.searching and w.chat_model.visible_chat_ids() == [pasta],
                    timeout=3000)
    QApplication.processEvents()
    assert w.current_id == other and loads == []        # typing moved nothing
    row = w.chat_model.chat(pasta)
    assert ("durum", True) in snippet_parts(row.snippet)   # the match is marked for highlighting
    idx = w.chat_model.index_of(pasta)
    assert w.sidebar.view.visualRect(idx).height() >= 50   # two-line hits
    with qtbot.waitSignal(w.chatLoaded, timeout=3000):
        qtbot.keyClick(w.sidebar.search, Qt.Key.Key_Return)
    assert w.current_id == pasta
    qtbot.waitUntil(lambda: w.search_jump.matched is not None, timeout=3000)
    hit = w.search_jump.matched
    assert hit.item.content == "Use durum wheat."
    assert hit.body.textCursor().selectedText().lower() == "durum"
    qtbot.wait(50)
    bar = w.chat_view.verticalScrollBar()
    assert bar.value() < bar.maximum()           # not at the bottom: at the match
    top = hit.mapTo(w.chat_view.widget(), hit.rect().topLeft()).y()
    assert bar.value() <= top <= bar.value() + w.chat_view.viewport().height()
    # a click on a hit opens it too, at the match
    w.new_chat()
    w.search_jump.matched = None
    rect = w.sidebar.view.visualRect(w.chat_model.index_of(pasta))
    with qtbot.waitSignal(w.chatLoaded, timeout=3000):
        qtbot.mouseClick(w.sidebar.view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: w.search_jump.matched is not None, timeout=3000)
    assert w.current_id == pasta and w.search_jump.matched.item.content == "Use durum wheat."
    w.sidebar.search.clear()
    qtbot.waitUntil(lambda: not w.chat_model.searching, timeout=3000)
    assert query_terms('"durum" AND wheat') == ["durum", "wheat"]


def test_import_progress_moves_in_stages(qtbot):
    seen = []
    cb = staged(lambda f, m: seen.append((f, m)))
    for i in range(1, 5):
        cb(i / 4, f"blk.{i}")
    cb(1.0, "late")
    assert seen[0] == (-1.0, "Reading the GGUF file…")
    fractions = [f for f, _ in seen[1:4]]
    assert fractions == sorted(fractions) and 0 < fractions[0] < fractions[-1] < 1
    # a phase and how far it is, never the converter's tensor names
    assert [m for _, m in seen[1:4]] == [f"Converting the weights… {p} %" for p in (25, 50, 75)]
    assert seen[4] == (-1.0, "Building and writing the ONNX model…") and len(seen) == 5


def test_real_gguf_import_reports_progress_as_it_goes(make_window, engine, qtbot, tmp_path):
    from tests.support.tiny_gguf import write_tiny_gguf  # noqa: PLC0415
    from app.gui.backend import import_gguf  # noqa: PLC0415

    write_tiny_gguf(tmp_path / "tiny.gguf")
    fed = []

    def recording_import(src, progress, cancel):
        def rec(f, m=""):
            fed.append((f, m))
            progress(f, m)
        return import_gguf(src, rec, cancel)

    values = []
    w = make_window(engine, gguf_importer=recording_import, model_lister=lambda: [])
    dlg = w.import_model(tmp_path / "tiny.gguf", gguf=True)
    values.append((dlg.minimum(), dlg.maximum(), dlg.labelText()))
    qtbot.waitUntil(lambda: w.status.message.text().startswith("Imported "), timeout=60000)
    assert values[0][:2] == (0, 0) and values[0][2] == "Reading the GGUF file…"   # busy at once
    # the converter reports every tensor (the staged feed turns them into a moving bar)
    steps = [f for f, m in fed]
    assert len(steps) >= 10 and steps == sorted(steps) and steps[-1] == 1.0
    assert all(m for _, m in fed)


def test_cancel_wins_over_a_late_success(make_window, engine, qtbot, tmp_path, monkeypatch):
    release = threading.Event()
    made = tmp_path / "models" / "Late"

    def importer(src, progress, cancel):
        release.wait(5)          # ignores the cancel, like a converter busy writing
        made.mkdir(parents=True)
        (made / "model.onnx").write_text("x")
        return made

    monkeypatch.setattr("app.gui.controllers.deletions.UNDO_MS", 10000)
    w = make_window(engine, gguf_importer=importer, model_lister=lambda: [])
    w.import_clear.setInterval(300)
    dlg = w.import_model(tmp_path / "x.gguf", gguf=True)
    from PySide6.QtWidgets import QPushButton
    qtbot.mouseClick(dlg.findChild(QPushButton), Qt.MouseButton.LeftButton)   # "Cancel"
    assert w.status.message.text() == "Import cancelled"
    release.set()
    qtbot.waitUntil(lambda: not made.exists(), timeout=5000)     # the late result is removed
    assert not w.status.message.text().startswith("Imported")
    qtbot.waitUntil(lambda: w.status.message.text() == "", timeout=3000)   # and the notice goes


def test_import_while_the_default_is_missing_selects_the_new_model(make_window, home, qtbot, tmp_path):
    engine = FakeEngine(home / "state")
    listed = []

    def prepare(name, progress):
        if not name:
            raise RuntimeError("the default model is missing")
        return home / "models" / name

    def importer(src, progress, cancel):
        listed.append("Imported-1B")
        return home / "models" / "Imported-1B"

    w = make_window(engine, wait_ready=False, model_preparer=prepare, gguf_importer=importer,
                    model_lister=lambda: list(listed))
    qtbot.waitUntil(lambda: w.engine_error is not None and w.banner.isVisible(), timeout=5000)
    with qtbot.waitSignal(w.engineReady, timeout=5000):
        w.import_model(tmp_path / "m.gguf", gguf=True)
    assert w.settings.model == "Imported-1B" and w.engine is engine
    assert not w.banner.isVisible()
    qtbot.waitUntil(lambda: w.model_picker.currentData() == "Imported-1B", timeout=3000)


def test_a_streamed_code_block_after_a_list_does_not_continue_the_list(make_window, engine, qtbot):
    engine.delay = 0.002
    w = make_window(engine)            # the default fake reply: a 2-item list, then code
    send(qtbot, w, "list then code")
    doc = w.chat_view.widgets[-1].body.document()
    listed = []
    block = doc.begin()
    while block.isValid():
        if block.textList() is not None:
            listed.append(block.text())
        block = block.next()
    assert listed == ["First point", "Second point"]


def test_ctrl_shift_c_copies_the_last_reply(make_window, engine, qtbot):
    engine.reply = "the answer"
    w = make_window(engine)
    send(qtbot, w, "question")
    w.activateWindow()
    QApplication.clipboard().setText("")
    qtbot.keyClick(w, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert QApplication.clipboard().text() == "the answer"


def test_the_focused_chat_scrolls_with_the_keys(make_window, engine, qtbot):
    engine.reply = "\n\n".join(f"Paragraph {i} " + "words " * 30 for i in range(30))
    w = make_window(engine)
    send(qtbot, w, "a long answer please")
    wait_idle(qtbot, w)
    bar = w.chat_view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum(), timeout=3000)
    w.activateWindow()
    w.chat_view.setFocus()
    qtbot.waitUntil(lambda: w.chat_view.hasFocus(), timeout=2000)
    qtbot.keyClick(w.chat_view, Qt.Key.Key_PageUp)
    assert bar.value() < bar.maximum()
