"""Temporary chats, restarts (pinned chats resume without prefill), quit, single instance,
settings persistence, start-up time and widget leaks."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QApplication

from app.gui.settings import Settings
from app.store import StoreError
from app.gui.single_instance import SingleInstance, server_name
from engine.api import SessionKind
from tests.support.fake_engine import FakeEngine
from tests.support.gui import open_chat, send, wait_idle

ROOT = Path(__file__).resolve().parents[2]


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_quitting_frees_the_temporary_chats(make_window, engine, qtbot):
    """The temporary chats' in-memory database is closed (its rows freed) when the window quits."""
    w = make_window(engine)
    w.new_chat(temporary=True)
    send(qtbot, w, "a temporary question")
    temp = w.temp
    assert temp.path == Path(":memory:") and temp.has(w.current_id)
    make_window.shutdown(w)
    with pytest.raises(StoreError) as closed:
        temp.list_conversations()
    assert closed.value.reason == "closed"


def test_temporary_chat_leaves_nothing_behind(make_window, engine, home, qtbot):
    w = make_window(engine)
    qtbot.waitUntil(lambda: (home / "amber.sqlite3").exists(), timeout=3000)
    wait_idle(qtbot, w)
    before = files_under(home)
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    send(qtbot, w, "a secret temporary question")
    send(qtbot, w, "and a follow-up")
    cid = w.current_id
    row = w.chat_model.chat(cid)
    assert row.temporary and "Temporary chat" in w.subtitle_label.text()
    assert engine.called("open")[0][:2] == (cid, SessionKind.TEMPORARY)
    assert w.store.list_conversations() == []                 # never given to the store
    menu = w.sidebar.build_menu(w.chat_model.index_of(cid))
    assert not w.sidebar.act_pin.isEnabled()                  # cannot be pinned
    assert w.sidebar.act_close.text().split("\t")[0] == "Close and discard"
    # searching finds it while it lives
    qtbot.keyClicks(w.sidebar.search, "secret")
    qtbot.waitUntil(lambda: w.chat_model.visible_chat_ids() == [cid], timeout=3000)
    w.sidebar.search.clear()
    qtbot.keyClick(w, Qt.Key.Key_W, Qt.KeyboardModifier.ControlModifier)   # close it
    qtbot.waitUntil(lambda: engine.called("close") == [(cid,)], timeout=3000)
    wait_idle(qtbot, w)
    assert w.chat_model.chat(cid) is None and not w.temp.has(cid)
    assert cid not in engine.sessions
    assert w.store.list_conversations() == [] and w.store.search("secret") == []
    w.store.close()
    w.store = None
    for f in (home / "amber.sqlite3-wal", home / "amber.sqlite3-shm"):
        f.unlink(missing_ok=True)
    after = files_under(home)
    assert after - before <= {"settings.json"}
    for name in after:
        p = home / name
        if p.suffix in (".json",):
            assert "secret" not in p.read_text()
    assert b"secret" not in (home / "amber.sqlite3").read_bytes()
    del menu


def test_quitting_discards_temporary_chats(make_window, engine, qtbot):
    w = make_window(engine)
    w.new_chat(temporary=True)
    send(qtbot, w, "temporary")
    cid = w.current_id
    make_window.shutdown(w)
    assert (cid,) in engine.called("close")
    assert cid not in engine.sessions
    assert Settings.load(make_window.home / "settings.json").last_chat_id is None


