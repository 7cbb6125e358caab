"""Amber's PySide6 GUI (widgets only; the engine and the store are reached via backend.py)."""
from .compat import immortalize_singletons

# Before any Qt call: PySide6 6.12 on CPython 3.11 leaks references to None/True/False (compat.py).
immortalize_singletons()
