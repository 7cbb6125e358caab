"""The local API server from the window: its control (app/gui/server_control.py), made on first
use; the status bar's indicator; its switch remembered in the settings (it starts again on the
next launch, once the model is loaded); a new engine served at once."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject

from .controllers.engine import EngineController
from .preferences import Preferences
from .tasks import TaskRunner
from .widgets.status import StatusBar


class ApiBinding:
    def __init__(self, engines: EngineController, tasks: TaskRunner, status: StatusBar, prefs: Preferences,
                 state_dir: Path, *, closing: Callable[[], bool], parent: QObject):
        """`closing()`: Amber is quitting (the server is not started again)."""
        self.engines, self.tasks, self.status, self.prefs = engines, tasks, status, prefs
        self.state_dir, self.closing, self.parent = state_dir, closing, parent
        self.started: Any = None     # the control, once made (None: nothing to tell)

    def server(self) -> Any:
        """The local API server's control, made on first use."""
        if self.started is None:
            from .server_control import ServerControl  # noqa: PLC0415
            control = ServerControl(lambda: self.engines.engine, self.state_dir, parent=self.parent,
                                    runner=self.tasks.run_task)
            s = self.prefs.settings
            control.port, control.api_key = s.api_port, s.api_key
            control.switched.connect(self.on_switched)
            control.changed.connect(self.status.set_api)
            control.failed.connect(lambda why: self.status.set_message(f"API server: {why}"))
            self.started = control
        return self.started

    def on_switched(self, on: bool, port: int, key: str) -> None:
        """The user turned the API server on or off: it starts again on the next launch."""
        s = self.prefs.settings
        if (s.api_server, s.api_port, s.api_key) != (on, port, key):
            s.api_server, s.api_port, s.api_key = on, port, key
            self.prefs.save()

    def serve_new_engine(self) -> None:
        if self.started is not None:   # it serves the new engine now
            self.started.engine_replaced()
        self.restore()

    def restore(self) -> None:
        """Start the API server if it was on when Amber last ran (the model is loaded now)."""
        s = self.prefs.settings
        if not s.api_server or self.closing():
            return
        control = self.server()
        if not control.running and not control.busy:
            control.start(s.api_port, s.api_key)
