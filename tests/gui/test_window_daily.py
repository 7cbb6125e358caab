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
