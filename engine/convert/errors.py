"""The one error type model import raises: its message is shown to the user as is."""


class ModelImportError(Exception):
    """A GGUF file cannot be imported; the message names the cause (no traceback needed)."""
