"""Chats are titled from their first exchange by the loaded model, in the background, in a side
session that leaves the chat's own session alone; the user's rename always wins; garbage keeps
the first-message title; a temporary chat's title stays in memory. On the fake engine, on the
real engine over a tiny model, and (slow) on the default model."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit

from app.chat.titling import ASK, MAX_TITLE_CHARS, clean_title, title_prompt
from engine.api import SessionKind
from engine.base.paths import DEFAULT_MODEL_NAME
from tests.support.gui import send, wait_idle
from tests.support.tiny_window import make_tiny_model, real_window


def _is_title_prompt(messages: Any) -> bool:
    return bool(messages) and ASK in messages[-1].content


class Replies:
    """The fake's canned replies: `title` for a title prompt (after `gate`, when set), else `answer`."""

    def __init__(self, title: str, answer: str = "Here is a plan for your trip.") -> None:
        self.title, self.answer = title, answer
        self.gate: threading.Event | None = None
        self.asked: list[Any] = []

    def __call__(self, messages: Any) -> str:
        if not _is_title_prompt(messages):
            return self.answer
        self.asked.append(list(messages))
        if self.gate is not None:
            self.gate.wait(10)
        return self.title


def _outcomes(w: Any) -> list[tuple[str, str | None]]:
    seen: list[tuple[str, str | None]] = []
    w.auto_titles.titled.connect(lambda cid, title: seen.append((cid, title)))
    w.auto_titles.kept.connect(lambda cid: seen.append((cid, None)))
    return seen


def test_the_first_exchange_titles_the_chat_in_a_side_session(make_window, engine, qtbot):
    replies = Replies('**"Lisbon trip plan."**')
    engine.reply = replies
    w = make_window(engine, auto_titles=True)
    seen = _outcomes(w)
    send(qtbot, w, "I want to visit Lisbon for three days in May, what should I see?")
    cid = w.current_id
    qtbot.waitUntil(lambda: bool(seen), timeout=5000)
    assert seen == [(cid, "Lisbon trip plan")]
    assert w.chat_model.chat(cid).title == "Lisbon trip plan" == w.title_label.text()
    wait_idle(qtbot, w)
    detail = w.store.get_conversation(cid)
    assert (detail.title, detail.title_locked) == ("Lisbon trip plan", False)
    # the model read the exchange, in a temporary session of its own, closed afterwards
    [prompt] = replies.asked
    assert "visit Lisbon" in prompt[-1].content
    side = [args[0] for args in engine.called("open") if args[1] is SessionKind.TEMPORARY]
    assert len(side) == 1 and side[0] != cid and side[0] in [a[0] for a in engine.called("close")]
    assert side[0] not in engine.sessions and not any(side[0] in p.name for p in engine.disk_files())
    assert all(args[0] in (cid, side[0]) for args in engine.called("generate"))
    # the chat's own session holds the chat, not the title prompt
    assert "title" not in " ".join(engine.sessions[cid].history)
    # a regenerated first reply, and later turns, do not ask again
    with qtbot.waitSignal(w.replyFinished, timeout=5000):
        w.regenerate(w.chat_view.widgets[-1].item.id)
    send(qtbot, w, "And in Porto?")
    wait_idle(qtbot, w)
    assert len(replies.asked) == 1 and w.chat_model.chat(cid).title == "Lisbon trip plan"


def test_a_stopped_first_reply_is_titled_once_a_reply_is_complete(make_window, engine, qtbot):
    replies = Replies("Sourdough starter", answer=" ".join(["Here"] * 400))   # 20 s unless stopped
    engine.reply = replies
    engine.delay = 0.05
    w = make_window(engine, auto_titles=True)
    seen = _outcomes(w)
    with qtbot.waitSignal(w.replyFinished, timeout=5000):
        send(qtbot, w, "Explain how sourdough starter works", wait=False)
        qtbot.waitUntil(lambda: "Here" in w.chat_view.stream_text, timeout=5000)
        w.stop()
    wait_idle(qtbot, w)
    assert not replies.asked and not seen          # a stopped reply is no exchange to name
    engine.delay = 0.0
    with qtbot.waitSignal(w.replyFinished, timeout=5000):
        w.regenerate(w.chat_view.widgets[-1].item.id)
    qtbot.waitUntil(lambda: bool(seen), timeout=5000)
    assert seen == [(w.current_id, "Sourdough starter")]


