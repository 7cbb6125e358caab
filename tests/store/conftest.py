"""Fixtures for the conversation store tests: real SQLite files in tmp_path."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from app.store import ConversationStore


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "amber.sqlite3"


@pytest.fixture
def store(db_path: Path) -> Iterator[ConversationStore]:
    s = ConversationStore(db_path)
    yield s
    s.close()