def test_restart_shows_pinned_chats_and_resumes_without_prefill(make_window, home, qtbot):
    e1 = FakeEngine(home / "state")
    w = make_window(e1)
    send(qtbot, w, "A long conversation worth keeping")
    pinned = w.current_id
    w.toggle_pin(pinned)
    w.new_chat()
    send(qtbot, w, "an ordinary chat")
    other = w.current_id
    w.resize(760, 540)     # the offscreen screen is 800 x 600
    w.move(12, 8)
    open_chat(qtbot, w, pinned)
    make_window.shutdown(w)                       # quit waits for the pending KV save
    assert e1.shut_down and len(e1.disk_files()) == 1

    e2 = FakeEngine(home / "state", resume_ms=31.0)  # a new process: nothing in memory
    w2 = make_window(e2)
    qtbot.waitUntil(lambda: w2.current_id == pinned, timeout=3000)   # last open chat restored
    assert w2.chat_model.headers()[0] == "Pinned"
    assert w2.chat_model.visible_chat_ids()[0] == pinned
    assert w2.chat_model.chat(pinned).kv_state == "disk"
    assert w2.chat_model.chat(other).kv_state == "none"    # memory does not survive a restart
    qtbot.waitUntil(lambda: len(w2.chat_view.widgets) == 2, timeout=3000)
    assert (w2.size().width(), w2.size().height()) == (760, 540)     # geometry restored
    # the window asks the engine to open the pinned session as pinned
    qtbot.waitUntil(lambda: bool(e2.called("open")), timeout=3000)
    assert e2.called("open")[0][:2] == (pinned, SessionKind.PINNED)
    qtbot.waitUntil(lambda: w2.status.kv.text()
                    == f"{len(e1.sessions[pinned].history):,} tokens on disk — resumes without prefill", timeout=3000)
    send(qtbot, w2, "and one more question")
    started = w2.status.started.text()
    history = len(e1.sessions[pinned].history)
    assert started.startswith(f"resumed {history:,} tokens from disk in 31 ms")
    assert started.endswith("prefilled 5 tokens in 2 ms")   # only the new message: <user> + 4 words
    fig = w2.store.active_path(pinned)[-1].figures
    assert fig["resume"] == "disk" and fig["reused_tokens"] == history
    # the pinned chat saves its new KV in the background; the row shows it, then settles
    qtbot.waitUntil(lambda: not w2.chat_model.chat(pinned).saving, timeout=5000)
    assert w2.chat_model.chat(pinned).kv_state == "disk"


def test_quit_waits_for_pending_saves_but_not_for_generation(make_window, engine, qtbot, monkeypatch):
    from app.gui.controllers import engine as mw_mod   # QUIT_WAIT_S lives with the engine

    monkeypatch.setattr(mw_mod, "QUIT_WAIT_S", 600.0)   # the quit ends when the save does, not at its bound
    engine.save_delay = 0.3                          # the save's own work, once it may start
    w = make_window(engine)
    send(qtbot, w, "pin me")
    engine.saves_may_finish.clear()                  # the pin's save starts once the quit has begun
    w.toggle_pin(w.current_id)
    engine.delay = 0.05
    engine.reply = " ".join(["word"] * 400)         # would take 20 s
    send(qtbot, w, "now talk for a long time", wait=False)
    qtbot.waitUntil(lambda: engine.generating.is_set(), timeout=3000)
    saved_at_finish: list[bool] = []
    w.shutdownFinished.connect(lambda: saved_at_finish.append(bool(engine.disk_files())))
    w.close()
    assert not w.isVisible() and not engine.disk_files()
    engine.saves_may_finish.set()
    qtbot.waitUntil(lambda: w.shutdown_complete, timeout=30000)
    assert saved_at_finish == [True]                 # waited for the save
    assert engine.cancelled_count == 1 and engine.shut_down   # the reply was stopped, not waited for


