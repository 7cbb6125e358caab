"""A full disk on a pinned chat: the window shows a persistent notice on that chat ("couldn't save
to disk: …; kept in memory"), only on that chat, and it goes when a later save succeeds."""
from __future__ import annotations

from tests.support.gui import open_chat, send, wait_idle

ENOSPC = "[Errno 28] No space left on device: 'sessions/x.json'"


def test_failed_save_shows_a_persistent_notice_on_that_chat(make_window, engine, qtbot):
    w = make_window(engine)
    send(qtbot, w, "A chat worth keeping")
    pinned = w.current_id
    w.toggle_pin(pinned)
    qtbot.waitUntil(lambda: not w.chat_model.chat(pinned).saving, timeout=5000)
    assert not w.save_notice.isVisible()

    engine.fail_saves = ENOSPC
    send(qtbot, w, "And one more thing")
    qtbot.waitUntil(lambda: w.save_notice.isVisible(), timeout=5000)
    text = w.save_notice.text()
    assert text.startswith("Couldn't save to disk: the disk is full (x.json)")   # in words, no errno
    assert "kept in memory" in text
    # The transcript on screen is intact, and the notice stays (not a transient status message).
    wait_idle(qtbot, w)
    assert [m.item.content for m in w.chat_view.widgets if m.item.role == "user"] == [
        "A chat worth keeping", "And one more thing"]
    qtbot.wait(300)
    assert w.save_notice.isVisible()

    # Another chat has no notice; coming back shows it again.
    w.new_chat()
    send(qtbot, w, "Another chat")
    other = w.current_id
    assert other != pinned and not w.save_notice.isVisible()
    open_chat(qtbot, w, pinned)
    assert w.save_notice.isVisible() and w.save_notice.text() == text

    # The disk has room again: the next save succeeds and the notice goes.
    engine.fail_saves = None
    send(qtbot, w, "Thanks")
    qtbot.waitUntil(lambda: not w.save_notice.isVisible(), timeout=5000)
    assert engine.info(pinned).save_error is None
