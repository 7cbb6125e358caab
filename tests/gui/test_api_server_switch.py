"""The local API server's switch in daily use: it is remembered across restarts (port and key too),
the status bar says it is on and opens its settings, and clients find it again after a restart."""
from __future__ import annotations

import json
import socket
import threading

import openai
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask_models(qtbot, url: str, key: str) -> list[str]:
    """The real openai client, off the UI thread (the window keeps serving meanwhile)."""
    out: dict = {}

    def ask() -> None:
        client = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=60)
        out["models"] = [m.id for m in client.models.list().data]
    t = threading.Thread(target=ask)
    t.start()
    qtbot.waitUntil(lambda: not t.is_alive(), timeout=60000)
    return out["models"]


def in_settings(qtbot, w, check) -> dict:
    """Run `check(dialog)` on the settings dialog the window opens next, then cancel it."""
    seen: dict = {}

    def look() -> None:
        dlg = QApplication.activeModalWidget() or getattr(w, "settings_dialog", None)
        if dlg is None or not dlg.isVisible():
            QTimer.singleShot(20, look)
            return
        try:
            check(dlg)
            seen["ok"] = True
        finally:
            dlg.reject()
    QTimer.singleShot(0, look)
    return seen


def test_the_switch_is_remembered_shown_and_restored(qtbot, make_window, engine, home):
    from app.gui.dialogs.settings_dialog import SettingsDialog
    w = make_window(engine)
    assert not w.status.api.isVisible()
    control = w.api_server()
    dlg = SettingsDialog(w.settings, home, parent=w, server=control)
    qtbot.addWidget(dlg)
    port = free_port()
    dlg.server_panel.port.setValue(port)
    dlg.server_panel.api_key.setText("k-123")
    with qtbot.waitSignal(control.changed, timeout=30000):
        dlg.server_panel.enabled.setChecked(True)
    dlg.reject()
    # the status bar says it is on, and where
    qtbot.waitUntil(lambda: w.status.api.isVisible())
    assert w.status.api.text() == f"API on 127.0.0.1:{port}"
    saved = json.loads((home / "settings.json").read_text())
    assert (saved["api_server"], saved["api_port"], saved["api_key"]) == (True, port, "k-123")

    # the indicator opens the settings at the server's switch
    def at_the_switch(d) -> None:
        assert d.server_panel is not None and d.server_panel.enabled.isChecked()
        assert d.focusWidget() is d.server_panel.enabled

    seen = in_settings(qtbot, w, at_the_switch)
    w.status.api.click()
    assert seen.get("ok")
    # cancelling the settings keeps the server's state (its switch acts at once, not on OK)
    assert w.settings.api_server and control.running
    make_window.shutdown(w)

    # a restart serves again, on the same port with the same key, and says so
    w2 = make_window(engine)
    qtbot.waitUntil(lambda: w2.status.api.isVisible(), timeout=30000)
    assert w2.status.api.text() == f"API on 127.0.0.1:{port}"
    assert ask_models(qtbot, f"http://127.0.0.1:{port}/v1", "k-123") == [engine.model_name]

    # turned off: remembered off, the indicator goes
    control2 = w2.api_server()
    with qtbot.waitSignal(control2.changed, timeout=30000):
        control2.stop()
    assert not w2.status.api.isVisible()
    assert json.loads((home / "settings.json").read_text())["api_server"] is False
    make_window.shutdown(w2)
    w3 = make_window(engine)
    assert w3.api_server_started is None and not w3.status.api.isVisible()


def test_a_failed_restore_says_why_and_keeps_the_setting(qtbot, make_window, engine, home):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        (home / "settings.json").write_text(json.dumps({"api_server": True, "api_port": port}))
        w = make_window(engine)
        qtbot.waitUntil(lambda: w.status.message.text().startswith("API server: could not start"),
                        timeout=30000)
    assert not w.status.api.isVisible()
    assert w.settings.api_server      # tried again on the next start


def test_bad_api_settings_in_the_file_fall_back_to_the_defaults(tmp_path):
    from app.gui.settings import Settings
    for raw in ({"api_server": "yes", "api_port": 80, "api_key": 7}, {"api_port": True},
                {"api_port": 70000}, {"api_port": "8081"}):
        s = Settings.from_dict(raw)
        assert (s.api_server, s.api_port, s.api_key) == (False, 8080, ""), raw
    s = Settings.from_dict({"api_server": True, "api_port": 9001, "api_key": "k"})
    path = tmp_path / "settings.json"
    s.save(path)
    assert (Settings.load(path).api_server, Settings.load(path).api_port, Settings.load(path).api_key) == \
        (True, 9001, "k")