def test_quit_wait_is_bounded_and_visible(make_window, engine, qtbot, monkeypatch):
    from app.gui.controllers import engine as mw_mod   # QUIT_WAIT_S lives with the engine

    monkeypatch.setattr(mw_mod, "QUIT_WAIT_S", 1.0)

    import threading

    entered, release, returned = threading.Event(), threading.Event(), threading.Event()

    def stuck_shutdown(timeout: float = 10.0) -> None:
        entered.set()
        release.wait(120)           # hangs until the test ends
        returned.set()

    w = make_window(engine)
    engine.shutdown = stuck_shutdown
    w.close()
    qtbot.waitUntil(lambda: w._quit_dialog is not None and w._quit_dialog.isVisible(), timeout=10000)
    assert "Saving" in w._quit_dialog.labelText()
    qtbot.waitUntil(lambda: w.shutdown_complete, timeout=30000)
    # bounded: the window finished quitting while the engine's shutdown still hangs
    assert entered.is_set() and not returned.is_set()
    release.set()


def test_settings_round_trip_and_bad_files(tmp_path):
    p = tmp_path / "settings.json"
    s = Settings()
    s.system_prompt = "Be brief."
    s.sampling.temperature = 0.2
    s.provider = "cpu"
    s.extra = {"future_key": 1}
    s.save(p)
    back = Settings.load(p)
    assert back.system_prompt == "Be brief." and back.sampling.temperature == 0.2
    assert back.provider == "cpu" and back.extra == {"future_key": 1}
    assert [f.name for f in tmp_path.iterdir()] == ["settings.json"]   # no temp file left
    p.write_text("{not json")
    assert Settings.load(p) == Settings()
    p.write_text(json.dumps({"provider": "quantum", "memory_budget_mb": "lots", "kv_store": "int2",
                             "sampling": {"temperature": "hot", "max_new_tokens": 64}}))
    s = Settings.load(p)
    assert s.provider == "auto" and s.memory_budget_mb == Settings().memory_budget_mb
    assert s.kv_store == "model"
    assert s.sampling.temperature == 0.7 and s.sampling.max_new_tokens == 64


def test_settings_dialog_changes_defaults_and_clears_cache(make_window, engine, qtbot, monkeypatch):
    from app.gui.dialogs.settings_dialog import SettingsDialog

    w = make_window(engine)
    send(qtbot, w, "hello")
    seen = {}

    def fake_exec(dlg: SettingsDialog) -> int:
        seen["folder"] = dlg.folder_label.text()
        dlg.system_prompt.setPlainText("Answer like a pirate.")
        assert dlg.sampling.model_defaults.isChecked() and not dlg.sampling.temperature.isEnabled()
        dlg.sampling.model_defaults.setChecked(False)     # set my own numbers
        assert dlg.sampling.temperature.isEnabled()
        dlg.sampling.temperature.setValue(0.3)
        dlg.memory.setValue(2048)
        assert not dlg.compact_kv.isChecked()
        dlg.compact_kv.setChecked(True)
        qtbot.mouseClick(dlg.clear_btn, Qt.MouseButton.LeftButton)
        return 1

    monkeypatch.setattr(SettingsDialog, "exec", fake_exec)
    qtbot.keyClick(w, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)
    assert seen["folder"] == str(make_window.home)
    qtbot.waitUntil(lambda: engine.called("clear_cache") == [()], timeout=3000)
    saved = Settings.load(make_window.home / "settings.json")
    assert saved.system_prompt == "Answer like a pirate." and saved.sampling.temperature == 0.3
    assert saved.kv_store == "float16"
    qtbot.waitUntil(lambda: w.engine is not None, timeout=3000)   # budget changed: reloaded
    w.new_chat()
    send(qtbot, w, "ahoy")
    msgs = engine.generations[-1]
    assert msgs[0].role == "system" and msgs[0].content == "Answer like a pirate."
    assert engine.called("generate")[-1][2].temperature == 0.3


