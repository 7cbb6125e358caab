"""Foundations every engine layer may use: Amber's folders (paths), safe file access (safefs), one-line messages."""
