"""The view in daily use: delete and undo, neighbours, titles of copies and
branches, the temporary chat's empty state, queued sends, themes, remembered folders."""
from __future__ import annotations

from PySide6.QtCore import QEvent, QPointF
from PySide6.QtGui import QEnterEvent
from PySide6.QtWidgets import QApplication

import app.gui.controllers.deletions as mw_mod   # UNDO_MS
from app.gui.models.titles import derived_title
from tests.support.gui import bubble_texts, open_chat, send, wait_idle


def _hover(widget, inside: bool) -> None:
    if inside:
        ev = QEnterEvent(QPointF(5, 5), QPointF(5, 5), QPointF(5, 5))
    else:
        ev = QEvent(QEvent.Type.Leave)
    QApplication.sendEvent(widget, ev)


def test_undo_toast_lasts_ten_seconds_and_pauses_while_hovered(make_window, engine, qtbot, monkeypatch):
    assert mw_mod.UNDO_MS >= 10000
    monkeypatch.setattr(mw_mod, "UNDO_MS", 400)
    w = make_window(engine)
    send(qtbot, w, "to be deleted")
    cid = w.current_id
    w.delete_chat(cid)
    assert w.toast.isVisible()
    _hover(w.toast, True)
    undo_clock = w._toast_timer               # the toast's countdown (the undo itself lasts till quit)
    assert not undo_clock.isActive()          # the countdown stands still while hovered
    QApplication.processEvents()
    assert w.toast.isVisible() and engine.called("delete") == []
    assert cid in w.pending_deletes
    _hover(w.toast, False)
    qtbot.waitUntil(lambda: not w.toast.isVisible(), timeout=3000)
    # the toast goes, the undo stays (Ctrl+Z) until Amber closes: nothing is deleted before
    assert engine.called("delete") == [] and cid in w.pending_deletes


def test_after_delete_a_neighbouring_chat_is_shown_never_the_temporary(make_window, engine, qtbot):
    w = make_window(engine)
    ids = []
    for text in ("oldest", "middle", "newest"):
        w.new_chat()
        send(qtbot, w, text)
        ids.append(w.current_id)
    w.new_chat(temporary=True)
    send(qtbot, w, "temporary one")
    temp = w.current_id
    order = w.chat_model.visible_chat_ids()
    assert order.index(temp) < order.index(ids[2])      # the temporary chat is the newest
    open_chat(qtbot, w, ids[2])
    w.delete_chat(ids[2])
    assert w.current_id == ids[1]                       # the next one down, not the temporary
    w.delete_chat(ids[1])
    assert w.current_id == ids[0]
    w.delete_chat(ids[0])                                # only the temporary chat is left
    assert w.current_id is None and w.draft is not None and not w.draft.temporary


def test_copies_and_branches_get_distinguishable_titles(make_window, engine, qtbot):
    w = make_window(engine)
    send(qtbot, w, "Trip plan")
    src = w.current_id
    with qtbot.waitSignal(w.chatLoaded, timeout=5000):
        w.duplicate_chat(src)
    with qtbot.waitSignal(w.chatLoaded, timeout=5000):
        w.duplicate_chat(src)
    first_msg = w.store.active_path(src)[0].id
    with qtbot.waitSignal(w.chatLoaded, timeout=5000):
        w.branch_from(first_msg) if w.current_id == src else w.duplicate_chat(src, first_msg)
    titles = sorted(r.title for r in w.chat_model.all_chats())
    assert titles == sorted(["Trip plan", "Trip plan (branch)", "Trip plan (copy)",
                             "Trip plan (copy 2)"])
    assert sorted(c.title for c in w.store.list_conversations()) == titles
    assert derived_title("Trip plan (copy 2)", titles, branch=False) == "Trip plan (copy 3)"