def test_chat_settings_override_the_defaults(make_window, engine, qtbot, monkeypatch):
    from app.gui.dialogs.settings_dialog import ChatSettingsDialog

    w = make_window(engine)
    send(qtbot, w, "hello")

    def fake_exec(dlg: ChatSettingsDialog) -> int:
        dlg.system_prompt.setPlainText("Only this chat.")
        dlg.use_own.setChecked(True)
        dlg.sampling.max_new_tokens.setValue(77)
        return 1

    monkeypatch.setattr(ChatSettingsDialog, "exec", fake_exec)
    w.open_chat_settings()
    qtbot.waitUntil(lambda: w.store.get_conversation(w.current_id).system_prompt == "Only this chat.",
                    timeout=3000)
    send(qtbot, w, "again")
    assert engine.generations[-1][0].content == "Only this chat."
    assert engine.called("generate")[-1][2].max_new_tokens == 77


def test_model_import_shows_progress_and_can_be_cancelled(make_window, engine, qtbot, tmp_path):
    import threading
    from app.gui.backend import ImportCancelled

    started = threading.Event()

    def importer(src, progress, cancel):
        for i in range(200):
            progress(i / 200, f"Converting layer {i}")
            started.set()
            if cancel.is_set():
                raise ImportCancelled()
            time.sleep(0.01)
        return tmp_path / "done"

    listed = []
    w = make_window(engine, gguf_importer=importer, model_lister=lambda: listed)
    dlg = w.import_model(tmp_path / "model.gguf", gguf=True)
    assert started.wait(3)
    qtbot.waitUntil(lambda: dlg.value() > 0 and "Converting the weights… " in dlg.labelText(), timeout=3000)
    assert dlg.labelText().endswith(" %") and "layer" not in dlg.labelText()   # a phase, not a tensor
    from PySide6.QtWidgets import QPushButton
    qtbot.mouseClick(dlg.findChild(QPushButton), Qt.MouseButton.LeftButton)   # "Cancel"
    qtbot.waitUntil(lambda: w.status.message.text() == "Import cancelled", timeout=3000)
    assert not dlg.isVisible()
    # a finished import shows up in the model picker
    listed.append("Imported-Model")
    dlg = w.import_model(tmp_path / "model.gguf", gguf=True)
    qtbot.waitUntil(lambda: w.model_picker.findData("Imported-Model") >= 0, timeout=5000)
    assert w.status.message.text() == "Imported done"


def test_picking_a_model_reloads_the_engine(make_window, engine, qtbot):
    loads = []
    e2 = FakeEngine(make_window.home / "state")
    e2.model_name = "Other-Model"

    def factory(md, sd, s):
        loads.append(md.name)
        return engine if len(loads) == 1 else e2

    def prepare(name, progress):
        return make_window.home / "models" / (name or "Default")

    w = make_window(engine, engine_factory=factory, model_preparer=prepare,
                    model_lister=lambda: ["Other-Model"])
    qtbot.waitUntil(lambda: w.model_picker.count() == 2, timeout=3000)
    w.model_picker.setCurrentIndex(1)
    w.model_picker.activated.emit(1)
    qtbot.waitUntil(lambda: w.engine is e2, timeout=3000)
    assert loads == ["Default", "Other-Model"] and engine.shut_down
    assert Settings.load(make_window.home / "settings.json").model == "Other-Model"


def test_single_instance_brings_the_first_window_forward(qtbot, tmp_path):
    a_home, b_home = tmp_path / "a", tmp_path / "b"
    assert server_name(a_home) != server_name(b_home)
    first = SingleInstance(a_home)
    assert not first.notify_running(100)
    assert first.listen()
    with qtbot.waitSignal(first.activated, timeout=3000):
        second = SingleInstance(a_home)
        # the answer comes from the same event loop here, so ask without blocking on it
        from PySide6.QtNetwork import QLocalSocket
        sock = QLocalSocket()
        sock.connectToServer(second.name)
        assert sock.waitForConnected(1000)
        sock.write(b"activate\n")
        sock.flush()
    other = SingleInstance(b_home)
    assert not other.notify_running(100)         # different data folder: no collision
    first.close()


