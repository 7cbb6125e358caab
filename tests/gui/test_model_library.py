"""The model library dialog (app/gui/dialogs/model_library.py) against the local Hub of tests/hub: the
recommended list, search, a repo's files with the verdict, download + conversion with progress,
the model in the picker; a dropped download resumed from the dialog; a gated repo asks for a token."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.hub_server import REPO, TOKEN, Hub, Repo, start
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf


@pytest.fixture(scope="module")
def tiny_q8(tmp_path_factory) -> bytes:
    cfg = TinyConfig(n_layers=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_ff=128, context_length=512)
    path = tmp_path_factory.mktemp("gui-hub") / "tiny.gguf"
    write_tiny_gguf(path, replace(cfg, wtype="Q8_0"))
    return path.read_bytes()


@pytest.fixture
def local_hub(home, tiny_q8, monkeypatch):
    h = start(Hub())
    h.repos[REPO] = Repo(files={"Tiny-Chat-Q8_0.gguf": tiny_q8, "Tiny-Chat-F32.gguf": tiny_q8[:5000] + b"x" * 10},
                         architecture="llama", downloads=5)
    monkeypatch.setenv("HF_ENDPOINT", h.url)
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    yield h
    h.stop()


def pick_repo(qtbot, dlg, query: str, repo: str) -> None:
    dlg.query.setText(query)
    dlg.search_btn.click()
    qtbot.waitUntil(lambda: dlg.repos.count() == 1 and dlg.repos.item(0).data(256) == repo, timeout=15000)
    dlg.repos.setCurrentRow(0)
    qtbot.waitUntil(lambda: dlg.files.rowCount() > 0, timeout=15000)


def pick_quant(qtbot, dlg, quant: str) -> None:
    rows = [r for r in range(dlg.files.rowCount()) if dlg.files.item(r, 0).text() == quant]
    dlg.files.selectRow(rows[0])
    qtbot.waitUntil(lambda: dlg.plan is not None and dlg.plan.variant.quant == quant
                    and dlg.download_btn.isEnabled(), timeout=15000)


def test_search_pick_download_convert_and_it_is_in_the_picker(qtbot, make_window, engine, local_hub,
                                                               monkeypatch):
    import app.gui.dialogs.model_library as ml
    from app.gui.backend import list_models
    messages = []     # every label the worker produced (the relay coalesces what reaches the screen)
    real = ml.progress_text
    monkeypatch.setattr(ml, "progress_text", lambda p: messages.append(real(p)) or messages[-1])
    from engine.hub import recommended
    w = make_window(engine, model_lister=list_models)
    dlg = w.open_model_library()
    qtbot.waitExposed(dlg)
    assert dlg.repos.count() == len(recommended())            # the curated list first, no network
    assert not local_hub.requests
    pick_repo(qtbot, dlg, "tiny", REPO)
    assert {dlg.files.item(r, 0).text() for r in range(dlg.files.rowCount())} == {"Q8_0", "F32"}
    assert all(dlg.files.item(r, 3).text() in ("fits", "tight", "too large") for r in range(dlg.files.rowCount()))
    pick_quant(qtbot, dlg, "Q8_0")
    assert "memory ~" in dlg.info.text() and "disk needed" in dlg.info.text()
    with qtbot.waitSignal(dlg.installed, timeout=120000) as sig:
        dlg.download_btn.click()
        assert dlg.cancel_btn.isVisible() and not dlg.download_btn.isEnabled()
    dest = Path(sig.args[0])
    assert (dest / "model.onnx").is_file() and dest.name == "Tiny-Chat-Q8_0"
    assert any(m.startswith("Downloading Tiny-Chat-Q8_0.gguf") and "/s" in m and "left" in m for _, m in messages)
    assert any(m.startswith("Converting to ONNX") for _, m in messages)
    assert [f for f, _ in messages] == sorted(f for f, _ in messages)     # the bar only moves forward
    assert "is ready" in dlg.status.text() and not dlg.cancel_btn.isVisible() and dlg.bar.value() == 1000
    qtbot.waitUntil(lambda: w.model_picker.findData("Tiny-Chat-Q8_0") >= 0, timeout=10000)
    dlg.close()


def test_a_dropped_download_is_resumed_from_the_dialog(qtbot, make_window, engine, local_hub, tiny_q8,
                                                       monkeypatch):
    from app.gui.dialogs.model_library import ModelLibraryDialog
    monkeypatch.setattr("engine.hub.download.RETRIES", 0)
    local_hub.cut["Tiny-Chat-Q8_0.gguf"] = 20000
    dlg = ModelLibraryDialog()
    qtbot.addWidget(dlg)
    pick_repo(qtbot, dlg, "tiny", REPO)
    pick_quant(qtbot, dlg, "Q8_0")
    dlg.download_btn.click()
    qtbot.waitUntil(lambda: not dlg.busy, timeout=30000)
    assert "connection" in dlg.status.text() and dlg.download_btn.isEnabled()
    with qtbot.waitSignal(dlg.installed, timeout=120000):
        dlg.download_btn.click()
    assert local_hub.get_requests("GET", "/resolve/")[-1]["range"] == "bytes=20000-"
    dlg.tasks.wait(5)


def test_a_gated_repo_asks_for_a_token(qtbot, local_hub, tiny_q8, home):
    from app.gui.dialogs.model_library import ModelLibraryDialog
    local_hub.repos["gated-org/Locked-GGUF"] = Repo(files={"Locked-Q8_0.gguf": tiny_q8}, gated=True)
    asked = []
    dlg = ModelLibraryDialog(ask_token=lambda why: asked.append(why) or TOKEN)
    qtbot.addWidget(dlg)
    pick_repo(qtbot, dlg, "locked", "gated-org/Locked-GGUF")
    assert asked and "gated" in asked[0]
    assert dlg.files.item(0, 0).text() == "Q8_0"
    token_file = home / "hf-token"
    assert token_file.read_text() == TOKEN and token_file.stat().st_mode & 0o077 == 0
    dlg.tasks.wait(5)


def test_offline_search_shows_one_message(qtbot, local_hub, monkeypatch):
    from app.gui.dialogs.model_library import ModelLibraryDialog
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    dlg = ModelLibraryDialog()
    qtbot.addWidget(dlg)
    dlg.query.setText("tiny")
    dlg.search_btn.click()
    qtbot.waitUntil(lambda: "offline mode is on" in dlg.status.text(), timeout=10000)
    assert dlg.search_btn.isEnabled() and not local_hub.requests
    dlg.tasks.wait(5)


def test_a_late_answer_for_an_earlier_pick_is_ignored(qtbot, local_hub, monkeypatch):
    import threading

    import engine.hub
    from app.gui.dialogs.model_library import ModelLibraryDialog
    real = engine.hub.plan
    f32_may_answer = threading.Event()
    f32_answered = threading.Event()

    def held_for_f32(repo, which=None, **kw):
        if which and "F32" in which:
            assert f32_may_answer.wait(30)   # the first pick's answer arrives last
            try:
                return real(repo, which, **kw)
            finally:
                f32_answered.set()
        return real(repo, which, **kw)
    monkeypatch.setattr(engine.hub, "plan", held_for_f32)
    dlg = ModelLibraryDialog()
    qtbot.addWidget(dlg)
    pick_repo(qtbot, dlg, "tiny", REPO)
    rows = {dlg.files.item(r, 0).text(): r for r in range(dlg.files.rowCount())}
    dlg.files.selectRow(rows["F32"])
    dlg.files.selectRow(rows["Q8_0"])
    qtbot.waitUntil(lambda: dlg.plan is not None, timeout=15000)
    assert dlg.plan.variant.quant == "Q8_0" and not f32_answered.is_set()
    f32_may_answer.set()
    assert dlg.tasks.wait(30)           # the F32 answer has been delivered to the dialog
    assert f32_answered.is_set()
    assert dlg.plan.variant.quant == "Q8_0" and "Tiny-Chat-Q8_0.gguf" in dlg.info.text()


def test_control_characters_from_the_hub_never_reach_the_dialog(qtbot, local_hub, tiny_q8):
    import json
    import unicodedata

    from app.gui.dialogs.model_library import ModelLibraryDialog
    local_hub.repos["evil/Names-GGUF"] = Repo(files={"Tiny-\x1b[2J\x07-Q8_0.gguf": tiny_q8, "Tiny-Q8_0.gguf": tiny_q8},
                                              architecture="llama")
    local_hub.raw["/api/models"] = json.dumps([
        {"id": "evil/\x1b[31mRed-GGUF\x07", "downloads": 9},
        {"id": "evil/Names-GGUF", "downloads": 3, "gguf": {"architecture": "llama\u202e\x1b]0;x\x07"}},
        {"id": "evil/Names-GGUF", "downloads": 3, "gguf": {"architecture": "llama"}}]).encode()
    dlg = ModelLibraryDialog()
    qtbot.addWidget(dlg)
    pick_repo(qtbot, dlg, "names", "evil/Names-GGUF")
    texts = [dlg.repos.item(i).text() for i in range(dlg.repos.count())]
    texts += [dlg.files.item(r, c).text() for r in range(dlg.files.rowCount()) for c in range(dlg.files.columnCount())]
    texts += [dlg.info.text(), dlg.status.text()]
    assert all(unicodedata.category(ch) not in ("Cc", "Cf") for t in texts for ch in t), texts
    assert [dlg.files.item(r, 4).text() for r in range(dlg.files.rowCount())] == ["Tiny-Q8_0.gguf"]
    dlg.query.setText("x\x1b[2J")        # an error quoting what was typed stays one plain line too
    local_hub.raw["/api/models"] = b"[" * 100_000
    dlg.search_btn.click()
    qtbot.waitUntil(lambda: "nested" in dlg.status.text(), timeout=15000)
    assert "\x1b" not in dlg.status.text() and "\n" not in dlg.status.text()
    dlg.tasks.wait(5)