def test_similar_chats_get_titles_that_tell_them_apart(make_window, engine, qtbot):
    def reply(messages: Any) -> str:
        if _is_title_prompt(messages):
            return "Title: " + ("Dinner in Lisbon" if "Lisbon" in messages[-1].content else "Dinner in Porto")
        return "Sure."
    engine.reply = reply
    w = make_window(engine, auto_titles=True)
    seen = _outcomes(w)
    long = "Can you recommend a good restaurant for a family dinner with two kids this Saturday in "
    send(qtbot, w, long + "Lisbon?")
    w.new_chat()
    send(qtbot, w, long + "Porto?")
    qtbot.waitUntil(lambda: len(seen) == 2, timeout=5000)
    titles = sorted(r.title for r in w.chat_model.all_chats())
    assert titles == ["Dinner in Lisbon", "Dinner in Porto"]


def test_a_rename_before_the_title_arrives_wins(make_window, engine, qtbot):
    replies = Replies("Model title")
    replies.gate = threading.Event()
    engine.reply = replies
    w = make_window(engine, auto_titles=True)
    seen = _outcomes(w)
    send(qtbot, w, "Some question")
    cid = w.current_id
    qtbot.waitUntil(lambda: bool(replies.asked), timeout=5000)     # the title is being made
    w.sidebar.view.setFocus()
    w.sidebar.select(cid)
    qtbot.keyClick(w.sidebar.view, Qt.Key.Key_F2)
    editor = w.sidebar.view.findChild(QLineEdit)
    editor.selectAll()
    qtbot.keyClicks(editor, "My own name")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.chat_model.chat(cid).title == "My own name", timeout=2000)
    replies.gate.set()
    qtbot.waitUntil(lambda: bool(seen), timeout=5000)
    assert seen == [(cid, None)]
    wait_idle(qtbot, w)
    detail = w.store.get_conversation(cid)
    assert (detail.title, detail.title_locked) == ("My own name", True)
    assert w.chat_model.chat(cid).title == "My own name" == w.title_label.text()


@pytest.mark.parametrize("answer", ["", "  \n\n ", "!!! ??? ...", "12345 67890", "\ufffd\ufffd",
                                    "<think>The user wants a title, so", "I'm sorry, I can't do that."])
def test_an_empty_or_garbage_answer_keeps_the_first_message_title(make_window, engine, qtbot, answer):
    engine.reply = Replies(answer)
    w = make_window(engine, auto_titles=True)
    seen = _outcomes(w)
    send(qtbot, w, "Explain how sourdough starter works")
    qtbot.waitUntil(lambda: bool(seen), timeout=5000)
    assert seen == [(w.current_id, None)]
    assert w.chat_model.chat(w.current_id).title == "Explain how sourdough starter works"


def test_a_temporary_chat_is_titled_in_memory_only(make_window, engine, qtbot, home):
    engine.reply = Replies("Secret birthday plan")
    w = make_window(engine, auto_titles=True)
    seen = _outcomes(w)
    w.new_chat(temporary=True)
    send(qtbot, w, "Plan a surprise party for Anna")
    cid = w.current_id
    qtbot.waitUntil(lambda: bool(seen), timeout=5000)
    assert seen == [(cid, "Secret birthday plan")]
    assert w.temp.get_conversation(cid).title == "Secret birthday plan"
    wait_idle(qtbot, w)
    assert all(r.id != cid for r in w.store.list_conversations())
    on_disk = b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())
    assert b"Secret birthday" not in on_disk and b"surprise party" not in on_disk


def test_editing_the_first_message_asks_for_a_new_title(make_window, engine, qtbot):
    replies = Replies("Bread baking")
    engine.reply = replies
    w = make_window(engine, auto_titles=True)
    seen = _outcomes(w)
    send(qtbot, w, "How do I bake bread?")
    qtbot.waitUntil(lambda: len(seen) == 1, timeout=5000)
    replies.title = "Cake baking"
    with qtbot.waitSignal(w.replyFinished, timeout=5000):
        w.edit_message(w.chat_view.widgets[0].item.id, "How do I bake a cake?")
    qtbot.waitUntil(lambda: len(seen) == 2, timeout=5000)
    assert seen[1] == (w.current_id, "Cake baking") and w.chat_model.chat(w.current_id).title == "Cake baking"


