"""The window over a remote engine: the "Connect to a server" dialog, then chats that stream from a
real `amber-engine serve` process on 127.0.0.1 (the tiny model), stored as usual."""
from __future__ import annotations

import json
import os
import socket
import stat

import pytest
from PySide6.QtWidgets import QDialogButtonBox

from tests.support.gui import send, wait_idle

from tests.support import server as server_fixtures   # ServerProcess, the tiny model's config
from tests.support.tiny_gguf import write_tiny_gguf

KEY = server_fixtures.KEY_A
SYSTEM = " ".join(f"Rule {i}: the quick brown fox jumps over the lazy dog." for i in range(10))


@pytest.fixture(scope="module")
def amber_server(tmp_path_factory):
    from engine.convert import convert_gguf
    src = write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny-chat.gguf",
                                          server_fixtures.TINY)
    model = convert_gguf(src.path, tmp_path_factory.mktemp("tiny-model") / "tiny-chat")
    s = server_fixtures.ServerProcess(model, tmp_path_factory.mktemp("srv") / "state", "--api-key", KEY)
    yield s
    s.stop()


def connect(qtbot, w, url: str, key: str, model: str | None = None):
    """Fills the dialog like a user: address, key, List models, Connect."""
    dlg = w.connect_remote_dialog()
    qtbot.waitUntil(lambda: w.tasks.pending == 0, timeout=5000)
    dlg.url.setText(url)
    dlg.key.setText(key)
    if model is None:
        dlg.list_btn.click()
        qtbot.waitUntil(lambda: dlg.list_btn.isEnabled() and bool(dlg.message.text())
                        and not dlg.message.text().startswith("Asking"), timeout=10000)
    else:
        dlg.model.setEditText(model)
    return dlg


def test_connect_list_models_chat_and_store(make_window, engine, home, qtbot, amber_server, shots):
    w = make_window(engine)                   # starts on the (fake) local engine
    w.settings.system_prompt = SYSTEM
    w.settings.sampling.max_new_tokens = 16     # the tiny model's window is 512 tokens
    dlg = connect(qtbot, w, amber_server.url, KEY)
    assert [dlg.model.itemText(i) for i in range(dlg.model.count())] == ["tiny-chat"]
    assert "serves 1 model" in dlg.message.text()
    assert dlg.key.echoMode() == dlg.key.EchoMode.Password
    assert dlg.buttons.button(QDialogButtonBox.StandardButton.Cancel) is not None
    with qtbot.waitSignal(w.engineReady, timeout=20000):
        dlg.connect_btn.click()
    assert w.engine.capabilities.remote and w.engine.flavor == "amber"
    assert w.settings.model.startswith("remote:")
    assert w.status.provider.text() == f"remote · Amber · 127.0.0.1:{amber_server.port}"
    qtbot.waitUntil(lambda: w.model_picker.currentData() == w.settings.model, timeout=5000)
    assert "tiny-chat" in w.model_picker.currentText() and "(remote)" in w.model_picker.currentText()

    # The key: in remotes.json (owner-only), never in settings.json.
    remotes = home / "remotes.json"
    assert stat.S_IMODE(os.stat(remotes).st_mode) == 0o600
    assert json.loads(remotes.read_text())["remotes"][0]["api_key"] == KEY
    assert KEY not in (home / "settings.json").read_text()

    send(qtbot, w, "Hello there!", timeout=30000)
    reply = w.chat_view.widgets[-1].item
    assert reply.role == "assistant" and reply.content and not reply.error
    cid = w.current_id
    detail = w.store.get_conversation(cid)
    assert detail.model_id == "tiny-chat" and len(detail.cache_salt) == 43
    msgs = w.store.active_path(cid)
    assert [m.role for m in msgs] == ["user", "assistant"] and msgs[1].content == reply.content
    figs = msgs[1].figures
    assert figs["provider"].startswith("remote · Amber") and figs["prefilled_tokens"] > 128
    assert w.status.started.text().startswith("prefilled ")

    send(qtbot, w, "And again?", timeout=30000)      # the server's cache, under this chat's salt
    figs2 = w.store.active_path(cid)[-1].figures
    assert figs2["reused_tokens"] >= 128 and w.status.started.text().startswith("reused ")
    assert w.store.get_conversation(cid).cache_salt == detail.cache_salt

    w.new_chat(temporary=True)
    assert w.temp_notice.isVisibleTo(w) and "outside Amber's control" in w.temp_notice.text()
    send(qtbot, w, "Hello there!", timeout=30000)
    tmp_id = w.current_id
    assert w.chat_view.widgets[-1].item.content
    shots(w, "remote-temporary-chat")
    assert w.store is not None and all(r.id != tmp_id for r in w.store.list_conversations())
    wait_idle(qtbot, w)

    # The dialog again: it edits the saved server, which can be forgotten (key and all).
    dlg = w.connect_remote_dialog()
    qtbot.waitUntil(lambda: dlg.url.text() == amber_server.url, timeout=5000)
    assert dlg.key.text() == KEY and dlg.model.currentText() == "tiny-chat"
    assert dlg.forget_btn.isVisibleTo(dlg)
    with qtbot.waitSignal(w.engineReady, timeout=20000):
        dlg.forget_btn.click()
    assert w.engine is engine and w.settings.model == ""
    assert json.loads(remotes.read_text()) == {"remotes": []}
    qtbot.waitUntil(lambda: all(not str(w.model_picker.itemData(i) or "").startswith("remote:")
                                for i in range(w.model_picker.count())), timeout=5000)
    wait_idle(qtbot, w)


def test_an_unreachable_server_is_a_banner_not_a_crash(make_window, engine, home, qtbot):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    w = make_window(engine)
    dlg = connect(qtbot, w, f"http://127.0.0.1:{port}/v1", "", model="m")
    dlg.list_btn.click()
    qtbot.waitUntil(lambda: dlg.message.text().startswith("cannot reach"), timeout=10000)
    dlg.connect_btn.click()
    qtbot.waitUntil(lambda: w.engine_error is not None, timeout=20000)
    assert w.engine_error.startswith(f"cannot reach 127.0.0.1:{port}")
    assert w.banner.isVisibleTo(w)
    # Back to the local model from the picker: it loads again.
    i = w.model_picker.findData("")
    with qtbot.waitSignal(w.engineReady, timeout=20000):
        w.model_picker.setCurrentIndex(i)
        w._on_model_picked(i)
    assert w.engine is engine


def test_dialog_refuses_a_bad_address_and_a_missing_model(make_window, engine, qtbot):
    w = make_window(engine)
    dlg = w.connect_remote_dialog()
    dlg.url.setText("ftp://example/v1")
    dlg.model.setEditText("m")
    dlg.connect_btn.click()
    assert dlg.isVisible() and "not a server address" in dlg.message.text()
    dlg.url.setText("http://127.0.0.1:9/v1")
    dlg.model.setEditText("")
    dlg.connect_btn.click()
    assert dlg.isVisible() and "model name" in dlg.message.text()
    dlg.reject()
