"""The window over the real engine and a tiny random-weight model (tests/support/tiny_gguf.py,
converted by engine.convert): real tokenizer, real sessions, real prefill in chunks, in seconds.
Its replies are gibberish, which is what the window must cope with anyway."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

# A longer context than the engine tests' tiny model, so that a prompt takes several prefill chunks.
TINY_LONG = TinyConfig(n_layers=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_ff=128,
                       context_length=4096, seed=11)


def make_tiny_model(folder: Path, cfg: TinyConfig = TINY_LONG) -> Path:
    """The converted tiny model folder under `folder`."""
    from engine.convert import convert_gguf

    src = write_tiny_gguf(folder / "tiny-chat.gguf", cfg)
    return Path(convert_gguf(src.path, folder / "tiny-chat"))


def real_window(make_window: Any, home: Path, qtbot: Any, model_dir: Path, **settings: Any) -> Any:
    """A shown MainWindow whose engine is `SessionManager` over `model_dir` (CPU), ready."""
    from app.gui.backend import Backend
    from app.gui.main_window import MainWindow
    from app.gui.settings import Settings

    s = Settings()
    s.provider = "cpu"
    for key, value in settings.items():
        setattr(s, key, value)
    w = MainWindow(home=home, backend=Backend(model_preparer=lambda name, progress: model_dir), settings=s)
    make_window.windows.append(w)
    w.confirm = lambda *a: True
    w.resize(1100, 720)
    w.show()
    qtbot.waitExposed(w)
    qtbot.waitUntil(lambda: bool((w.engine is not None or w.engine_error) and w.chats_loaded), timeout=60000)
    assert w.engine_error is None, w.engine_error
    return w
