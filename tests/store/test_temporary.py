"""Temporary chats are never given to the store, so nothing of them reaches the disk."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from app.store import ConversationStore
from engine.api import ChatMessage


class TemporaryChat:
    """How the GUI keeps a temporary chat: a plain in-memory object, never a store row."""

    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []

    def add(self, role: str, content: str) -> None:
        self.messages.append(ChatMessage(role, content))


def files_containing(root: Path, needle: str) -> list[Path]:
    """Every file under `root` whose bytes contain `needle` in UTF-8 or UTF-16."""
    patterns = [needle.encode(enc) for enc in ("utf-8", "utf-16-le", "utf-16-be")]
    return [p for p in root.rglob("*") if p.is_file()
            and any(pat in p.read_bytes() for pat in patterns)]


def test_temporary_chat_leaves_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "amber-home"
    monkeypatch.setenv("AMBER_HOME", str(home))
    secret = f"tmpsecret{uuid.uuid4().hex}"
    kept = f"keptmarker{uuid.uuid4().hex}"

    store = ConversationStore()  # the default database in the data directory
    assert store.path == home / "amber.sqlite3"
    saved = store.create_conversation()
    store.add_message(saved.id, "user", f"a saved chat says {kept}")

    # A temporary chat in the same session, while the GUI keeps using the store.
    temp = TemporaryChat()
    temp.add("user", f"please forget {secret}")
    temp.add("assistant", f"I will forget {secret}")
    store.list_conversations()
    assert store.search(secret) == []
    store.add_message(saved.id, "assistant", "the saved chat goes on")
    del temp  # closing the temporary chat

    # While open (WAL and shared-memory files present) and after closing.
    wal = home / "amber.sqlite3-wal"
    assert wal.exists()
    assert files_containing(home, secret) == []
    assert wal in files_containing(home, kept)  # the scan does see what was stored
    store.close()
    assert files_containing(tmp_path, secret) == []
    assert home / "amber.sqlite3" in files_containing(home, kept)
