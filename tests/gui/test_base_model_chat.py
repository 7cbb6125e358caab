"""A base model (no chat template) in the window, over the real engine (offscreen): sending a
message does not produce a made-up chat; the chat says in words why (the model is a base model that
continues text, choose a chat model, the API's /v1/completions still works) and keeps the message."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.gui.backend import Backend
from tests.support.gui import send
from tests.support.server import TINY
from tests.support.tiny_gguf import write_tiny_gguf

NAME = "tiny-base"


@pytest.fixture(scope="module")
def base_model(tmp_path_factory) -> Path:
    from engine.convert import convert_gguf
    root = tmp_path_factory.mktemp("base")
    src = write_tiny_gguf(root / f"{NAME}.gguf", TINY, omit=("tokenizer.chat_template",))
    return convert_gguf(src.path, root / NAME)


def test_a_chat_with_a_base_model_says_why_it_cannot_answer(make_window, home, qtbot, base_model):
    from app.gui.main_window import MainWindow

    w = MainWindow(home=home, backend=Backend(model_preparer=lambda name, progress: base_model))
    make_window.windows.append(w)
    w.resize(1100, 720)
    w.show()
    qtbot.waitUntil(lambda: bool((w.engine is not None or w.engine_error) and w.chats_loaded), timeout=60000)
    assert w.engine_error is None
    send(qtbot, w, "Once upon a time", timeout=60000)
    words = (f"{NAME} has no chat template: it is a base model, which continues text but does not chat. "
             f"Choose a chat (instruct) model for this chat; {NAME} still completes text through the API "
             "server's /v1/completions")
    assert w.status.message.text() == f"Generation failed: {words}"
    # the message stays; no assistant reply was invented
    assert [x.item.role for x in w.chat_view.widgets][:1] == ["user"]
    assert all(x.item.role != "assistant" or not x.item.content for x in w.chat_view.widgets)