def test_second_launch_exits_and_first_comes_forward(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", AMBER_HOME=str(tmp_path / "h"),
               PYTHONPATH=str(ROOT))
    code = ("import sys; from PySide6.QtWidgets import QApplication; from PySide6.QtCore import QTimer;"
            "from app.gui.single_instance import SingleInstance; from pathlib import Path;"
            "app = QApplication([]); s = SingleInstance(Path(sys.argv[1])); s.listen();"
            "s.activated.connect(lambda: (print('ACTIVATED', flush=True), app.quit()));"
            "print('READY', flush=True); QTimer.singleShot(8000, app.quit); app.exec()")
    first = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "h")], env=env,
                             stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert first.stdout.readline().strip() == "READY"
        second = subprocess.run([sys.executable, "-m", "app"], env=env, cwd=ROOT,
                                capture_output=True, text=True, timeout=30)
        assert second.returncode == 0 and "already running" in second.stdout
        assert first.stdout.readline().strip() == "ACTIVATED"
    finally:
        first.kill()
        first.wait()


def test_window_becomes_visible_and_reports_when(tmp_path):
    """A real start-up shows the window and reports when; how fast is measured in bench/suites/gui.py
    (`window_visible_ms`), not asserted here: a timing bound fails on a loaded machine."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", AMBER_STARTUP_PROBE="1",
               PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "app", "--data-dir", str(tmp_path / "h")],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    line = next(s for s in out.stdout.splitlines() if s.startswith("window visible after"))
    assert float(line.split()[3]) > 0, line
    assert (tmp_path / "h").is_dir()


def test_self_test_reports_a_missing_model(tmp_path, capsys, monkeypatch):
    """`amber --self-test` on a data folder without a model fails and says what is missing."""
    from app.main import main

    monkeypatch.delenv("AMBER_HOME", raising=False)
    assert main(["--self-test", "--data-dir", str(tmp_path / "empty")]) != 0
    out = capsys.readouterr().out
    assert "FAIL" in out and "default model is not prepared" in out


def test_no_widgets_leak(make_window, engine, qtbot):
    def flush() -> None:
        gc.collect()
        for _ in range(5):
            QApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)
            QApplication.processEvents()

    flush()
    before_top = {id(w) for w in QApplication.topLevelWidgets()}
    baseline = len(QApplication.allWidgets())
    for _ in range(2):
        w = make_window(engine)
        send(qtbot, w, "hello")
        w.new_chat()
        send(qtbot, w, "again")
        open_chat(qtbot, w, w.chat_model.visible_chat_ids()[-1])
        make_window.shutdown(w)
        del w
        flush()
    flush()
    leftovers = [w.metaObject().className() for w in QApplication.topLevelWidgets()
                 if id(w) not in before_top]
    assert leftovers == []
    assert len(QApplication.allWidgets()) <= baseline, \
        [w.metaObject().className() for w in QApplication.allWidgets()][:40]


def test_sampling_follows_each_model_unless_the_user_sets_numbers():
    """By default the GUI leaves temperature & co. to the model's own generation_config.json (the
    engine fills in None), so an imported model is not run with the default model's numbers."""
    from app.gui.settings import MODEL_SAMPLING_FIELDS, Sampling, Settings

    params = Settings().sampling.to_params()
    assert all(getattr(params, f) is None for f in MODEL_SAMPLING_FIELDS)
    assert params.max_new_tokens == 512
    mine = Sampling(model_defaults=False, temperature=0.3).to_params()
    assert mine.temperature == 0.3 and mine.top_p == 0.95
    # A chat's own settings are explicit numbers, whatever the default says.
    chat = Sampling().to_params({"temperature": 0.9, "model_defaults": False})
    assert chat.temperature == 0.9 and chat.top_k == 40
    back = Settings.from_dict({"sampling": {"model_defaults": False, "temperature": 0.4}})
    assert back.sampling.model_defaults is False and back.sampling.to_params().temperature == 0.4
    assert Settings.from_dict({"sampling": {"model_defaults": "yes"}}).sampling.model_defaults is True
