"""A base model (no chat template) in the window, over the real engine (offscreen): its chat runs in
completion mode (app.chat.completion_mode): the chat's text, laid out as one document, is what the
model continues, exactly the tokens a raw completion of that text would get (one BOS, no made-up
chat format), and the status line says so. Where the engine takes no text prompts (a remote
server), the refusal is said in words (tests/gui/test_error_words.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.chat.completion_mode import transcript
from app.gui.backend import Backend
from engine.api import ChatMessage
from tests.support.gui import send
from tests.support.server import TINY
from tests.support.tiny_gguf import write_tiny_gguf

NAME = "tiny-base"


@pytest.fixture(scope="module")
def base_model(tmp_path_factory) -> Path:
    from engine.convert import convert_gguf
    root = tmp_path_factory.mktemp("base")
    src = write_tiny_gguf(root / f"{NAME}.gguf", TINY, omit=("tokenizer.chat_template", "tokenizer.ggml.add_bos_token"),
                          metadata={"tokenizer.ggml.add_bos_token": True})
    return convert_gguf(src.path, root / NAME)


def test_the_transcript_is_one_plain_text():
    msgs = [ChatMessage("system", "Be brief."), ChatMessage("user", "Once upon a time"),
            ChatMessage("assistant", " there was a fox."), ChatMessage("user", "The end.")]
    assert transcript(msgs) == "Once upon a time there was a fox.\n\nThe end."
    assert transcript([ChatMessage("system", "S")]) == ""


def test_a_chat_with_a_base_model_continues_its_text(make_window, home, qtbot, base_model, shots):
    from app.gui.main_window import MainWindow

    w = MainWindow(home=home, backend=Backend(model_preparer=lambda name, progress: base_model))
    make_window.windows.append(w)
    w.resize(1100, 720)
    w.show()
    qtbot.waitUntil(lambda: bool((w.engine is not None or w.engine_error) and w.chats_loaded), timeout=60000)
    assert w.engine_error is None
    send(qtbot, w, "Once upon a time", timeout=60000)
    assert w.status.message.text() == (f"Completion mode: {NAME} has no chat template (a base model), "
                                       "so it continues the chat's text")
    items = [x.item for x in w.chat_view.widgets]
    assert [i.role for i in items] == ["user", "assistant"]
    assert items[1].content and not items[1].error
    # the prompt was the raw completion of the text: one BOS, then the text's own tokens
    engine = w.engines.engine
    expected = engine.encode_prompt("Once upon a time")
    assert expected[0] == engine.model.tokenizer.token_to_id("<|im_start|>") != expected[1]
    assert items[1].figures["prompt_tokens"] == len(expected)
    shots(w, "base-model-chat")
    send(qtbot, w, "The end.", timeout=60000)
    items = [x.item for x in w.chat_view.widgets]
    assert [i.role for i in items] == ["user", "assistant", "user", "assistant"]
    second = engine.encode_prompt(f"Once upon a time{items[1].content}\n\nThe end.")
    assert items[3].figures["prompt_tokens"] == len(second)
