"""Deleting: rows first, then the engine's KV files, reconciled after a crash in between."""
from __future__ import annotations

import uuid
from pathlib import Path

from app.store import ConversationStore


class FakeEngineFiles:
    """Stands in for the engine's state dir: one file per saved session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def save(self, session_id: str) -> None:
        (self.root / f"{session_id}.kv").write_bytes(b"kv")

    def delete(self, session_id: str) -> None:
        (self.root / f"{session_id}.kv").unlink(missing_ok=True)

    def sessions(self) -> list[str]:
        return sorted(p.stem for p in self.root.glob("*.kv"))


def gui_delete(store: ConversationStore, engine: FakeEngineFiles, cid: str, *,
               crash: bool = False) -> None:
    """What the GUI does: delete in the store, delete the engine session, confirm."""
    store.delete(cid)
    if crash:
        return  # Amber died before the engine deleted the files
    engine.delete(cid)
    store.confirm_engine_deleted(cid)


def gui_startup(store: ConversationStore, engine: FakeEngineFiles) -> None:
    """What the GUI does at startup: finish pending deletes, drop sessions with no rows."""
    for cid in store.pending_engine_deletes():
        engine.delete(cid)
        store.confirm_engine_deleted(cid)
    for cid in store.orphan_sessions(engine.sessions()):
        engine.delete(cid)


def test_delete_then_confirm(store: ConversationStore, tmp_path: Path) -> None:
    engine = FakeEngineFiles(tmp_path / "state")
    c = store.create_conversation()
    engine.save(c.id)
    gui_delete(store, engine, c.id)
    assert store.pending_engine_deletes() == [] and engine.sessions() == []
    assert store.delete(c.id) is False  # deleting twice is harmless


def test_crash_between_rows_and_files_is_reconciled(db_path: Path, tmp_path: Path) -> None:
    engine = FakeEngineFiles(tmp_path / "state")
    store = ConversationStore(db_path)
    keep = store.create_conversation()
    gone = store.create_conversation()
    store.add_message(gone.id, "user", "bye")
    for c in (keep, gone):
        engine.save(c.id)
    gui_delete(store, engine, gone.id, crash=True)
    store.close()
    # The rows are gone, the files are not, and the store remembers that.
    assert engine.sessions() == sorted([keep.id, gone.id])
    store = ConversationStore(db_path)
    assert store.pending_engine_deletes() == [gone.id]
    gui_startup(store, engine)
    assert engine.sessions() == [keep.id]
    assert [r.id for r in store.list_conversations()] == [keep.id]
    assert store.pending_engine_deletes() == []
    store.close()


def test_orphan_sessions(store: ConversationStore) -> None:
    c = store.create_conversation()
    stray = str(uuid.uuid4())
    assert store.orphan_sessions([c.id, stray, stray]) == [stray]
    assert store.orphan_sessions([]) == []
