"""The window over the real engine with a damaged state folder (slow: needs the default model):
a bad manifest of some other session does not stop the model from loading, and a damaged
manifest of a pinned chat shows the chat's notice while the chat itself stays usable."""
from __future__ import annotations

import json
import os
import uuid
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
def test_damaged_manifests_do_not_stop_the_window(make_window, home, qtbot):
    model = _model_dir()
    from app.gui.main_window import MainWindow

    def window() -> MainWindow:
        w = MainWindow(home=home, backend=Backend(model_preparer=lambda name, progress: model))
        make_window.windows.append(w)
        w.confirm = lambda *a: True
        w.show()
        qtbot.waitUntil(lambda: bool((w.engine is not None or w.engine_error) and w.chats_loaded),
                        timeout=60000)
        assert w.engine_error is None, w.engine_error
        return w

    w = window()
    send(qtbot, w, "Say hello.", timeout=60000)
    cid = w.current_id
    w.toggle_pin(cid)
    qtbot.waitUntil(lambda: w.chat_model.chat(cid).kv_state == "disk"
                    and not w.chat_model.chat(cid).saving, timeout=30000)
    make_window.shutdown(w)

    sessions = home / "state" / "sessions"
    manifest = sessions / f"{cid}.json"
    assert manifest.is_file()
    (sessions / f"{uuid.uuid4()}.json").write_text(json.dumps({"version": 1, "kind": "pinnad", "tokens": "x"}))
    manifest.write_bytes(manifest.read_bytes()[:-30])     # truncated

    w2 = window()                                         # the model loads: no "could not be loaded"
    qtbot.waitUntil(lambda: w2.current_id == cid and len(w2.chat_view.widgets) == 2, timeout=10000)
    qtbot.waitUntil(lambda: w2.save_notice.isVisible(), timeout=20000)
    assert "saved state was damaged" in w2.save_notice.text()
    send(qtbot, w2, "And goodbye?", timeout=60000)        # the chat still works
    assert w2.chat_view.widgets[-1].item.content
