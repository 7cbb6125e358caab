"""The window in daily use on the real engine (the tiny converted model, a real SessionManager
loaded by the app's own `open_engine`): the user's text shown as written, the chat actions on
window-wide keys and in the chat header, delete with a lasting undo, closing a temporary chat."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from tests.support.gui import open_chat, send, wait_idle
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    from engine.convert import convert_gguf
    root = tmp_path_factory.mktemp("tiny-daily")
    src = write_tiny_gguf(root / "tiny.gguf", TinyConfig(seed=5))
    return convert_gguf(src.path, root / "tiny-chat")


@pytest.fixture
def window(make_window, tiny_dir) -> Any:
    """A window over the real engine on the tiny model (CPU), replies capped at 8 tokens."""
    from app.gui.backend import open_engine

    def factory(model_dir: Path, state_dir: Path, settings: Any, progress: Any = None) -> Any:
        s = settings.copy()
        s.provider = "cpu"
        return open_engine(tiny_dir, state_dir, s, progress)

    def make() -> Any:
        w = make_window(None, wait_ready=False, engine_factory=factory,
                        model_preparer=lambda name, progress: tiny_dir)
        w.settings.sampling.max_new_tokens = 8
        make_window.qtbot.waitUntil(lambda: bool((w.engine is not None or w.engine_error)
                                                 and w.chats_loaded), timeout=30000)
        assert w.engine_error is None
        from engine.sessions.manager import SessionManager
        assert isinstance(w.engine, SessionManager)
        return w
    return make


# ---- the user's text as written ---------------------------------------------------------------
PASTE = ("Licence:  keep `a  b    c` as is\n"
         "    indented line, not code\n"
         "\tand a tab; *stars* and <b>tags</b> & 1 < 2\n"
         "```\nfenced\n```")


def _body_text(mw: Any) -> str:
    return mw.body.document().toPlainText()


def test_user_text_is_shown_as_written(window, qtbot):
    w = window()
    send(qtbot, w, PASTE, timeout=30000)
    user, reply = w.chat_view.widgets[-2], w.chat_view.widgets[-1]
    assert user.item.role == "user" and reply.item.role == "assistant"

    def as_written(mw: Any) -> None:
        assert _body_text(mw) == PASTE                      # every space, tab and line
        html = mw.item.rendered.html
        assert "<b>tags</b>" not in html and "&lt;b&gt;tags&lt;/b&gt;" in html
        assert "<pre" not in html and "<code" not in html and "<em>" not in html
        assert "copy:" not in html and mw.item.rendered.code_blocks == ()

    as_written(user)
    # the same after the chat is opened again from the store
    cid = w.current_id
    w.new_chat()
    open_chat(qtbot, w, cid)
    as_written(w.chat_view.widgets[0])


def test_replies_are_still_markdown(make_window, engine, qtbot):
    engine.reply = "Some **bold** and `code`:\n\n```python\nx = 1\n```"
    w = make_window(engine)
    send(qtbot, w, "**not bold** here")
    user, reply = w.chat_view.widgets[-2], w.chat_view.widgets[-1]
    assert "<b>" not in user.item.rendered.html and "**not bold**" in _body_text(user)
    assert reply.item.rendered.code_blocks == ("x = 1",)
    assert "**" not in _body_text(reply)


# ---- chat actions: window-wide keys, and the header's pin and temporary buttons ---------------
def _ctrl(qtbot: Any, widget: Any, key: Any, shift: bool = False) -> None:
    mods = Qt.KeyboardModifier.ControlModifier | (Qt.KeyboardModifier.ShiftModifier if shift
                                                  else Qt.KeyboardModifier.NoModifier)
    qtbot.keyClick(widget, key, mods)


def test_chat_actions_work_from_anywhere_in_the_window(window, qtbot):
    w = window()
    send(qtbot, w, "Plan a trip", timeout=30000)
    cid = w.current_id
    w.composer.edit.setFocus()
    qtbot.waitUntil(lambda: w.composer.edit.hasFocus())
    assert not w.sidebar.view.hasFocus()
    _ctrl(qtbot, w.composer.edit, Qt.Key.Key_P)                  # pin, from the composer
    qtbot.waitUntil(lambda: w.chat_model.chat(cid).kv_state == "disk"
                    and not w.chat_model.chat(cid).saving, timeout=30000)
    assert w.chat_model.chat(cid).pinned and w.header.pin_btn.isChecked()
    assert w.header.pin_btn.accessibleName() == "Unpin chat"
    qtbot.mouseClick(w.header.pin_btn, Qt.MouseButton.LeftButton)   # unpin, from the header
    qtbot.waitUntil(lambda: not w.chat_model.chat(cid).pinned and not w.chat_model.chat(cid).saving,
                    timeout=30000)
    assert not w.header.pin_btn.isChecked()
    wait_idle(qtbot, w, timeout=30000)

    before = len(w.chat_model.visible_chat_ids())
    w.chat_view.setFocus()
    _ctrl(qtbot, w.chat_view, Qt.Key.Key_D)                      # duplicate, from the chat
    qtbot.waitUntil(lambda: len(w.chat_model.visible_chat_ids()) == before + 1, timeout=10000)
    copy = w.current_id
    assert copy != cid
    wait_idle(qtbot, w, timeout=30000)

    w.composer.edit.setFocus()
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_F2)               # rename: the list's editor opens
    from PySide6.QtWidgets import QLineEdit
    editor = w.sidebar.view.findChild(QLineEdit)
    assert editor is not None and editor.isVisible() and editor.text() == w.chat_model.chat(copy).title
    editor.selectAll()
    qtbot.keyClicks(editor, "Trip copy")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.chat_model.chat(copy).title == "Trip copy")
    assert w.header.title_label.text() == "Trip copy"

    w.composer.edit.setFocus()
    _ctrl(qtbot, w.composer.edit, Qt.Key.Key_Backspace, shift=True)   # delete, from the composer
    assert copy not in w.chat_model.visible_chat_ids() and w.toast.isVisible()
    assert w.current_id == cid


def test_keys_in_the_chat_list_act_on_the_focused_row(window, qtbot):
    w = window()
    send(qtbot, w, "first", timeout=30000)
    first = w.current_id
    w.new_chat()
    send(qtbot, w, "second", timeout=30000)
    second = w.current_id
    w.sidebar.view.setFocus()
    w.sidebar.select(first)                                      # focused, not opened
    assert w.chat_target() == first and w.current_id == second
    _ctrl(qtbot, w.sidebar.view, Qt.Key.Key_D)
    qtbot.waitUntil(lambda: len(w.chat_model.visible_chat_ids()) == 3, timeout=10000)
    wait_idle(qtbot, w, timeout=30000)
    titles = sorted(w.chat_model.chat(c).title for c in w.chat_model.visible_chat_ids())
    assert titles == ["first", "first (copy)", "second"]         # the focused one was copied


def test_the_header_makes_a_new_chat_temporary(window, qtbot):
    w = window()
    assert w.draft is not None and not w.draft.temporary
    assert w.header.temp_btn.isEnabled() and not w.header.temp_btn.isChecked()
    assert not w.header.pin_btn.isEnabled()                      # nothing to pin yet
    qtbot.mouseClick(w.header.temp_btn, Qt.MouseButton.LeftButton)
    assert w.draft.temporary and w.header.temp_btn.isChecked() and w.temp_notice.isVisible()
    send(qtbot, w, "a private question", timeout=30000)
    row = w.chat_model.chat(w.current_id)
    assert row.temporary
    assert w.header.temp_btn.isChecked() and not w.header.temp_btn.isEnabled()   # shows, cannot change
    assert not w.header.pin_btn.isEnabled()                      # a temporary chat is never pinned
    w.new_chat()
    qtbot.mouseClick(w.header.temp_btn, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(w.header.temp_btn, Qt.MouseButton.LeftButton)   # and back to a regular one
    assert not w.draft.temporary and not w.temp_notice.isVisible()


# ---- delete and undo, closing a temporary chat -------------------------------------------------
def test_undo_delete_lasts_until_quit_with_ctrl_z(window, make_window, qtbot, monkeypatch):
    monkeypatch.setattr("app.gui.controllers.deletions.UNDO_MS", 200)
    w = window()
    ids = []
    for text in ("keep this one", "and this one"):
        w.new_chat()
        send(qtbot, w, text, timeout=30000)
        ids.append(w.current_id)
    wait_idle(qtbot, w, timeout=30000)
    for cid in ids:
        w.delete_chat(cid)
    qtbot.waitUntil(lambda: not w.toast.isVisible(), timeout=3000)   # the toast goes ...
    qtbot.wait(600)
    assert all(w.store.get_conversation(c) for c in ids)            # ... the chats are not deleted
    assert all(w.engine.info(c) is not None for c in ids)
    w.composer.edit.setFocus()
    qtbot.waitUntil(lambda: w.composer.edit.hasFocus())
    _ctrl(qtbot, w.composer.edit, Qt.Key.Key_Z)                      # the last deleted comes back
    assert ids[1] in w.chat_model.visible_chat_ids() and ids[0] not in w.chat_model.visible_chat_ids()
    assert w.current_id == ids[1]
    w.composer.edit.setFocus()
    _ctrl(qtbot, w.composer.edit, Qt.Key.Key_Z)                      # then the one before
    assert ids[0] in w.chat_model.visible_chat_ids() and w.current_id == ids[0]
    w.act_undo_delete.trigger()
    assert w.status.message.text() == "Nothing to undo"
    # ... and from the search field, which has no typing to undo
    w.delete_chat(ids[0])
    w.sidebar.search.setFocus()
    qtbot.waitUntil(lambda: w.sidebar.search.hasFocus())
    _ctrl(qtbot, w.sidebar.search, Qt.Key.Key_Z)
    assert ids[0] in w.chat_model.visible_chat_ids()
    # typing is undone first: Ctrl+Z in a composer with text to undo stays the composer's
    w.delete_chat(ids[1])
    w.composer.edit.setFocus()
    qtbot.keyClicks(w.composer.edit, "abc")
    _ctrl(qtbot, w.composer.edit, Qt.Key.Key_Z)
    assert ids[1] not in w.chat_model.visible_chat_ids()
    # deleted for good when Amber closes
    store_path = w.home / "amber.sqlite3"
    make_window.shutdown(w)
    from app.store import ConversationStore
    store = ConversationStore(store_path)
    assert [c.id for c in store.list_conversations()] == [ids[0]]


def test_ctrl_w_asks_before_discarding_a_temporary_chat(window, qtbot):
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QMessageBox

    w = window()
    w.new_chat(temporary=True)
    send(qtbot, w, "a secret", timeout=30000)
    cid = w.current_id
    w.confirm = w.questions.ask_confirm                             # the real dialog

    def answer(button: str) -> None:
        def click() -> None:
            box = getattr(w, "confirm_box", None)
            if box is None or not box.isVisible():
                QTimer.singleShot(10, click)          # not shown yet
                return
            assert box.windowTitle() == "Discard temporary chat?"
            target = box.button(QMessageBox.StandardButton.Cancel) if button == "Cancel" else \
                next(b for b in box.buttons() if b.text() == button)
            assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)
            target.click()
        QTimer.singleShot(0, click)

    answer("Cancel")
    w.composer.edit.setFocus()
    _ctrl(qtbot, w.composer.edit, Qt.Key.Key_W)
    assert w.current_id == cid and w.chat_model.chat(cid) is not None
    w.activateWindow()
    w.composer.edit.setFocus()
    qtbot.waitUntil(lambda: w.composer.edit.hasFocus())
    answer("Discard")
    _ctrl(qtbot, w.composer.edit, Qt.Key.Key_W)
    assert w.chat_model.chat(cid) is None and w.current_id != cid
    # an empty new chat closes without a question
    w.new_chat(temporary=True)
    w.confirm = lambda title, text: pytest.fail("nothing to lose: no question")
    w.act_close_chat.trigger()
    assert w.draft is not None and not w.draft.temporary


def test_closing_a_temporary_chat_mid_reply_is_clean(window, qtbot, caplog):
    import logging
    w = window()
    w.settings.sampling.max_new_tokens = 400
    w.new_chat(temporary=True)
    closed = []

    def close_now(chat_id: str, _text: str) -> None:   # at the first streamed text
        if not closed:
            closed.append(chat_id)
            w.confirm = lambda title, text: True
            w.close_chat(chat_id, ask=True)

    w.replies.chunk.connect(close_now)
    caplog.set_level(logging.DEBUG)
    with qtbot.waitSignal(w.replyFinished, timeout=30000):
        send(qtbot, w, "tell me a long story", wait=False)
    wait_idle(qtbot, w, timeout=30000)
    assert closed and w.chat_model.chat(closed[0]) is None and w.current_id != closed[0]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "failed" not in w.status.message.text().lower()
    assert not w.chat_view.widgets                                   # a new, empty chat
    from app.store.errors import NotFoundError
    with pytest.raises(NotFoundError):                               # nothing left of it
        w.chats.temp.get_conversation(closed[0])


# ---- smaller things seen in daily use -------------------------------------------------------------
def test_the_chat_list_tooltip_says_where_the_chat_is_kept(window, qtbot):
    from dataclasses import replace

    w = window()
    send(qtbot, w, "hello", timeout=30000)
    wait_idle(qtbot, w, timeout=30000)
    cid = w.current_id

    def tip() -> str:
        return w.chat_model.data(w.chat_model.index_of(cid), Qt.ItemDataRole.ToolTipRole)

    row = w.chat_model.chat(cid)
    assert row.kv_state == "memory" and row.kv_bytes > 0
    assert f"Held in memory ({row.kv_bytes / 1e6:.1f} MB): the next reply starts at once" in tip()
    # no KV: no size beside it (a stale size read "No KV cache (17.7 MB)")
    w.chat_model.upsert(replace(row, kv_state="none"))
    assert "Not loaded: the next reply reads the whole chat first" in tip() and "MB" not in tip()
    assert "KV" not in tip()


def test_the_composer_shrinks_back_after_a_long_paste(make_window, engine, qtbot):
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QApplication

    w = make_window(engine)
    w.resize(800, 640)
    qtbot.waitUntil(lambda: w.width() == 800)
    edit = w.composer.edit
    one_line, composer = edit.height(), w.composer.height()
    QGuiApplication.clipboard().setText(("lorem ipsum dolor sit amet " * 3 + "\n") * 3)
    edit.setFocus()
    edit.paste()
    QApplication.processEvents()
    wrapped = edit.height()
    assert wrapped > one_line
    w.resize(1366, 640)                                  # wider: fewer wrapped lines, a lower box
    qtbot.waitUntil(lambda: edit.height() < wrapped)
    lines = sum(max(1, b.layout().lineCount()) for b in _blocks(edit.document()))
    assert edit.height() <= (lines + 1) * edit.fontMetrics().lineSpacing() + 14
    send(qtbot, w, edit.toPlainText())                  # sent: back to one line, no blank band
    qtbot.waitUntil(lambda: edit.height() == one_line and w.composer.height() == composer)


def _blocks(doc: Any) -> list[Any]:
    out, b = [], doc.begin()
    while b.isValid():
        out.append(b)
        b = b.next()
    return out


def test_without_a_model_the_empty_window_offers_import(make_window, home, qtbot, tmp_path, monkeypatch):
    """No model: the empty chat says so and offers Import GGUF… (and the other ways); importing a
    GGUF from there loads it (the real importer and engine) and the offer goes."""
    import errno

    from app.gui.backend import open_engine
    from app.gui.dialogs import import_dialog

    def prepare(name: str, progress: Any) -> Path:
        if name and (home / "models" / name).is_dir():
            return home / "models" / name
        raise FileNotFoundError(errno.ENOENT, "No such file or directory",
                                str(home / "models" / "SmolLM2-135M-Instruct" / "model.onnx"))

    def engine_factory(model_dir: Path, state_dir: Path, settings: Any, progress: Any = None) -> Any:
        s = settings.copy()
        s.provider = "cpu"
        return open_engine(model_dir, state_dir, s, progress)

    w = make_window(None, wait_ready=False, model_preparer=prepare, engine_factory=engine_factory,
                    model_lister=lambda: [])
    qtbot.waitUntil(lambda: w.engine_error is not None and w.chats_loaded, timeout=30000)
    assert w.empty.isVisible() and w.empty.import_btn.isVisible() and w.empty.get_btn.isVisible()
    assert w.empty.title.text() == "No model yet"
    assert "Errno" not in w.banner.label.text() and "a file or folder is missing" in w.banner.label.text()

    write_tiny_gguf(tmp_path / "tiny.gguf", TinyConfig(seed=5))
    chosen = []
    monkeypatch.setattr(import_dialog, "choose_gguf",
                        lambda *_: chosen.append(w.import_model(tmp_path / "tiny.gguf", gguf=True)))
    qtbot.mouseClick(w.empty.import_btn, Qt.MouseButton.LeftButton)
    assert chosen
    qtbot.waitUntil(lambda: w.engine is not None, timeout=120000)
    assert w.settings.model == "tiny"
    assert not w.empty.import_btn.isVisible() and w.empty.title.text() == "How can I help?"
    send(qtbot, w, "hello", timeout=30000)                   # and it answers
    assert w.chat_view.widgets[-1].item.role == "assistant"


def test_rename_with_the_chat_list_folded_away_asks_in_a_dialog(make_window, engine, qtbot):
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QInputDialog

    w = make_window(engine)
    send(qtbot, w, "Some question")
    cid = w.current_id
    w.view_ctl.set_sidebar(False, user=True)

    def answer() -> None:
        dlg = next((d for d in QApplication.topLevelWidgets()
                    if isinstance(d, QInputDialog) and d.isVisible()), None)
        if dlg is None:
            QTimer.singleShot(10, answer)
            return
        assert dlg.textValue() == "Some question"
        dlg.setTextValue("  Travel   plans ")
        dlg.accept()

    QTimer.singleShot(0, answer)
    w.composer.edit.setFocus()
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_F2)
    assert w.chat_model.chat(cid).title == "Travel plans"
    assert w.header.title_label.text() == "Travel plans"
    wait_idle(qtbot, w)
    assert w.store.get_conversation(cid).title == "Travel plans"
