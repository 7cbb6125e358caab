"""The settings dialog's API server switch: serves the GUI's own engine over Amber's OpenAI-compatible
API (engine.server), started and stopped on worker threads so the UI never waits for it."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QCheckBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton,
                               QSpinBox, QWidget)

from .tasks import run_task

if TYPE_CHECKING:
    from engine.api import ChatEngine

DEFAULT_PORT = 8080


class ServerControl(QObject):
    """Owns the running server (one at most). `changed(url)` says where it listens ("" when stopped);
    `failed(message)` says why it could not start; `switched(on, port, key)`: it was started or the
    user stopped it (the window keeps that in the settings; a model reload's stop is not it, and a
    start that failed changes nothing)."""

    changed = Signal(str)
    failed = Signal(str)
    switched = Signal(bool, int, str)

    def __init__(self, engine: Callable[[], ChatEngine | None], state_dir: Path, parent: QObject | None = None,
                 runner: Callable[..., None] = run_task) -> None:
        super().__init__(parent)
        self._engine = engine
        self._state_dir = Path(state_dir)
        self._run = runner
        self.handle: Any = None
        self.port = DEFAULT_PORT
        self.api_key = ""
        self.busy = False
        self._resume = False

    @property
    def url(self) -> str:
        return self.handle.url if self.handle is not None else ""

    @property
    def running(self) -> bool:
        return self.handle is not None

    def start(self, port: int | None = None, api_key: str | None = None) -> None:
        engine = self._engine()
        if engine is None:
            self.failed.emit("the model is still loading; try again in a moment")
            return
        if self.handle is not None or self.busy:
            return
        self.port = self.port if port is None else port
        self.api_key = self.api_key if api_key is None else api_key
        self.busy = True
        port_, key, state = self.port, self.api_key.strip(), self._state_dir

        def work() -> Any:
            from engine.server import LOOPBACK, ServerConfig, serve_in_thread  # noqa: PLC0415 - FastAPI on demand
            # Loopback only from the GUI: the CLI is the way to serve other machines, with a key.
            return serve_in_thread(engine, LOOPBACK, port_, state_dir=state,
                                   config=ServerConfig(api_keys=[key] if key else []))

        def done(handle: Any) -> None:
            self.busy = False
            self.handle = handle
            self.switched.emit(True, port_, self.api_key)
            self.changed.emit(handle.url)

        def error(exc: BaseException) -> None:
            self.busy = False
            self.failed.emit(f"could not start the server on port {port_}: {exc}")
            self.changed.emit("")
        self._run(work, done, error)

    def stop(self, on_stopped: Callable[[], None] | None = None) -> None:
        self.switched.emit(False, self.port, self.api_key)
        handle, self.handle = self.handle, None
        if handle is None:
            if on_stopped is not None:
                on_stopped()
            return
        self.busy = True

        def done(_: Any) -> None:
            self.busy = False
            self.changed.emit("")
            if on_stopped is not None:
                on_stopped()
        self._run(handle.stop, done, lambda exc: done(None))

    def stop_now(self) -> None:
        """On a worker thread, before the engine is replaced or shut down (blocks up to the server's
        graceful timeout)."""
        handle, self.handle = self.handle, None
        self._resume = handle is not None
        if handle is not None:
            handle.stop()

    def engine_replaced(self) -> None:
        """After a new engine loaded: serve it if the old one was being served (UI thread)."""
        if self._resume:
            self._resume = False
            self.changed.emit("")
            self.start()


class ServerPanel(QGroupBox):
    """The switch, port, optional key, and the address with a copy button."""

    def __init__(self, control: ServerControl, parent: QWidget | None = None) -> None:
        super().__init__("Local API server (OpenAI-compatible)", parent)
        self.control = control
        form = QFormLayout(self)
        self.enabled = QCheckBox("Serve this model to other apps on this computer")
        self.enabled.setChecked(control.running)
        form.addRow(self.enabled)
        self.port = QSpinBox(minimum=1024, maximum=65535)
        self.port.setValue(control.port)
        form.addRow("Port", self.port)
        self.api_key = QLineEdit(control.api_key)
        self.api_key.setPlaceholderText("optional: clients must send it as a bearer key")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        form.addRow("API key", self.api_key)
        self.address = QLineEdit(control.url)
        self.address.setAccessibleName("Server address")   # in a row box: its form label is not its buddy
        self.address.setReadOnly(True)
        self.address.setPlaceholderText("not running")
        self.copy = QPushButton("Copy")
        self.copy.setEnabled(control.running)
        self.copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.address.text()))
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.address, 1)
        row.addWidget(self.copy)
        box = QWidget()
        box.setLayout(row)
        form.addRow("Address", box)
        self.message = QLabel("Loopback only (127.0.0.1). Stored responses are pinned chats of this engine.")
        self.message.setWordWrap(True)
        form.addRow(self.message)
        self._sync(control.url)
        self.enabled.toggled.connect(self._toggled)
        control.changed.connect(self._sync)
        control.failed.connect(self._failed)

    def _toggled(self, on: bool) -> None:
        if on and not self.control.running:
            self.message.setText("Starting…")
            self.control.start(self.port.value(), self.api_key.text())
        elif not on and self.control.running:
            self.message.setText("Stopping…")
            self.control.stop()
        self.port.setEnabled(not on)
        self.api_key.setEnabled(not on)

    def _sync(self, url: str) -> None:
        self.address.setText(url)
        self.copy.setEnabled(bool(url))
        running = bool(url)
        if self.enabled.isChecked() != running and not self.control.busy:
            self.enabled.blockSignals(True)
            self.enabled.setChecked(running)
            self.enabled.blockSignals(False)
        self.port.setEnabled(not running)
        self.api_key.setEnabled(not running)
        if running:
            self.message.setText("Running. Clients use this address as their OpenAI base URL.")
        elif not self.control.busy and not self.message.text().startswith("could not"):
            self.message.setText("Loopback only (127.0.0.1). Stored responses are pinned chats of this engine.")

    def _failed(self, message: str) -> None:
        self.message.setText(message)
        self.enabled.blockSignals(True)
        self.enabled.setChecked(False)
        self.enabled.blockSignals(False)
