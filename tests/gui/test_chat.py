"""The chat view and composer: streaming, Stop, regenerate, edit + resend, alternatives,
Enter / Shift+Enter, the stay-at-bottom rule, links and copy buttons."""
from __future__ import annotations

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication

from app.gui.widgets import chat_view as cv
from engine.api import ChatMessage
from tests.support.gui import bubble_texts, open_chat, send, wait_idle

LONG = " ".join(f"word{i}" for i in range(300))


def test_reply_streams_in_and_is_rerendered_at_a_throttled_rate(make_window, engine, qtbot):
    engine.delay = 0.01
    engine.reply = LONG
    w = make_window(engine)
    send(qtbot, w, "Stream please", wait=False)
    assert w.composer.generating and w.composer.stop_btn.isVisible()
    assert w.composer.edit.isEnabled()            # you can write the next message meanwhile
    qtbot.waitUntil(lambda: "word20" in w.chat_view.stream_text, timeout=5000)
    shown = w.chat_view.widgets[-1].body.toPlainText()
    assert shown.startswith("word0 word1") and "word299" not in shown   # partial text on screen
    start = w.chat_view.render_count
    with qtbot.waitSignal(w.replyFinished, timeout=10000):
        pass
    renders = w.chat_view.render_count - start
    # 300 chunks over ~3 s at most one render per 80 ms: far fewer renders than chunks
    assert 5 <= renders <= 300 * 0.25
    assert w.chat_view.widgets[-1].body.toPlainText().strip().endswith("word299")
    assert not w.composer.generating and w.composer.send_btn.isVisible()
    assert w.status.speed.text() == "42.5 tok/s"
    assert "prefilled" in w.status.started.text()


def test_stop_cancels_at_once_and_keeps_the_partial_reply(make_window, engine, qtbot):
    engine.delay = 0.02
    engine.reply = LONG
    w = make_window(engine)
    send(qtbot, w, "Go on forever", wait=False)
    qtbot.waitUntil(lambda: "word5" in w.chat_view.stream_text, timeout=5000)
    qtbot.mouseClick(w.composer.stop_btn, Qt.MouseButton.LeftButton)
    assert not w.composer.generating                 # the UI is free at once: before any event is handled
    frozen = w.chat_view.widgets[-1].item.content
    with qtbot.waitSignal(w.replyFinished, timeout=3000):
        pass
    assert engine.cancelled_count == 1
    path = w.store.active_path(w.current_id)
    assert path[-1].role == "assistant" and path[-1].figures["finish_reason"] == "cancelled"
    assert path[-1].content.startswith(frozen[: len(frozen) - 10])
    assert "stopped" in w.chat_view.widgets[-1].meta.text()
    # Esc stops too; and sending right after Stop works (it waits for the old stream to end)
    send(qtbot, w, "again", wait=False)
    qtbot.waitUntil(lambda: "word3" in w.chat_view.stream_text, timeout=5000)
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Escape)
    assert not w.composer.generating
    engine.reply = "short answer"
    with qtbot.waitSignal(w.replyFinished, timeout=5000):
        send(qtbot, w, "third", wait=False)
    qtbot.waitUntil(lambda: w.stream is None and bubble_texts(w)[-1] == ("assistant", "short answer"),
                    timeout=5000)
    assert [r for r, _ in bubble_texts(w)] == ["user", "assistant"] * 3


def test_enter_sends_shift_enter_breaks_the_line(make_window, engine, qtbot):
    w = make_window(engine)
    edit = w.composer.edit
    edit.setFocus()
    qtbot.keyClicks(edit, "line one")
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(edit, "line two")
    assert edit.toPlainText() == "line one\nline two" and w.stream is None
    with qtbot.waitSignal(w.replyFinished, timeout=5000):
        qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert edit.toPlainText() == ""
    assert engine.generations[-1][-1] == ChatMessage("user", "line one\nline two")
    # blank input does not send
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert len(engine.generations) == 1 and w.stream is None


def test_sending_waits_for_the_model(make_window, engine, qtbot):
    import threading
    gate = threading.Event()

    def slow(md, sd, s):
        gate.wait(5)
        return engine

    w = make_window(engine, wait_ready=False, engine_factory=slow)
    qtbot.waitUntil(lambda: w.chats_loaded, timeout=3000)
    assert w.banner.isVisible()                    # visible progress while the model loads
    assert w.composer.edit.isEnabled() and not w.composer.send_btn.isEnabled()
    w.composer.set_text("too early")
    qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    assert w.stream is None and w.composer.text() == "too early"   # kept, not lost
    gate.set()
    qtbot.waitUntil(lambda: w.engine is not None, timeout=3000)
    assert w.composer.send_btn.isEnabled() and not w.banner.isVisible()


def test_regenerate_and_flip_between_alternatives(make_window, engine, qtbot):
    replies = iter(["First answer", "Second answer", "Third answer"])
    engine.reply = lambda msgs: next(replies)
    w = make_window(engine)
    send(qtbot, w, "Question")
    last = w.chat_view.widgets[-1]
    assert last.regen_btn.isVisible() and not last.prev_btn.isVisible()
    with qtbot.waitSignal(w.replyFinished, timeout=5000):
        qtbot.mouseClick(last.regen_btn, Qt.MouseButton.LeftButton)
    assert bubble_texts(w) == [("user", "Question"), ("assistant", "Second answer")]
    # the engine saw the same prompt again (its KV prefix is reused)
    assert engine.generations[0] == engine.generations[1]
    last = w.chat_view.widgets[-1]
    assert last.sib_label.text() == "2 / 2" and last.prev_btn.isEnabled()
    assert not last.next_btn.isEnabled()
    qtbot.mouseClick(last.prev_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bubble_texts(w)[-1] == ("assistant", "First answer"), timeout=3000)
    assert w.chat_view.widgets[-1].sib_label.text() == "1 / 2"
    # the choice is stored: reopening shows it
    assert w.store.active_path(w.current_id)[-1].content == "First answer"
    qtbot.keyClick(w, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)   # Ctrl+R regenerates
    qtbot.waitUntil(lambda: bubble_texts(w)[-1] == ("assistant", "Third answer") and w.stream is None,
                    timeout=5000)
    assert w.chat_view.widgets[-1].sib_label.text() == "3 / 3"


