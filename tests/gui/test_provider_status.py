"""The status bar names the execution provider really running and, when an NVIDIA GPU is here but
could not be used, why and what to install; without a GPU it just says "CPU". The machine is a fake
one (tests/support/fake_nvidia.py: the files an NVIDIA GPU and its driver leave, read by the real
detection through its root), so every case runs on any machine. Real engine: the tiny converted
model and a real SessionManager, loaded by the app's own `open_engine`."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_engine import FakeEngine
from tests.support.fake_nvidia import fake_machine
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the fake machine is a Linux one")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    from engine.convert import convert_gguf
    root = tmp_path_factory.mktemp("tiny-gui")
    src = write_tiny_gguf(root / "tiny.gguf", TinyConfig(seed=3))
    return convert_gguf(src.path, root / "tiny-chat")


def _window(make_window: Any, tiny_dir: Path, provider: str, machine: Any) -> Any:
    from app.gui.backend import open_engine

    def factory(model_dir: Path, state_dir: Path, settings: Any, progress: Any = None) -> Any:
        s = settings.copy()
        s.provider = provider
        return open_engine(tiny_dir, state_dir, s, progress)

    w = make_window(None, wait_ready=False, engine_factory=factory,
                    model_preparer=lambda name, progress: tiny_dir, gpu_presence=machine.presence)
    make_window.qtbot.waitUntil(lambda: bool((w.engine is not None or w.engine_error) and w.chats_loaded),
                                timeout=30000)
    assert w.engine_error is None
    return w


def test_no_nvidia_gpu_says_cpu_and_nothing_more(make_window, tiny_dir, tmp_path):
    """A GPU asked for on a machine without one: "CPU", no CUDA library error in the window."""
    w = _window(make_window, tiny_dir, "gpu", fake_machine(tmp_path, "none"))
    model = w.engine.model
    label, tip = w.status.provider.text(), w.status.provider.toolTip()
    assert label == model.provider_short
    if model.provider_fallback_reason:      # CUDA could not start here
        assert label == "CPU"
        assert "no NVIDIA GPU" in tip and model.provider_fallback_reason not in tip
        assert ".so" not in label + tip and "failed" not in label + tip
    assert not w.status.provider.property("warning")


def test_a_gpu_without_its_libraries_says_what_to_install(make_window, tiny_dir, tmp_path):
    """A GPU and its driver, and (on a machine without the `cuda` extra) no CUDA libraries: the
    real CUDA failure, and the words name the extra to install."""
    w = _window(make_window, tiny_dir, "gpu", fake_machine(tmp_path, "driver"))
    model = w.engine.model
    label, tip = w.status.provider.text(), w.status.provider.toolTip()
    reason = model.provider_fallback_reason
    if model.provider == "CPUExecutionProvider":
        assert reason, "a GPU was asked for: the fallback must say why"
        assert label == "CPU — GPU not used"
        assert f"Why: {reason}" in tip
        assert "restart Amber" in tip and ("driver" in tip or "CUDA" in tip)
        if ".so" in reason or ".dll" in reason:       # the libraries are what is missing
            assert 'pip install "amber-chat[cuda]"' in tip and "make run GPU=1" in tip
        assert w.status.provider.property("warning")
    else:
        assert reason is None and label == model.provider_short and "not used" not in label + tip
        assert model.variant == "fp16"


def test_a_gpu_without_its_driver_says_to_install_the_driver_too(make_window, tiny_dir, tmp_path):
    w = _window(make_window, tiny_dir, "gpu", fake_machine(tmp_path, "no-driver"))
    reason = w.engine.model.provider_fallback_reason
    if w.engine.model.provider != "CPUExecutionProvider":
        pytest.skip("CUDA runs here")
    tip = w.status.provider.toolTip()
    assert w.status.provider.text() == "CPU — GPU not used" and f"Why: {reason}" in tip
    assert "driver is not installed" in tip and "NVIDIA driver (version 580 or newer)" in tip
    assert 'pip install "amber-chat[cuda]"' in tip
    assert w.status.provider.property("warning")


def test_a_gpu_with_its_libraries_shows_cuda(make_window, tmp_path):
    """The engine reports CUDA running (a fake engine: no GPU here): "CUDA", no warning."""
    engine = FakeEngine(tmp_path / "state")
    engine.provider = "CUDAExecutionProvider"
    w = make_window(engine, gpu_presence=fake_machine(tmp_path, "driver").presence)
    assert w.status.provider.text() == "CUDA"
    assert "not used" not in w.status.provider.toolTip()
    assert not w.status.provider.property("warning")


def test_status_shows_plain_cpu_when_cpu_is_chosen(make_window, tiny_dir, tmp_path):
    w = _window(make_window, tiny_dir, "cpu", fake_machine(tmp_path, "driver"))
    assert w.engine.model.provider_fallback_reason is None
    assert w.status.provider.text() == "CPU"
    assert "not used" not in w.status.provider.toolTip()


def test_what_to_do_follows_the_cause():
    from app.gui.widgets.status import gpu_advice, provider_status

    assert "driver" in gpu_advice("CUDA failed: CUDA driver version is insufficient for CUDA runtime version")
    missing = gpu_advice("CUDA failed: libcublasLt.so.13: cannot open shared object file: No such file")
    assert "cuDNN" in missing and "pip install" in missing
    assert 'pip install "amber-chat[cuda]"' in missing
    assert "580" in gpu_advice("CUDA failed: libcublasLt.so.13: cannot open", "no-driver")
    assert provider_status("CPUExecutionProvider", "CUDA failed: libcublasLt.so.13: cannot open", "none")[0] == "CPU"
    assert provider_status("CUDAExecutionProvider", None, "driver")[0] == "CUDA"
