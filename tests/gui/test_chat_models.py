"""A chat remembers its model, on the real engine with two tiny imported models: switching says
what it costs first (and can be declined), a chat made with the other model offers it, a pinned
chat's saved KV survives a stay on another model and resumes on its own, and a chat that goes on
with another model is then that model's."""
from __future__ import annotations

import json
import shutil
import socket
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from app.gui.backend import Backend
from tests.support.gui import open_chat, send
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

TINY = TinyConfig(n_layers=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_ff=128, context_length=512)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    from engine.convert import convert_gguf
    root = tmp_path_factory.mktemp("tiny-models")
    made = {}
    for name, seed in (("Tiny-A", 1), ("Tiny-B", 2)):
        src = write_tiny_gguf(root / f"{name}.gguf", replace(TINY, seed=seed))
        made[name] = convert_gguf(src.path, root / "models" / name)
    return made


@pytest.fixture
def window(make_window, home, qtbot, tiny_models):
    for name, folder in tiny_models.items():
        shutil.copytree(folder, home / "models" / name)
    (home / "settings.json").write_text(json.dumps({"model": "Tiny-A", "sampling": {"max_new_tokens": 6}}))
    return open_window(make_window, home, qtbot)


def open_window(make_window, home, qtbot):
    from app.gui.main_window import MainWindow
    w = MainWindow(home=home, backend=Backend())
    make_window.windows.append(w)
    w.confirm = lambda *a: True
    w.resize(1100, 720)
    w.show()
    qtbot.waitUntil(lambda: bool((w.engine is not None or w.engine_error) and w.chats_loaded), timeout=60000)
    assert w.engine_error is None, w.engine_error
    qtbot.waitUntil(lambda: w.model_picker.findData("Tiny-B") >= 0, timeout=10000)
    return w


def pick(qtbot, w, choice: str, *, confirm: bool) -> list[str]:
    """Choose `choice` in the picker; the confirmation answers `confirm`. What it said."""
    asked: list[str] = []
    w.confirm_switch = lambda title, text: asked.append(text) or confirm
    if confirm:
        with qtbot.waitSignal(w.engineReady, timeout=60000):
            w.model_picker.activated.emit(w.model_picker.findData(choice))
    else:
        w.model_picker.activated.emit(w.model_picker.findData(choice))
    return asked


def stored_model(w, chat_id: str) -> str | None:
    return w.chats.store_for(chat_id).get_conversation(chat_id).model_choice


def test_a_chat_remembers_its_model_and_its_pinned_kv(qtbot, window, home):
    w = window
    send(qtbot, w, "Hello there", timeout=60000)
    regular = w.current_id
    w.new_chat()
    send(qtbot, w, "Pin me", timeout=60000)
    pinned = w.current_id
    assert stored_model(w, regular) == stored_model(w, pinned) == "Tiny-A"
    w.toggle_pin(pinned)
    qtbot.waitUntil(lambda: w.chat_model.chat(pinned).kv_state == "disk"
                    and not w.chat_model.chat(pinned).saving, timeout=30000)

    # switching says what it costs first; declined, nothing changes
    in_memory = sum(1 for r in w.chat_model.all_chats() if r.kv_state == "memory" and not r.pinned)
    assert in_memory >= 1
    whose = "1 chat's" if in_memory == 1 else f"{in_memory} chats'"
    asked = pick(qtbot, w, "Tiny-B", confirm=False)
    assert asked == [f"Switching to Tiny-B unloads Tiny-A; {whose} in-memory context will be re-read on "
                     "the next message (pinned chats keep theirs on disk)."]
    assert w.engine is not None and w.engine.model_name == "Tiny-A"
    assert w.model_picker.currentData() == "Tiny-A" and w.settings.model == "Tiny-A"

    saved = home / "state" / "sessions" / f"{pinned}.json"
    made_by_a = json.loads(saved.read_text())["fingerprint"]
    pick(qtbot, w, "Tiny-B", confirm=True)
    assert w.engine.model_name == "Tiny-B"
    # the pinned chat on screen was made with Tiny-A: the notice offers it, saying what it costs
    qtbot.waitUntil(lambda: w.model_notice.isVisible(), timeout=10000)
    assert w.model_notice.switch_btn.text() == "Switch to Tiny-A"
    assert "made with Tiny-A; Tiny-B is loaded" in w.model_notice.text.text()
    assert "Switching to Tiny-A unloads Tiny-B" in w.model_notice.text.text()
    # sending with Tiny-B would replace its saved KV: asked first; declined, the text stays
    asked = []
    w.confirm_switch = lambda title, text: asked.append(text) or False
    w.composer.set_text("Still there?")
    w.composer.try_send()
    assert asked and "valid only for that model" in asked[0]
    assert w.composer.edit.toPlainText() == "Still there?" and len(w.chat_view.widgets) == 2
    # regenerating would replace it too: asked; declined, nothing runs
    asked.clear()
    w.regenerate(w.chat_view.widgets[-1].item.id)
    assert asked and w.stream is None and w.engine.model_name == "Tiny-B"
    # opened on Tiny-B, its saved KV is still Tiny-A's (not resumed, not replaced)
    qtbot.waitUntil(lambda: pinned in w.chats.engine_kv)     # the engine opened it
    assert w.engine.info(pinned).kv_bytes_disk == 0
    assert json.loads(saved.read_text())["fingerprint"] == made_by_a

    # accepted: Tiny-A is loaded first, then the message goes, and the chat resumes from disk
    w.confirm_switch = lambda title, text: True
    with qtbot.waitSignal(w.replyFinished, timeout=15000):
        w.composer.try_send()
    assert w.engine.model_name == "Tiny-A" and w.model_picker.currentData() == "Tiny-A"
    assert not w.model_notice.isVisible()
    assert "from disk" in w.status.started.text(), w.status.started.text()
    assert [mw.item.content for mw in w.chat_view.widgets][2] == "Still there?"
    assert stored_model(w, pinned) == "Tiny-A"

    # a chat made with the other model, kept on the loaded one, becomes that model's
    pick(qtbot, w, "Tiny-B", confirm=True)
    open_chat(qtbot, w, regular)
    qtbot.waitUntil(lambda: w.model_notice.isVisible(), timeout=10000)
    w.model_notice.keep_btn.click()
    assert not w.model_notice.isVisible()
    send(qtbot, w, "Go on with B", timeout=60000)
    assert stored_model(w, regular) == "Tiny-B" and not w.model_notice.isVisible()

    # the notice's own switch (the notice said the cost): the pinned chat resumes on Tiny-A
    open_chat(qtbot, w, pinned)
    qtbot.waitUntil(lambda: w.model_notice.isVisible(), timeout=10000)
    with qtbot.waitSignal(w.engineReady, timeout=60000):
        w.model_notice.switch_btn.click()
    assert w.engine.model_name == "Tiny-A" and not w.model_notice.isVisible()
    send(qtbot, w, "Once more", timeout=60000)
    assert "from disk" in w.status.started.text(), w.status.started.text()
    open_chat(qtbot, w, regular)      # Tiny-B's now: offered, since Tiny-A is loaded
    qtbot.waitUntil(lambda: w.model_notice.isVisible(), timeout=10000)
    assert w.model_notice.switch_btn.text() == "Switch to Tiny-B"

    # regenerating in the pinned chat while Tiny-B is loaded: Tiny-A first, then the new reply
    pick(qtbot, w, "Tiny-B", confirm=True)
    open_chat(qtbot, w, pinned)
    last = w.chat_view.widgets[-1].item
    w.confirm_switch = lambda title, text: True
    with qtbot.waitSignal(w.replyFinished, timeout=15000):
        w.regenerate(last.id)
    assert w.engine.model_name == "Tiny-A"
    assert w.chat_view.widgets[-1].item.id != last.id and w.chat_view.widgets[-1].item.sibling_count == 2
    assert "from disk" in w.status.started.text(), w.status.started.text()

    # a temporary chat remembers its model too (the memory store)
    w.new_chat(temporary=True)
    send(qtbot, w, "Temporary", timeout=60000)
    assert w.chats.temp.get_conversation(w.current_id).model_choice == "Tiny-A"