def test_edit_an_earlier_message_and_resend(make_window, engine, qtbot):
    engine.reply = lambda msgs: f"Answer to {msgs[-1].content}"
    w = make_window(engine)
    send(qtbot, w, "first question")
    send(qtbot, w, "second question")
    assert len(w.chat_view.widgets) == 4
    first_user = w.chat_view.widgets[0]
    assert first_user.edit_btn.isVisible() and first_user.edit_btn.isEnabled()
    qtbot.mouseClick(first_user.edit_btn, Qt.MouseButton.LeftButton)
    assert first_user.editor is not None
    first_user.editor.selectAll()
    qtbot.keyClicks(first_user.editor, "edited question")
    with qtbot.waitSignal(w.replyFinished, timeout=5000):
        qtbot.keyClick(first_user.editor, Qt.Key.Key_Return)
    assert bubble_texts(w) == [("user", "edited question"),
                               ("assistant", "Answer to edited question")]
    # the engine was given only the shared prefix plus the edit (it truncates its KV there)
    sent = engine.generations[-1]
    assert [m.content for m in sent if m.role != "system"] == ["edited question"]
    assert w.chat_view.widgets[0].sib_label.text() == "2 / 2"
    # flip back to the original first message: its whole branch returns
    qtbot.mouseClick(w.chat_view.widgets[0].prev_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(w.chat_view.widgets) == 4, timeout=3000)
    assert [c for _, c in bubble_texts(w)] == [
        "first question", "Answer to first question", "second question", "Answer to second question"]


def test_stays_at_bottom_only_while_the_user_is_there(make_window, engine, qtbot):
    engine.delay = 0.004
    engine.reply = "\n\n".join(f"Paragraph {i} " + "text " * 20 for i in range(45))
    w = make_window(engine)
    w.resize(900, 500)
    send(qtbot, w, "long please", wait=False)
    bar = w.chat_view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 400, timeout=8000)
    qtbot.waitUntil(lambda: w.chat_view.at_bottom(), timeout=2000)   # following the reply
    # the user scrolls up: the view stays where they are while the reply grows
    bar.setValue(0)
    grown_from = bar.maximum()
    qtbot.waitUntil(lambda: bar.maximum() > grown_from + 200, timeout=8000)
    assert bar.value() == 0 and not w.chat_view.stick_to_bottom
    # back at the bottom: following again
    bar.setValue(bar.maximum())
    assert w.chat_view.stick_to_bottom
    with qtbot.waitSignal(w.replyFinished, timeout=15000):
        pass
    qtbot.wait(50)
    assert w.chat_view.at_bottom()


def test_links_open_in_the_browser_and_code_is_copied(make_window, engine, qtbot, monkeypatch):
    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toString()) or True)
    w = make_window(engine)
    send(qtbot, w, "show me")
    reply = w.chat_view.widgets[-1]
    html = reply.body.toHtml()
    assert "<table" in html and "greet" in html           # table and highlighted code block
    assert reply.item.rendered.code_blocks == ('def greet(name: str) -> str:\n    return f"Hello, {name}!"',)
    reply.body.anchorClicked.emit(QUrl("https://onnxruntime.ai"))
    assert opened == ["https://onnxruntime.ai"]
    reply.body.anchorClicked.emit(QUrl("copy:0"))
    assert QGuiApplication.clipboard().text().startswith("def greet(name: str)")
    reply.body.anchorClicked.emit(QUrl("file:///etc/passwd"))  # not opened
    assert opened == ["https://onnxruntime.ai"]
    qtbot.mouseClick(reply.copy_btn, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == reply.item.content


def test_markdown_rendering_is_safe_and_handles_open_fences():
    from app.gui.models.markdown_render import render
    from app.gui.theme import DARK, LIGHT

    r = render("# Title\n\n<script>alert(1)</script>\n\n![x](file:///etc/passwd)\n\n```py\nx = 1", LIGHT)
    assert "<h1>Title</h1>" in r.html
    assert "<script>" not in r.html and "&lt;script&gt;" in r.html
    assert "passwd" in r.html and '<img src="file' not in r.html   # shown as text, not loaded
    assert all(src == "amber:copy" for src in __import__("re").findall(r'<img src="([^"]+)"', r.html))
    assert r.code_blocks == ("x = 1",) and "copy:0" in r.html   # closed for rendering
    assert render("```py\nx = 1\n```", DARK).html != render("```py\nx = 1\n```", LIGHT).html


def test_a_long_chat_loads_in_batches(make_window, engine, qtbot, monkeypatch):
    w = make_window(engine)
    send(qtbot, w, "hello")
    cid = w.current_id
    for i in range(40):
        w.store.add_message(cid, "user", f"question {i}")
        w.store.add_message(cid, "assistant", f"answer {i}\n\n```python\nprint({i})\n```")
    w.new_chat()
    monkeypatch.setattr(cv, "BATCH_BUDGET_S", 0.0)     # one widget per event-loop turn
    batches = []
    w.chat_view._fill_timer.timeout.connect(lambda: batches.append(1))
    open_chat(qtbot, w, cid)
    assert len(w.chat_view.widgets) == 82 and len(batches) >= 40
    assert w.chat_view.at_bottom()
    wait_idle(qtbot, w)
