"""Fixtures for the turn tests: a real SQLite store in tmp_path, the memory store, tests/support's
fake engine (no Qt anywhere)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from app.store import ConversationStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ConversationStore]:
    s = ConversationStore(tmp_path / "amber.sqlite3")
    yield s
    s.close()
