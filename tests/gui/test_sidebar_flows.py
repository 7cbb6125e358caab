"""Sidebar flows driven like a user: new / temporary chat, pin, rename, delete + undo, search,
duplicate, from the keyboard and the context menu, over the real store."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit

from app.gui.controllers import deletions as mw_mod   # UNDO_MS
from engine.api import SessionKind
from tests.support.gui import open_chat, send, wait_idle


def test_new_chat_is_created_on_first_message(make_window, engine, qtbot):
    w = make_window(engine)
    assert w.draft is not None and w.current_id is None
    assert w.chat_model.visible_chat_ids() == []
    send(qtbot, w, "What is the capital of France?")
    cid = w.current_id
    assert cid and w.chat_model.visible_chat_ids() == [cid]
    row = w.store.get_conversation(cid)
    assert row.title == "What is the capital of France?"
    assert [m.role for m in w.store.active_path(cid)] == ["user", "assistant"]
    assert w.chat_model.chat(cid).kv_state == "memory"
    assert engine.called("open")[0][:2] == (cid, SessionKind.REGULAR)
    # Ctrl+N starts another draft; the first chat stays in the list
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert w.current_id is None and w.draft is not None and not w.draft.temporary
    assert w.chat_view.widgets == [] and w.empty.isVisible()
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier
                   | Qt.KeyboardModifier.ShiftModifier)
    assert w.draft.temporary and w.temp_notice.isVisible()


def test_pin_writes_kv_in_background_and_unpin_removes_it(make_window, engine, qtbot):
    engine.save_delay = 0.4
    w = make_window(engine)
    send(qtbot, w, "Remember this please")
    cid = w.current_id
    w.sidebar.view.setFocus()
    w.sidebar.select(cid)
    qtbot.keyClick(w.sidebar.view, Qt.Key.Key_P, Qt.KeyboardModifier.ControlModifier)
    row = w.chat_model.chat(cid)
    assert row.pinned and row.saving                     # at once, with progress shown
    assert w.chat_model.headers()[0] == "Pinned"
    qtbot.waitUntil(lambda: not w.chat_model.chat(cid).saving, timeout=5000)
    assert w.chat_model.chat(cid).kv_state == "disk"
    assert engine.called("pin") == [(cid,)]
    assert len(engine.disk_files()) == 1
    wait_idle(qtbot, w)
    assert w.store.get_conversation(cid).pinned
    assert w.store.get_conversation(cid).kv_state == "disk"
    # unpin from the context menu
    menu = w.sidebar.build_menu(w.chat_model.index_of(cid))
    texts = [a.text().split("\t")[0] for a in menu.actions() if a.text()]   # "Pin\tCtrl+P"
    assert texts[:3] == ["Unpin", "Rename", "Duplicate"] and "Delete" in texts   # one gesture: no dialog follows
    w.sidebar.act_pin.trigger()
    qtbot.waitUntil(lambda: engine.called("unpin") == [(cid,)], timeout=3000)
    wait_idle(qtbot, w)
    assert engine.disk_files() == []
    assert not w.store.get_conversation(cid).pinned
    assert w.chat_model.chat(cid).kv_state == "memory"
    assert "Pinned" not in w.chat_model.headers()


def test_rename_inline_with_f2(make_window, engine, qtbot):
    w = make_window(engine)
    send(qtbot, w, "Some question")
    cid = w.current_id
    w.sidebar.view.setFocus()
    w.sidebar.select(cid)
    qtbot.keyClick(w.sidebar.view, Qt.Key.Key_F2)
    editor = w.sidebar.view.findChild(QLineEdit)
    assert editor is not None and editor.text() == "Some question"
    editor.selectAll()
    qtbot.keyClicks(editor, "Travel plans")
    qtbot.keyClick(editor, Qt.Key.Key_Return)            # the view commits on the next turn
    qtbot.waitUntil(lambda: w.chat_model.chat(cid).title == "Travel plans", timeout=2000)
    assert w.title_label.text() == "Travel plans"
    wait_idle(qtbot, w)
    detail = w.store.get_conversation(cid)
    assert detail.title == "Travel plans" and detail.title_locked


def test_delete_is_one_gesture_then_offers_undo(make_window, engine, qtbot, monkeypatch):
    monkeypatch.setattr(mw_mod, "UNDO_MS", 300)
    w = make_window(engine)
    send(qtbot, w, "first chat")
    first = w.current_id
    w.new_chat()
    send(qtbot, w, "second chat")
    second = w.current_id
    # one gesture: no confirmation is asked, the chat goes and an undo toast appears
    asked = []
    w.confirm = lambda title, text: asked.append(text) or False
    w.sidebar.select(second)
    w.sidebar.view.setFocus()
    qtbot.keyClick(w.sidebar.view, Qt.Key.Key_Delete)
    assert asked == []
    assert second not in w.chat_model.visible_chat_ids()
    assert w.current_id == first and w.toast.isVisible()     # the neighbour is shown
    qtbot.mouseClick(w.toast.button, Qt.MouseButton.LeftButton)
    assert second in w.chat_model.visible_chat_ids() and w.current_id == second
    assert second not in w.pending_deletes           # no countdown left to delete it
    wait_idle(qtbot, w)
    assert engine.called("delete") == []
    assert w.store.get_conversation(second)
    # left alone: deleted from the store and the engine when Amber closes (Ctrl+Z until then)
    w.delete_chat(first)
    qtbot.waitUntil(lambda: not w.toast.isVisible(), timeout=3000)
    assert engine.called("delete") == [] and first in w.pending_deletes
    make_window.shutdown(w)
    assert engine.called("delete") == [(first,)]
    from app.store import ConversationStore
    store = ConversationStore(w.home / "amber.sqlite3")      # the window closed its own
    assert [r.id for r in store.list_conversations()] == [second]
    assert store.pending_engine_deletes() == []


def test_search_filters_by_full_text(make_window, engine, qtbot):
    engine.reply = lambda msgs: "Reply about " + msgs[-1].content.split()[-1]
    w = make_window(engine)
    for text in ("Tell me about volcanoes", "Best pasta recipe", "Explain quantum tunnelling"):
        w.new_chat()
        send(qtbot, w, text)
    ids = {w.store.get_conversation(c).title: c for c in w.chat_model.visible_chat_ids()}
    qtbot.keyClicks(w.sidebar.search, "pasta")
    qtbot.waitUntil(lambda: w.chat_model.searching and
                    w.chat_model.visible_chat_ids() == [ids["Best pasta recipe"]], timeout=3000)
    assert w.chat_model.headers() == ["1 matching chat"]
    # a word that only occurs in an assistant reply
    w.sidebar.search.clear()
    qtbot.keyClicks(w.sidebar.search, "tunnelling")
    qtbot.waitUntil(lambda: w.chat_model.visible_chat_ids() == [ids["Explain quantum tunnelling"]],
                    timeout=3000)
    qtbot.keyClick(w.sidebar.search, Qt.Key.Key_Return)   # Enter jumps to the first hit
    qtbot.waitUntil(lambda: w.current_id == ids["Explain quantum tunnelling"], timeout=3000)
    w.sidebar.search.clear()
    qtbot.waitUntil(lambda: not w.chat_model.searching, timeout=3000)
    assert len(w.chat_model.visible_chat_ids()) == 3


def test_duplicate_from_keyboard(make_window, engine, qtbot):
    w = make_window(engine)
    send(qtbot, w, "Original chat")
    cid = w.current_id
    w.sidebar.select(cid)
    w.sidebar.view.setFocus()
    with qtbot.waitSignal(w.chatLoaded, timeout=3000):
        qtbot.keyClick(w.sidebar.view, Qt.Key.Key_D, Qt.KeyboardModifier.ControlModifier)
    assert w.current_id != cid
    assert len(w.chat_model.visible_chat_ids()) == 2
    assert [m.content for m in w.store.active_path(w.current_id)] == \
        [m.content for m in w.store.active_path(cid)]
    qtbot.waitUntil(lambda: len(w.chat_view.widgets) == 2, timeout=3000)


def test_keyboard_navigation_skips_headers(make_window, engine, qtbot):
    w = make_window(engine)
    for text in ("one", "two"):
        w.new_chat()
        send(qtbot, w, text)
    first, second = w.chat_model.visible_chat_ids()
    assert w.current_id == first        # the newest chat is on top
    w.sidebar.select(first)
    w.sidebar.view.setFocus()
    loads = []
    w.chatLoaded.connect(loads.append)
    qtbot.keyClick(w.sidebar.view, Qt.Key.Key_Down)     # moves the focus, opens nothing
    assert w.sidebar.current_id() == second and w.current_id == first
    with qtbot.waitSignal(w.chatLoaded, timeout=3000):
        qtbot.keyClick(w.sidebar.view, Qt.Key.Key_Return)   # Enter opens the focused chat
    assert w.current_id == second
    qtbot.keyClick(w.sidebar.view, Qt.Key.Key_Up)
    assert w.sidebar.current_id() == first and w.current_id == second
    with qtbot.waitSignal(w.chatLoaded, timeout=3000):
        qtbot.keyClick(w.sidebar.view, Qt.Key.Key_Space)    # and so does Space
    assert w.current_id == first and loads == [second, first]
    qtbot.keyClick(w.sidebar.view, Qt.Key.Key_Up)   # the "Today" header is not a stop
    assert w.sidebar.current_id() == first
    open_chat(qtbot, w, second)
