"""Amber's PySide6 GUI (widgets only; the engine and the store are reached via backend.py)."""