def test_clean_title() -> None:
    assert clean_title('Title: "Trip to Lisbon".') == "Trip to Lisbon"
    assert clean_title("\n\n## **Sourdough basics**\nThis chat is about…") == "Sourdough basics"
    assert clean_title("<think>short</think>\n«Python (basics)»") == "Python (basics)"
    long = clean_title("word " * 40)
    assert long is not None and len(long) <= MAX_TITLE_CHARS and long.endswith("\u2026")
    for garbage in ("", "\"\"", "...", "-- ##", "Title:", "User: hello", "title", "a\x00b c",
                    "I'm here to help with anything", "Sure! Here it is"):
        assert clean_title(garbage) is None, garbage
    prompt = title_prompt("x" * 10_000, "z" * 10_000)
    assert len(prompt[-1].content) < 2000 and "z" not in prompt[-1].content   # a long paste: its start
    # a first message that says little: the reply's start is read too
    short = title_prompt("hi", "Hello! Shall we plan your trip to Japan? " * 50)[-1].content
    assert "User: hi" in short and "trip to Japan" in short and len(short) < 700


@pytest.fixture(scope="module")
def tiny_long(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-titles"))


def _chat_ids_on_disk(home: Path) -> set[str]:
    sessions = home / "state" / "sessions"
    return {p.name.split(".")[0] for p in sessions.iterdir()} if sessions.is_dir() else set()


def test_real_engine_titles_in_a_side_session_that_leaves_the_chat_alone(make_window, home, qtbot, tiny_long):
    w = real_window(make_window, home, qtbot, tiny_long)
    seen = _outcomes(w)
    send(qtbot, w, "Hello there, how are you today?", timeout=60000)
    cid = w.current_id
    first = dict(w.last_figures)
    qtbot.waitUntil(lambda: bool(seen), timeout=60000)
    [(chat, title)] = seen
    assert chat == cid
    wait_idle(qtbot, w, timeout=30000)
    shown = w.chat_model.chat(cid).title
    if title is not None:      # the random model's answer, cleaned; or the first message kept
        assert shown == title == w.store.get_conversation(cid).title and clean_title(title) == title
    else:
        assert shown == "Hello there, how are you today?"
    assert w.engine.stats()["open_sessions"] == 1          # the side session is closed
    assert _chat_ids_on_disk(home) <= {cid}                 # and left nothing on disk
    # the chat's own KV was not touched: the next turn reuses all of the first one's prompt
    send(qtbot, w, "Tell me more.", timeout=60000)
    assert w.last_figures["reused_tokens"] >= first["prompt_tokens"]


def _default_model() -> Path | None:
    for base in (os.environ.get("AMBER_TEST_HOME"), Path(__file__).resolve().parents[2] / ".amber-dev"):
        if base and (Path(base) / "models" / DEFAULT_MODEL_NAME / "model.onnx").exists():
            return Path(base) / "models" / DEFAULT_MODEL_NAME
    return None


@pytest.mark.slow
@pytest.mark.skipif(_default_model() is None, reason="the default model is not prepared (make default-model)")
def test_default_model_titles_a_chat(make_window, home, qtbot):
    w = real_window(make_window, home, qtbot, _default_model())
    seen = _outcomes(w)
    question = "What is the capital of France? Answer in one sentence."
    send(qtbot, w, question, timeout=120000)
    qtbot.waitUntil(lambda: bool(seen), timeout=120000)
    [(cid, title)] = seen
    assert title is not None and title != question and len(title) <= MAX_TITLE_CHARS and "\n" not in title
    assert w.chat_model.chat(cid).title == title


def test_a_turn_that_read_the_chat_before_its_title_was_stored_does_not_undo_it(make_window, engine, qtbot):
    """The next reply's outcome, read from the store just before the title was written, puts the
    old title back on the list (RepliesController does that with every outcome): it comes back."""
    from dataclasses import replace

    from app.chat.turn import TurnOutcome
    from app.store.titles import chat_title

    engine.reply = Replies("Lisbon trip plan")
    w = make_window(engine, auto_titles=True)
    seen = _outcomes(w)
    send(qtbot, w, "I want to visit Lisbon for three days in May, what should I see?")
    cid = w.current_id
    qtbot.waitUntil(lambda: bool(seen), timeout=5000)
    wait_idle(qtbot, w)
    first = chat_title("I want to visit Lisbon for three days in May, what should I see?")
    stale = TurnOutcome(rows=w.store.active_path(cid), assistant=None, figures=None, info=None, error=None,
                        detail=replace(w.store.get_conversation(cid), title=first))
    w.chat_model.update(cid, title=first)          # what the replies controller shows from it
    w.replies.turnFinished.emit(cid, stale, None, False)
    assert w.chat_model.chat(cid).title == "Lisbon trip plan" == w.store.get_conversation(cid).title
