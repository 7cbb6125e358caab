"""A reasoning model's `<think>…</think>` in the chat view (fake engine, offscreen).

The thinking streams under a “Thinking…” line, then collapses under “Thought for N s”; the body
shows only the answer; a click expands the reasoning. The history sent back is the reply as the
model wrote it, and the model's chat template decides what of it the prompt shows
(tests/engine/text/test_reasoning.py).
"""
from __future__ import annotations

from PySide6.QtCore import Qt

import pytest

from app.gui.models.thinking_time import estimated_seconds, seconds_text
from app.gui.widgets.thinking import ThinkingPanel
from app.gui.models.message import reply_of
from engine.text.reasoning import Reply, split_reasoning
from engine.text import reasoning as engine_reasoning
from tests.support.gui import open_chat, send, wait_idle

REASONING = "The user says hello.\nI should greet them back briefly."
REPLY = f"<think>\n{REASONING}\n</think>\n\nHello **there**, how can I help?"


def test_thinking_streams_then_collapses(make_window, engine, qtbot):
    engine.delay = 0.03
    engine.reply = REPLY
    w = make_window(engine)
    send(qtbot, w, "Hi", wait=False)
    qtbot.waitUntil(lambda: w.chat_view.widgets and w.chat_view.widgets[-1].thinking.isVisible(), timeout=5000)
    bubble = w.chat_view.widgets[-1]
    if "</think>" not in w.chat_view.stream_text:
        assert bubble.thinking.toggle.text() == "Thinking…"
        assert "hello" not in bubble.body.toPlainText()      # the reasoning never lands in the body
    with qtbot.waitSignal(w.replyFinished, timeout=10000):
        pass
    bubble = w.chat_view.widgets[-1]
    panel = bubble.thinking
    assert panel.isVisible() and panel.toggle.text().startswith("Thought for ")
    assert panel.seconds is not None and panel.seconds > 0 and not panel.estimated
    assert bubble.body.toPlainText().strip() == "Hello there, how can I help?"
    assert not panel.text.isVisible() and not panel.expanded        # collapsed
    qtbot.mouseClick(panel.toggle, Qt.MouseButton.LeftButton)
    assert panel.expanded and panel.text.isVisible() and panel.text.text() == REASONING
    assert panel.toggle.arrowType() == Qt.ArrowType.DownArrow
    qtbot.mouseClick(panel.toggle, Qt.MouseButton.LeftButton)
    assert not panel.text.isVisible()
    assert bubble.item.content == REPLY            # stored as written: the split is for showing


def test_history_sent_back_is_the_reply_as_written(make_window, engine, qtbot):
    engine.reply = REPLY
    w = make_window(engine)
    send(qtbot, w, "Hi")
    engine.reply = "Plain answer."
    send(qtbot, w, "Again")
    sent = engine.generations[-1]
    assert [m.role for m in sent][-3:] == ["user", "assistant", "user"]
    assert sent[-2].content == REPLY     # the engine's template decides what to keep
    last = w.chat_view.widgets[-1]
    assert not last.thinking.isVisible() and last.body.toPlainText().strip() == "Plain answer."


def test_reloaded_reply_shows_estimated_time(make_window, engine, qtbot):
    engine.reply = REPLY
    w = make_window(engine)
    send(qtbot, w, "Hi")
    cid = w.current_id
    w.new_chat()
    wait_idle(qtbot, w)
    open_chat(qtbot, w, cid)
    bubble = [b for b in w.chat_view.widgets if b.item.role == "assistant"][-1]
    panel = bubble.thinking
    assert not panel.isHidden() and not panel.expanded      # shown (the bubble may still be laid out)
    assert bubble.body.toPlainText().strip() == "Hello there, how can I help?"
    assert bubble.item.figures["decode_tokens_per_s"] == 42.5      # the fake engine's, stored
    assert panel.estimated and panel.toggle.text().startswith("Thought for about ")


def test_panel_alone(qtbot):
    panel = ThinkingPanel()
    qtbot.addWidget(panel)
    panel.set_reply(split_reasoning("no thinking here"), streaming=False)
    assert panel.isHidden()
    panel.set_reply(split_reasoning("<think>\nhalf"), streaming=True)
    assert panel.toggle.text() == "Thinking…" and panel.seconds is None
    panel.set_reply(split_reasoning("<think>\nhalf done</think>ok"), streaming=True)
    assert panel.seconds is not None and panel.toggle.text().startswith("Thought for ")
    assert panel.text.text() == "half done"


def test_time_texts():
    assert seconds_text(0.04) == "0.1 s" and seconds_text(0.44) == "0.4 s"
    assert seconds_text(3.4) == "3 s" and seconds_text(125) == "2 min 5 s"
    reply = Reply("x" * 30, "y" * 70)
    assert estimated_seconds(reply, {"generated_tokens": 40, "decode_tokens_per_s": 10.0}) == 4 * 0.3
    assert estimated_seconds(reply, {"generated_tokens": 40}) is None
    assert estimated_seconds(reply, None) is None


@pytest.mark.parametrize(("text", "reasoning", "content", "thinking"), [
    (REPLY, REASONING, "Hello **there**, how can I help?", False),
    ("<think>\nstill thinking", "still thinking", "", True),
    ("Let me see.\n</think>\n\n42", "Let me see.", "42", False),       # the R1 distills' opening tag is in the prompt
    ("Use the <think> tag like <think>x</think>.", None, "Use the <think> tag like <think>x</think>.", False),
])
def test_a_bubble_splits_as_the_engine_does(qtbot, text, reasoning, content, thinking):
    """The panel shows what the engine's rule splits off; the body keeps the answer."""
    reply = engine_reasoning.split_reasoning(text)
    assert (reply.reasoning, reply.content, reply.thinking) == (reasoning, content, thinking)
    panel = ThinkingPanel()
    qtbot.addWidget(panel)
    panel.set_reply(reply_of("assistant", text), streaming=thinking)
    assert panel.isHidden() is (reasoning is None)
    if reasoning is not None:
        assert panel.text.text() == reasoning
        assert panel.toggle.text() == ("Thinking…" if thinking else "Thought")   # no figures: no time
