"""The status bar names the execution provider really running and, when a GPU was asked for but
is not the one running, why (issue 16). Real engine: the tiny converted model and a real
SessionManager, loaded by the app's own `open_engine`."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    from engine.convert import convert_gguf
    root = tmp_path_factory.mktemp("tiny-gui")
    src = write_tiny_gguf(root / "tiny.gguf", TinyConfig(seed=3))
    return convert_gguf(src.path, root / "tiny-chat")


def _window(make_window: Any, tiny_dir: Path, provider: str) -> Any:
    from app.gui.backend import open_engine

    def factory(model_dir: Path, state_dir: Path, settings: Any, progress: Any = None) -> Any:
        s = settings.copy()
        s.provider = provider
        return open_engine(tiny_dir, state_dir, s, progress)

    w = make_window(None, wait_ready=False, engine_factory=factory,
                    model_preparer=lambda name, progress: tiny_dir)
    make_window.qtbot.waitUntil(lambda: bool((w.engine is not None or w.engine_error) and w.chats_loaded),
                                timeout=30000)
    assert w.engine_error is None
    return w


def test_status_shows_the_running_provider_and_why_the_gpu_is_not_used(make_window, tiny_dir):
    w = _window(make_window, tiny_dir, "gpu")
    model = w.engine.model
    label, tip = w.status.provider.text(), w.status.provider.toolTip()
    assert label.split(" (")[0] == model.provider_short          # what get_providers() says runs
    reason = model.provider_fallback_reason
    if model.provider == "CPUExecutionProvider":
        # No GPU here (or it failed): the reason is beside "CPU" and whole in the tooltip.
        assert reason, "a GPU was asked for: the fallback must say why"
        assert label.startswith("CPU (") and label.endswith(")")
        assert label[5:-1].rstrip("…") == reason[:len(label[5:-1].rstrip("…"))]
        assert len(label) <= len("CPU ()") + 60
        assert f"Fell back: {reason}" in tip
    else:
        assert reason is None and label == model.provider_short and "Fell back" not in tip
        assert model.variant == "fp16"


def test_status_shows_plain_cpu_when_cpu_is_chosen(make_window, tiny_dir):
    w = _window(make_window, tiny_dir, "cpu")
    assert w.engine.model.provider_fallback_reason is None
    assert w.status.provider.text() == "CPU"
    assert "Fell back" not in w.status.provider.toolTip()
