"""The window over the real engine and the default model (slow: needs the prepared model).

Wiring: `app.gui.backend.open_engine(model_dir, state_dir, settings)` → SessionManager.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.gui.backend import Backend
from engine.base.paths import DEFAULT_MODEL_NAME
from tests.support.gui import send

pytestmark = pytest.mark.slow


def _model_dir() -> Path | None:
    for base in (os.environ.get("AMBER_TEST_HOME"), Path(__file__).resolve().parents[2] / ".amber-dev"):
        if base and (Path(base) / "models" / DEFAULT_MODEL_NAME / "model.onnx").exists():
            return Path(base) / "models" / DEFAULT_MODEL_NAME
    return None


@pytest.mark.skipif(_model_dir() is None, reason="the default model is not prepared (make default-model)")
def test_real_engine_streams_pins_and_resumes_after_restart(make_window, home, qtbot):
    model = _model_dir()
    backend = dict(model_preparer=lambda name, progress: model)
    from app.gui.main_window import MainWindow

    def window() -> MainWindow:
        w = MainWindow(home=home, backend=Backend(**backend))
        make_window.windows.append(w)
        w.confirm = lambda *a: True
        w.resize(1100, 720)
        w.show()
        qtbot.waitUntil(lambda: bool((w.engine is not None or w.engine_error) and w.chats_loaded),
                        timeout=60000)
        assert w.engine_error is None
        return w

    w = window()
    assert w.status.provider.text().split(" — ")[0] in ("CPU", "CUDA", "CoreML", "DirectML")
    send(qtbot, w, "What is the capital of France? Answer in one sentence.", timeout=60000)
    assert "Paris" in w.chat_view.widgets[-1].item.content
    assert w.status.started.text().startswith("prefilled")
    cid = w.current_id
    w.toggle_pin(cid)
    qtbot.waitUntil(lambda: w.chat_model.chat(cid).kv_state == "disk"
                    and not w.chat_model.chat(cid).saving, timeout=30000)
    make_window.shutdown(w)

    w2 = window()
    qtbot.waitUntil(lambda: w2.current_id == cid and len(w2.chat_view.widgets) == 2, timeout=10000)
    send(qtbot, w2, "And of Germany?", timeout=60000)
    assert w2.status.started.text().startswith("resumed ")
    assert "from disk" in w2.status.started.text()