def test_the_api_server_answers_to_default_across_a_model_switch(qtbot, window):
    """The README's request (model "default") works whichever model is picked; /v1/models lists
    the picked one."""
    w = window
    port = free_port()
    control = w.api_server()
    with qtbot.waitSignal(control.changed, timeout=30000):
        control.start(port, "")
    url = f"http://127.0.0.1:{port}/v1"
    assert w.status.api.text() == f"API on 127.0.0.1:{port}"
    first = ask(qtbot, url)
    assert first["models"] == ["Tiny-A"] and first["reply_model"] == "Tiny-A"
    pick(qtbot, w, "Tiny-B", confirm=True)
    qtbot.waitUntil(lambda: control.running, timeout=30000)      # it serves the new model
    qtbot.waitUntil(lambda: w.status.api.isVisible())
    second = ask(qtbot, url)
    assert second["models"] == ["Tiny-B"] and second["reply_model"] == "Tiny-B"
    assert second["old_id"] == 404


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask(qtbot, url: str) -> dict:
    """The real openai client, off the UI thread: the models, a reply to "default", the old id."""
    import openai
    out: dict = {}

    def run() -> None:
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)
        out["models"] = [m.id for m in client.models.list().data]
        out["reply_model"] = client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=4).model
        try:
            client.chat.completions.create(model="Tiny-A", messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=4)
            out["old_id"] = 200
        except openai.NotFoundError:
            out["old_id"] = 404
    t = threading.Thread(target=run)
    t.start()
    qtbot.waitUntil(lambda: not t.is_alive(), timeout=60000)
    return out


def test_a_chat_made_before_models_were_recorded_is_known_by_its_model_name(qtbot, window, make_window, home):
    """Older chats have only the engine's name for their model: it is enough to offer it."""
    w = window
    send(qtbot, w, "Made long ago", timeout=60000)
    old = w.current_id
    w.store.set_model(old, "Tiny-A", None)        # as a chat from before the column was there
    make_window.shutdown(w)
    settings = json.loads((home / "settings.json").read_text())
    (home / "settings.json").write_text(json.dumps({**settings, "model": "Tiny-B"}))
    w2 = open_window(make_window, home, qtbot)
    assert w2.engine.model_name == "Tiny-B"
    qtbot.waitUntil(lambda: w2.current_id == old)          # the last chat opens
    qtbot.waitUntil(lambda: w2.model_notice.isVisible(), timeout=10000)
    assert w2.model_notice.switch_btn.text() == "Switch to Tiny-A"