def test_temporary_empty_state_does_not_talk_about_pinned_chats(make_window, engine, qtbot):
    w = make_window(engine)
    assert "Pinned" in w.empty_sub.text()
    w.new_chat(temporary=True)
    assert w.empty.isVisible()
    assert "pinned" not in w.empty_sub.text().lower() and "disk" in w.empty_sub.text()
    w.new_chat()
    assert "Pinned" in w.empty_sub.text()


def test_sending_in_a_second_chat_while_one_generates_queues_visibly(make_window, engine, qtbot):
    engine.delay = 0.02
    engine.reply = " ".join(f"w{i}" for i in range(40))
    w = make_window(engine)
    send(qtbot, w, "first chat question", wait=False)
    first = w.current_id
    qtbot.waitUntil(lambda: "w3" in w.chat_view.stream_text, timeout=5000)
    w.new_chat()
    assert w.composer.edit.isEnabled() and w.composer.send_btn.isEnabled()
    send(qtbot, w, "second chat question", wait=False)
    second = w.current_id
    assert second != first and second is not None
    assert w.queued and w.queued[0].chat_id == second
    bubble = w.chat_view.widgets[-1]
    assert bubble.item.role == "user" and bubble.item.content == "second chat question"
    assert "Queued" in bubble.meta.text()
    assert w.chat_model.chat(second).busy
    # the first reply finishes, then the queued one runs by itself
    qtbot.waitUntil(lambda: len(engine.called("generate")) == 2, timeout=10000)
    assert engine.called("generate")[1][0] == second
    qtbot.waitUntil(lambda: w.stream is None and not w.queued, timeout=10000)
    wait_idle(qtbot, w)
    assert [r for r, _ in bubble_texts(w)] == ["user", "assistant"]
    assert bubble_texts(w)[0] == ("user", "second chat question")
    assert [m.role for m in w.store.active_path(first)] == ["user", "assistant"]
    assert [m.role for m in w.store.active_path(second)] == ["user", "assistant"]


def test_queued_send_to_a_chat_not_on_screen_runs_there(make_window, engine, qtbot):
    engine.delay = 0.02
    engine.reply = " ".join(f"w{i}" for i in range(30))
    w = make_window(engine)
    send(qtbot, w, "chat one")
    one = w.current_id
    w.new_chat()
    send(qtbot, w, "chat two")
    two = w.current_id
    send(qtbot, w, "long one", wait=False)              # chat two generates
    open_chat(qtbot, w, one)
    send(qtbot, w, "follow-up in one", wait=False)       # queued
    assert w.queued and w.queued[0].chat_id == one
    open_chat(qtbot, w, two)                             # look elsewhere meanwhile
    qtbot.waitUntil(lambda: not w.queued and w.stream is None, timeout=10000)
    wait_idle(qtbot, w)
    assert [m.content for m in w.store.active_path(one)][2] == "follow-up in one"
    assert len(w.store.active_path(one)) == 4
    assert [r for r, _ in bubble_texts(w)] == ["user", "assistant"] * 2   # chat two untouched
    open_chat(qtbot, w, one)
    assert [r for r, _ in bubble_texts(w)] == ["user", "assistant"] * 2


def test_a_queued_send_to_a_deleted_chat_is_dropped(make_window, engine, qtbot):
    engine.delay = 0.02
    engine.reply = " ".join(f"w{i}" for i in range(30))
    w = make_window(engine)
    send(qtbot, w, "chat one")
    one = w.current_id
    w.new_chat()
    send(qtbot, w, "long reply please", wait=False)     # chat two generates
    open_chat(qtbot, w, one)
    send(qtbot, w, "never sent", wait=False)
    assert len(w.queued) == 1
    w.delete_chat(one)                                   # undo still possible, but not sent
    qtbot.waitUntil(lambda: w.stream is None and not w.queued, timeout=10000)
    wait_idle(qtbot, w)
    assert len(engine.called("generate")) == 2
    assert all("never sent" not in m.content for m in w.store.active_path(one))
