"""Fixtures for the GUI tests (pytest-qt, offscreen): a fake engine, the real store in tmp_path,
a window factory that shuts windows down properly, and a screenshot helper.

`pytest tests/gui -k screenshot --screenshots=DIR` keeps the screenshots in DIR (make screenshots);
without the option they go to tmp_path.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("AMBER_THEME", "light")

import pytest  # noqa: E402

from tests.support.fake_engine import FakeEngine  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--screenshots", action="store", default=None, metavar="DIR",
                     help="save the GUI tests' screenshots in DIR")


# Waits are upper bounds for "this happens", never speed targets: on a loaded 2-core machine a
# 5 s wait for a streamed reply can run out. Every qtbot wait gets this many times its timeout.
WAIT_SCALE = float(os.environ.get("AMBER_TEST_WAIT_SCALE", "4"))


@pytest.fixture(scope="session", autouse=True)
def _generous_waits() -> Iterator[None]:
    from pytestqt.qtbot import QtBot

    originals = {name: getattr(QtBot, name) for name in ("waitUntil", "waitSignal", "waitSignals")}

    def scaled(original: Callable[..., Any], default: int) -> Callable[..., Any]:
        def wait(self: Any, *args: Any, timeout: int = default, **kwargs: Any) -> Any:
            return original(self, *args, timeout=int(timeout * WAIT_SCALE), **kwargs)
        return wait

    QtBot.waitUntil = scaled(originals["waitUntil"], 5000)      # type: ignore[method-assign]
    QtBot.waitSignal = scaled(originals["waitSignal"], 5000)    # type: ignore[method-assign]
    QtBot.waitSignals = scaled(originals["waitSignals"], 5000)  # type: ignore[method-assign]
    yield
    for name, fn in originals.items():
        setattr(QtBot, name, fn)


@pytest.fixture(scope="session", autouse=True)
def _theme(qapp: Any) -> None:
    from app.gui import theme

    theme.apply(qapp, theme.LIGHT)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("AMBER_HOME", str(h))
    return h


@pytest.fixture
def engine(home: Path) -> FakeEngine:
    return FakeEngine(home / "state")


class WindowFactory:
    """Builds `MainWindow`s over `home` with a fake engine, and shuts them down at the end."""

    def __init__(self, qtbot: Any, home: Path):
        self.qtbot = qtbot
        self.home = home
        self.windows: list[Any] = []

    def backend(self, engine: Any, **overrides: Any) -> Any:
        from app.gui.backend import Backend

        model_dir = self.home / "models" / "Fake-Model-135M"

        def prepare(name: str, progress: Callable[[float, str], None]) -> Path:
            progress(0.5, "Preparing the fake model…")
            return model_dir

        kwargs: dict[str, Any] = dict(engine_factory=lambda md, sd, s: engine.revived(),
                                      model_preparer=prepare, model_lister=lambda: [])
        kwargs.update(overrides)
        return Backend(**kwargs)

    def __call__(self, engine: Any, *, wait_ready: bool = True, show: bool = True,
                 auto_titles: bool = False, **overrides: Any) -> Any:
        from app.gui.main_window import MainWindow

        w = MainWindow(home=self.home, backend=self.backend(engine, **overrides))
        # The fake answers every prompt with its canned reply: a title made from it would change
        # the titles, and the engine calls, that other tests look at (tests/gui/test_auto_titles.py)
        w.auto_titles.enabled = auto_titles
        self.windows.append(w)
        w.confirm = lambda title, text: True
        w.confirm_switch = lambda title, text: True
        if show:
            if not w.settings.window_geometry:   # else: the restored geometry is under test
                w.resize(1100, 720)
            w.show()
            self.qtbot.waitExposed(w)
        if wait_ready:
            self.qtbot.waitUntil(lambda: w.engine is not None and w.chats_loaded, timeout=5000)
        return w

    def shutdown(self, w: Any, timeout: int = 15000) -> None:
        if not w.shutdown_complete:
            w.close()
            self.qtbot.waitUntil(lambda: w.shutdown_complete, timeout=timeout)
        w.tasks.wait(5)
        if w in self.windows:
            self.windows.remove(w)
        w.deleteLater()

    def close_all(self) -> None:
        for w in list(self.windows):
            try:
                self.shutdown(w)
            except Exception:  # noqa: BLE001 - teardown keeps going
                pass


@pytest.fixture
def make_window(qtbot: Any, home: Path) -> Iterator[WindowFactory]:
    factory = WindowFactory(qtbot, home)
    yield factory
    factory.close_all()


@pytest.fixture
def shots(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Any, str], Path]:
    """`shots(widget, "name")` saves a PNG of the widget and returns its path."""
    option = request.config.getoption("--screenshots", default=None)
    folder = Path(option) if option else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)

    def take(widget: Any, name: str) -> Path:
        from PySide6.QtWidgets import QApplication

        for _ in range(3):
            QApplication.processEvents()
        path = folder / f"{name}.png"
        assert widget.grab().save(str(path)), f"could not save {path}"
        return path

    return take
