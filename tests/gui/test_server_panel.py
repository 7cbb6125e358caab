"""The settings dialog's API server switch, on the window's own engine (the fake GUI engine here),
with the official openai client against the address it shows."""
from __future__ import annotations

import socket
import threading

import openai
import pytest
from PySide6.QtCore import QTimer
from PySide6.QtGui import QGuiApplication


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_switch_serves_the_windows_engine_and_copies_the_address(qtbot, make_window, engine, home):
    from app.gui.dialogs.settings_dialog import SettingsDialog
    w = make_window(engine)
    control = w.api_server()
    assert control is w.api_server()          # one per window
    dlg = SettingsDialog(w.settings, home, parent=w, server=control)
    qtbot.addWidget(dlg)
    panel = dlg.server_panel
    assert panel is not None and not panel.enabled.isChecked() and not panel.copy.isEnabled()
    port = free_port()
    panel.port.setValue(port)
    panel.api_key.setText("gui-key")
    with qtbot.waitSignal(control.changed, timeout=30000) as started:
        panel.enabled.setChecked(True)
    url = f"http://127.0.0.1:{port}/v1"
    assert started.args == [url] and panel.address.text() == url and panel.copy.isEnabled()
    assert not panel.port.isEnabled()
    panel.copy.click()
    assert QGuiApplication.clipboard().text() == url

    # A real client, off the UI thread; the UI keeps processing events meanwhile.
    ticks: list[int] = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start(5)
    out: dict = {}

    def ask() -> None:
        client = openai.OpenAI(base_url=url, api_key="gui-key", max_retries=0, timeout=60)
        out["models"] = [m.id for m in client.models.list().data]
        out["reply"] = client.chat.completions.create(
            model=engine.model_name, messages=[{"role": "user", "content": "Hello"}], max_tokens=50)
        try:
            openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
        except openai.AuthenticationError:
            out["refused"] = True
    t = threading.Thread(target=ask)
    t.start()
    qtbot.waitUntil(lambda: not t.is_alive(), timeout=60000)
    timer.stop()
    assert out["models"] == [engine.model_name]
    assert out["reply"].choices[0].message.content
    assert out.get("refused")
    assert any(call[0] == "generate" for call in engine.calls)     # the window's engine served it
    assert len(ticks) > 1

    with qtbot.waitSignal(control.changed, timeout=30000) as stopped:
        panel.enabled.setChecked(False)
    assert stopped.args == [""] and panel.address.text() == "" and not control.running
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_busy_port_is_reported_and_the_switch_goes_back_off(qtbot, make_window, engine, home):
    from app.gui.dialogs.settings_dialog import SettingsDialog
    w = make_window(engine)
    dlg = SettingsDialog(w.settings, home, parent=w, server=w.api_server())
    qtbot.addWidget(dlg)
    panel = dlg.server_panel
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        panel.port.setValue(taken.getsockname()[1])
        with qtbot.waitSignal(w.api_server().failed, timeout=30000):
            panel.enabled.setChecked(True)
    assert "could not start" in panel.message.text()
    assert not panel.enabled.isChecked() and not w.api_server().running


def test_closing_the_window_stops_the_server(qtbot, make_window, engine, home):
    w = make_window(engine)
    control = w.api_server()
    port = free_port()
    with qtbot.waitSignal(control.changed, timeout=30000):
        control.start(port, "")
    socket.create_connection(("127.0.0.1", port), timeout=5).close()     # listening
    make_window.shutdown(w)
    qtbot.waitUntil(lambda: not control.running, timeout=30000)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
