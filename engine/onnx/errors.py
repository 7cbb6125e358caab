"""The one error type model import raises: its message is shown to the user as is."""
from __future__ import annotations

from engine.base.oneline import one_line


class ModelImportError(Exception):
    """A GGUF file cannot be imported; the message names the cause (no traceback needed)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(one_line(str(message)))
