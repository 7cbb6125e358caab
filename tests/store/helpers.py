"""Helpers shared by the store tests."""
from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path


def sha256(path: Path) -> str:
    """Digest of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def raw(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection, to look behind the store's back."""
    return sqlite3.connect(path, isolation_level=None)
