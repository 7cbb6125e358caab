"""Fixtures for the turn tests: a real SQLite store in tmp_path, the memory store, the GUI tests'
fake engine (no Qt anywhere)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gui"))   # fake_engine.py

from app.store import ConversationStore  # noqa: E402


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ConversationStore]:
    s = ConversationStore(tmp_path / "amber.sqlite3")
    yield s
    s.close()
