"""Alembic migrations: blank databases, databases made by the first schema, models in step."""
from __future__ import annotations

import json
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from app.store import ConversationStore
from app.store.database import head_revision, known_revisions, open_database
from app.store.models import Base

from .helpers import raw

CID = "0b9e4a4e-7d0c-4c38-9d43-5f0c1c6a1a11"


def make_revision_0001(path: Path) -> None:
    """A database as the first Amber release left it, with a conversation in it."""
    open_database(path, target_revision="0001").dispose()
    conn = raw(path)
    assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0001",)
    conn.execute(
        "INSERT INTO conversations (id, title, title_locked, pinned, created_at, updated_at, "
        "model_id, system_prompt, settings_json, kv_state, kv_bytes, current_leaf_id) "
        "VALUES (?, 'Old chat', 1, 1, 1700000000000000, 1700000001000000, 'smol', 'sys', "
        "'{\"temperature\": 0.5}', 'disk', 2048, 2)", (CID,))
    conn.execute("INSERT INTO messages (id, conversation_id, parent_id, depth, role, content, "
                 "created_at) VALUES (1, ?, NULL, 0, 'user', 'tell me about platypus eggs', "
                 "1700000000500000)", (CID,))
    conn.execute("INSERT INTO messages (id, conversation_id, parent_id, depth, role, content, "
                 "created_at, figures_json) VALUES (2, ?, 1, 1, 'assistant', 'They lay them.', "
                 "1700000001000000, ?)",
                 (CID, json.dumps({"generated_tokens": 4, "ttft_ms": 12.5,
                                   "decode_tokens_per_s": 50.0, "finish_reason": "eos",
                                   "resume": "disk"})))
    conn.close()


def test_revisions_are_numbered_and_linear() -> None:
    assert known_revisions() == {"0001", "0002", "0003", "0004", "0005"}
    assert head_revision() == "0005"


def test_blank_database_upgrades_to_head(db_path: Path) -> None:
    with ConversationStore(db_path) as store:
        assert store.list_conversations() == [] and store.backup_path is None
    assert raw(db_path).execute("SELECT version_num FROM alembic_version").fetchone() == ("0005",)


def test_empty_file_is_a_blank_database(db_path: Path) -> None:
    db_path.touch()
    with ConversationStore(db_path) as store:
        assert store.list_conversations() == []


def test_upgrade_from_first_schema_keeps_data(db_path: Path) -> None:
    make_revision_0001(db_path)
    with ConversationStore(db_path) as store:
        # The backup holds the database exactly as it was before the upgrade.
        backup = store.backup_path
        assert backup is not None and backup.name.startswith("amber.sqlite3.backup-0001-")
        old = raw(backup)
        assert old.execute("SELECT version_num FROM alembic_version").fetchone() == ("0001",)
        assert old.execute("SELECT count(*) FROM messages").fetchone() == (2,)

        rows = store.list_conversations()
        assert [(r.id, r.title, r.pinned, r.kv_state, r.kv_bytes) for r in rows] == \
            [(CID, "Old chat", True, "disk", 2048)]
        assert rows[0].updated_at.timestamp() == 1700000001.0
        detail = store.get_conversation(CID)
        assert detail.title_locked and detail.settings == {"temperature": 0.5}
        path = store.active_path(CID)
        assert [m.content for m in path] == ["tell me about platypus eggs", "They lay them."]
        assert path[1].figures is not None and path[1].figures["ttft_ms"] == 12.5
        # 0002's search index covers what 0001 stored, and 0002's columns were backfilled.
        assert [h.conversation_id for h in store.search("platypus")] == [CID]
        assert [h.conversation_id for h in store.search("old chat")] == [CID]
        assert raw(db_path).execute(
            "SELECT generated_tokens, ttft_ms, tokens_per_s, finish_reason, resumed_from_disk "
            "FROM messages WHERE id = 2").fetchone() == (4, 12.5, 50.0, "eos", 1)
        # And it keeps working: new messages continue the old conversation.
        store.add_message(CID, "user", "and echidnas?")
        assert len(store.active_path(CID)) == 3
    assert raw(db_path).execute("PRAGMA foreign_key_check").fetchall() == []
    # A second start finds nothing to upgrade, so makes no new backup.
    with ConversationStore(db_path) as store:
        assert store.backup_path is None


def test_migrations_match_models(db_path: Path) -> None:
    open_database(db_path).dispose()
    engine = create_engine(f"sqlite:///{db_path}")
    with engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    # Tables the models do not describe on purpose: FTS5 (raw DDL) and bookkeeping.
    ignored = ("messages_fts", "conversations_fts", "alembic_version", "sqlite_sequence")

    def table_of(diff: object) -> str:
        item = diff[0] if isinstance(diff, list) else diff
        obj = item[1]  # type: ignore[index]
        return getattr(obj, "name", "") if item[0].endswith("_table") else \
            getattr(getattr(obj, "table", None), "name", "")  # type: ignore[index]

    real = [d for d in diffs if not table_of(d).startswith(ignored)]
    assert real == []


