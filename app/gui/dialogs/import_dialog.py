"""Importing a model from the window: the file / folder choosers (they remember their folder)
and the progress dialog, Cancel included; the work is `EngineController.import_model`'s."""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QFileDialog, QMessageBox, QProgressBar, QProgressDialog, QWidget

from .. import accessibility as a11y
from ..backend import ImportCancelled
from ..error_words import in_words
from ..import_source import AlreadyImported
from ..controllers.engine import EngineController
from ..settings import Settings
from ..tasks import ProgressRelay
from ..widgets.status import StatusBar

log = logging.getLogger(__name__)


def _start_dir(settings: Settings) -> str:
    """Where a file dialog opens: the folder the last one was in (if it still exists)."""
    last = settings.last_dir
    return last if last and Path(last).is_dir() else str(Path.home())


def _remember_dir(settings: Settings, save_settings: Callable[[], Any], folder: Path) -> None:
    settings.last_dir = str(folder)
    save_settings()


def choose_gguf(parent: QWidget, settings: Settings, save_settings: Callable[[], Any],
                import_model: Callable[..., Any]) -> None:
    path, _ = QFileDialog.getOpenFileName(parent, "Import a GGUF model", _start_dir(settings),
                                          "GGUF models (*.gguf);;All files (*)")
    if path:
        _remember_dir(settings, save_settings, Path(path).parent)
        import_model(Path(path), gguf=True)


def choose_folder(parent: QWidget, settings: Settings, save_settings: Callable[[], Any],
                  import_model: Callable[..., Any]) -> None:
    path = QFileDialog.getExistingDirectory(parent, "Import an ONNX model folder", _start_dir(settings))
    if path:
        _remember_dir(settings, save_settings, Path(path).parent)
        import_model(Path(path), gguf=False)


def clear_message(status: StatusBar) -> None:
    """An import's last word leaves the status bar (after `ModelImports.clear`)."""
    if status.message.text().startswith(("Imported ", "Import cancelled")):
        status.set_message("")


class ModelImports:
    """The import in progress (`dialog`) and the last “already imported” said (`duplicate_box`)."""

    def __init__(self, parent: QWidget, engines: EngineController, status: StatusBar, *,
                 settings: Callable[[], Settings], save_settings: Callable[[], Any],
                 load_engine: Callable[[], Any], refresh_models: Callable[[], Any],
                 pick_model: Callable[[str], Any]):
        self.parent, self.engines, self.status = parent, engines, status
        self.settings, self.save_settings, self.load_engine = settings, save_settings, load_engine
        self.refresh_models, self.pick_model = refresh_models, pick_model
        self.dialog: QProgressDialog | None = None
        self.duplicate_box: QMessageBox | None = None
        self.clear = QTimer(parent)   # an import's last word leaves the status bar
        self.clear.setSingleShot(True)
        self.clear.setInterval(4000)
        self.clear.timeout.connect(lambda: clear_message(status))

    def already_imported(self, exc: AlreadyImported) -> QMessageBox:
        """Say that the file is imported already (nothing was converted), and offer to use it."""
        self.status.set_message(f"{exc}: nothing imported again")
        box = QMessageBox(QMessageBox.Icon.Information, "Already imported",
                          f"{exc}. It is in the model picker; nothing was imported again.",
                          QMessageBox.StandardButton.Ok, self.parent)
        if self.settings().model != exc.name:
            use = box.addButton(f"Use {exc.name}", QMessageBox.ButtonRole.AcceptRole)
            use.clicked.connect(lambda: self.pick_model(exc.name))
        self.refresh_models()    # in case the picker does not list it yet
        box.open()
        self.duplicate_box = box
        return box

    def import_model(self, src: Path, *, gguf: bool) -> QProgressDialog:
        cancel = threading.Event()
        status, clear, window = self.status, self.clear, self.parent
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
            if self.engines.engine is None and self.engines.error is not None:
                # the model in use could not be loaded (e.g. the default is missing): use this one
                self.settings().model = dest.name
                self.save_settings()
                self.load_engine()
            self.refresh_models()

        def failed(exc: BaseException) -> None:
            dlg.canceled.disconnect()
            dlg.close()
            clear.start()
            if isinstance(exc, ImportCancelled) or cancel.is_set():
                status.set_message("Import cancelled")
            elif isinstance(exc, AlreadyImported):
                self.already_imported(exc)
            else:
                log.warning("import of %s failed: %r", src, exc)
                status.set_message(f"Import failed: {in_words(exc)}")
                QMessageBox.warning(window, "Import failed", in_words(exc))

        self.engines.import_model(src, gguf=gguf, progress=progress, cancel=cancel,
                                  success=done, failure=failed)
        dlg.show()
        self.dialog = dlg
        return dlg
