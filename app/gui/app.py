"""Starting the GUI: QApplication, theme, single instance, the main window (shown at once)."""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Sequence

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from engine.base import paths
from engine.config import settings

from . import theme
from .main_window import MainWindow
from .single_instance import SingleInstance

log = logging.getLogger(__name__)


def run_app(argv: Sequence[str], *, started_at: float | None = None) -> int:
    started_at = started_at or time.perf_counter()
    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication(list(argv))
    app.setApplicationName("Amber")
    app.setApplicationDisplayName("Amber")
    app.setOrganizationName("Amber")
    app.setDesktopFileName("amber")
    app.setQuitOnLastWindowClosed(False)  # quit when the window's bounded shutdown is done
    home = paths.amber_home()
    instance = SingleInstance(home)
    if instance.notify_running():
        print("Amber is already running; its window was brought forward.")
        return 0
    instance.listen()
    theme.apply(app)
    app.setWindowIcon(theme.app_icon())
    home.mkdir(parents=True, exist_ok=True)
    window = MainWindow()
    instance.activated.connect(lambda: bring_forward(window))
    window.shutdownFinished.connect(app.quit)
    window.show()
    if settings().startup_probe:
        def report() -> None:
            shown = time.perf_counter() - started_at
            print(f"window visible after {shown * 1000:.0f} ms", flush=True)
            window.close()
        QTimer.singleShot(0, report)
    code = app.exec()
    instance.close()
    from .lifecycle import shutdown_runner  # noqa: PLC0415

    if shutdown_runner().pending:
        # the bounded quit wait gave up on a stuck save: do not hang in interpreter teardown
        log.warning("quitting with %d unfinished shutdown task(s)", shutdown_runner().pending)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def bring_forward(window: MainWindow) -> None:
    if window.isMinimized():
        window.showNormal()
    window.show()
    window.raise_()
    window.activateWindow()