def make_revision_0002(path: Path) -> None:
    """A database as revision 0002 left it: a conversation by "smol" with two replies."""
    open_database(path, target_revision="0002").dispose()
    conn = raw(path)
    assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == ("0002",)
    conn.execute(
        "INSERT INTO conversations (id, title, title_locked, pinned, created_at, updated_at, "
        "model_id, system_prompt, settings_json, kv_state, kv_bytes, current_leaf_id) "
        "VALUES (?, 'Chat 2', 0, 0, 1700000000000000, 1700000001000000, 'smol', '', '{}', "
        "'none', 0, 3)", (CID,))
    for mid, parent, depth, role, text in [(1, None, 0, "user", "what do wombats eat"),
                                           (2, 1, 1, "assistant", "Grasses and roots."),
                                           (3, 1, 1, "assistant", "Mostly grass.")]:
        conn.execute("INSERT INTO messages (id, conversation_id, parent_id, depth, role, content, "
                     "created_at, figures_json, generated_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (mid, CID, parent, depth, role, text, 1700000000500000 + mid,
                      json.dumps({"generated_tokens": 3}) if role == "assistant" else None,
                      3 if role == "assistant" else None))
    conn.close()


def test_upgrade_from_0002_labels_old_replies_with_the_chat_model(db_path: Path) -> None:
    make_revision_0002(db_path)
    with ConversationStore(db_path) as store:
        backup = store.backup_path
        assert backup is not None and backup.name.startswith("amber.sqlite3.backup-0002-")
        assert raw(backup).execute("SELECT count(*) FROM messages").fetchone() == (3,)
        path = store.active_path(CID)
        assert [(m.role, m.content, m.model_name) for m in path] == [
            ("user", "what do wombats eat", None), ("assistant", "Mostly grass.", "smol")]
        assert path[1].figures == {"generated_tokens": 3} and path[1].sibling_count == 2
        assert [s.model_name for s in store.siblings(2)] == ["smol", "smol"]
        # the search index (0002's triggers) survived the column change and keeps indexing
        assert [h.conversation_id for h in store.search("wombats")] == [CID]
        new = store.add_message(CID, "assistant", "Roots, mainly, said another model.",
                                parent_id=1, model_name="Other-7B")
        assert new.model_name == "Other-7B"
        assert store.active_path(CID)[-1].model_name == "Other-7B"
        assert [h.conversation_id for h in store.search("mainly")] == [CID]
        # duplicates and exports keep who wrote what
        copy = store.duplicate(CID, title="Chat 2 (copy)")
        assert copy.title == "Chat 2 (copy)"
        assert [m.model_name for m in store.active_path(copy.id)] == [None, "Other-7B"]
        exported = store.export_json(CID)
        assert {m["model_name"] for m in exported["messages"]} == {None, "smol", "Other-7B"}
        imported = store.import_json(exported)
        assert [m.model_name for m in store.active_path(imported.id)] == [None, "Other-7B"]
    assert raw(db_path).execute("SELECT version_num FROM alembic_version").fetchone() == ("0005",)
    assert raw(db_path).execute("PRAGMA foreign_key_check").fetchall() == []


def test_upgrade_from_0003_keeps_chats_and_leaves_their_model_choice_unknown(db_path: Path) -> None:
    open_database(db_path, target_revision="0003").dispose()
    conn = raw(db_path)
    conn.execute(
        "INSERT INTO conversations (id, title, title_locked, pinned, created_at, updated_at, "
        "model_id, system_prompt, settings_json, kv_state, kv_bytes, current_leaf_id) "
        "VALUES (?, 'Pinned chat', 0, 1, 1700000000000000, 1700000001000000, 'Tiny-A', '', '{}', "
        "'disk', 4096, NULL)", (CID,))
    conn.close()
    with ConversationStore(db_path) as store:
        backup = store.backup_path
        assert backup is not None and backup.name.startswith("amber.sqlite3.backup-0003-")
        old = store.get_conversation(CID)
        assert (old.model_id, old.model_choice, old.pinned, old.kv_state) == ("Tiny-A", None, True, "disk")
        store.set_model(CID, "Tiny-A", "Tiny-A")
        assert store.get_conversation(CID).model_choice == "Tiny-A"
        made = store.create_conversation(model_id="Tiny-B", model_choice="Tiny-B")
        assert store.get_conversation(made.id).model_choice == "Tiny-B"


def test_upgrade_from_0004_keeps_replies_and_stores_tool_steps(db_path: Path) -> None:
    open_database(db_path, target_revision="0004").dispose()
    conn = raw(db_path)
    conn.execute(
        "INSERT INTO conversations (id, title, title_locked, pinned, created_at, updated_at, "
        "model_id, system_prompt, settings_json, kv_state, kv_bytes, current_leaf_id) "
        "VALUES (?, 'Sums', 0, 1, 1700000000000000, 1700000001000000, 'Tiny-A', '', '{}', "
        "'disk', 4096, 2)", (CID,))
    for mid, parent, role, text in [(1, None, "user", "what is 2 + 3"), (2, 1, "assistant", "Five.")]:
        conn.execute("INSERT INTO messages (id, conversation_id, parent_id, depth, role, content, created_at) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)", (mid, CID, parent, mid - 1, role, text, 1700000000500000 + mid))
    conn.close()
    steps = [{"text": "", "calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3},
                                     "server": "calc", "status": "done", "result": "5"}]}]
    with ConversationStore(db_path) as store:
        backup = store.backup_path
        assert backup is not None and backup.name.startswith("amber.sqlite3.backup-0004-")
        assert [(m.content, m.tool_steps) for m in store.active_path(CID)] == [
            ("what is 2 + 3", None), ("Five.", None)]
        store.add_message(CID, "assistant", "It is 5.", parent_id=1, tool_steps=steps)
        assert [h.conversation_id for h in store.search("It is 5")] == [CID]
    with ConversationStore(db_path) as store:      # read back by a second start
        assert store.active_path(CID)[-1].tool_steps == steps
    assert raw(db_path).execute("SELECT version_num FROM alembic_version").fetchone() == ("0005",)
