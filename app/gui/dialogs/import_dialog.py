"""Importing a model from the window: the file / folder choosers (they remember their folder)
and the progress dialog, Cancel included; the work is `EngineController.import_model`'s."""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox, QProgressBar, QProgressDialog

from .. import accessibility as a11y
from ..backend import ImportCancelled
from ..error_words import in_words
from ..import_source import AlreadyImported
from ..tasks import ProgressRelay

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..main_window import MainWindow
    from ..widgets.status import StatusBar


def _start_dir(window: "MainWindow") -> str:
    """Where a file dialog opens: the folder the last one was in (if it still exists)."""
    last = window.settings.last_dir
    return last if last and Path(last).is_dir() else str(Path.home())


def _remember_dir(window: "MainWindow", folder: Path) -> None:
    window.settings.last_dir = str(folder)
    window.save_settings()


def choose_gguf(window: "MainWindow") -> None:
    path, _ = QFileDialog.getOpenFileName(window, "Import a GGUF model", _start_dir(window),
                                          "GGUF models (*.gguf);;All files (*)")
    if path:
        _remember_dir(window, Path(path).parent)
        window.import_model(Path(path), gguf=True)


def choose_folder(window: "MainWindow") -> None:
    path = QFileDialog.getExistingDirectory(window, "Import an ONNX model folder", _start_dir(window))
    if path:
        _remember_dir(window, Path(path).parent)
        window.import_model(Path(path), gguf=False)


def clear_message(status: "StatusBar") -> None:
    """An import's last word leaves the status bar (after `window.import_clear`)."""
    if status.message.text().startswith(("Imported ", "Import cancelled")):
        status.set_message("")


def already_imported(window: "MainWindow", exc: AlreadyImported) -> QMessageBox:
    """Say that the file is imported already (nothing was converted), and offer to use it."""
    window.status.set_message(f"{exc}: nothing imported again")
    box = QMessageBox(QMessageBox.Icon.Information, "Already imported",
                      f"{exc}. It is in the model picker; nothing was imported again.",
                      QMessageBox.StandardButton.Ok, window)
    if window.settings.model != exc.name:
        use = box.addButton(f"Use {exc.name}", QMessageBox.ButtonRole.AcceptRole)
        use.clicked.connect(lambda: window.pick_model(exc.name))
    window.refresh_models()    # in case the picker does not list it yet
    box.open()
    window.duplicate_box = box
    return box


def import_model(window: "MainWindow", src: Path, *, gguf: bool) -> QProgressDialog:
    cancel = threading.Event()
    status, clear = window.status, window.import_clear
    dlg = QProgressDialog(f"Importing {src.name}…", "Cancel", 0, 1000, window)
    dlg.setWindowTitle("Import model")
    for bar in dlg.findChildren(QProgressBar):
        a11y.name(bar, "Import progress")
    dlg.setWindowModality(Qt.WindowModality.WindowModal)
    dlg.setMinimumDuration(0)
    dlg.setAutoClose(False)
    dlg.setAutoReset(False)
    dlg.setValue(0)
    dlg.canceled.connect(cancel.set)
    dlg.canceled.connect(lambda: status.set_message("Import cancelled"))
    dlg.canceled.connect(clear.start)
    progress = ProgressRelay(dlg)

    def on_progress(f: float, msg: str) -> None:
        if f < 0:
            dlg.setRange(0, 0)
        else:
            dlg.setRange(0, 1000)
            dlg.setValue(int(f * 1000))
        if msg:
            dlg.setLabelText(msg)

    progress.progressed.connect(on_progress)

    def done(dest: Path | None) -> None:
        dlg.canceled.disconnect()   # closing a QProgressDialog emits canceled()
        dlg.close()
        clear.start()
        if dest is None:   # cancelled, but the import finished first: it was undone
            status.set_message("Import cancelled")
            return
        status.set_message(f"Imported {dest.name}")
        if window.engine is None and window.engine_error is not None:
            # the model in use could not be loaded (e.g. the default is missing): use this one
            window.settings.model = dest.name
            window.save_settings()
            window.load_engine()
        window.refresh_models()

    def failed(exc: BaseException) -> None:
        dlg.canceled.disconnect()
        dlg.close()
        clear.start()
        if isinstance(exc, ImportCancelled) or cancel.is_set():
            status.set_message("Import cancelled")
        elif isinstance(exc, AlreadyImported):
            already_imported(window, exc)
        else:
            log.warning("import of %s failed: %r", src, exc)
            status.set_message(f"Import failed: {in_words(exc)}")
            QMessageBox.warning(window, "Import failed", in_words(exc))

    window.engines.import_model(src, gguf=gguf, progress=progress, cancel=cancel,
                                success=done, failure=failed)
    dlg.show()
    window.import_dialog = dlg
    return dlg
