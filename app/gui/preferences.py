"""The window's settings: the `Settings` in use (replaced when the settings dialog is accepted)
and where they are saved; a save that fails says so in the status bar."""
from __future__ import annotations

import logging
from pathlib import Path

from .settings import Settings
from .widgets.status import StatusBar

log = logging.getLogger(__name__)


class Preferences:
    def __init__(self, path: Path, settings: Settings, status: StatusBar | None = None):
        self.path, self.settings, self.status = path, settings, status

    def save(self) -> None:
        try:
            self.settings.save(self.path)
        except OSError as exc:
            if self.status is not None:
                self.status.set_message(f"Could not save settings: {exc}")
