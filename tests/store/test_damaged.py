"""Damage inside a real SQLite file is a StoreError with reason "corrupt".

Damaged schema text (quick_check used to raise a raw UnicodeDecodeError), damaged message or
title text, dropped tables and triggers, broken references: each is reported as corruption
(never "io", never a raw exception), naming the file, and the file is left as it was.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from app.store import ConversationStore, StoreError

from .helpers import raw, sha256
from .test_bad_input import populated, refused


def test_schema_text_not_utf8(db_path: Path) -> None:
    """One byte of a CREATE INDEX statement in sqlite_master replaced by 0xf8: SQLite's error
    text quotes it, and Python used to fail decoding that error message."""
    populated(db_path)
    data = bytearray(db_path.read_bytes())
    at = data.index(b"CREATE INDEX ix_messages_conversation_parent")
    at = data.index(b"parent_id", at) + 4
    data[at] = 0xF8
    db_path.write_bytes(bytes(data))
    err = refused(db_path, "corrupt")
    assert "damaged" in str(err)


def test_table_sql_not_utf8(db_path: Path) -> None:
    populated(db_path)
    data = bytearray(db_path.read_bytes())
    at = data.index(b"CREATE TABLE messages") + len(b"CREATE TA")
    data[at] = 0x82
    db_path.write_bytes(bytes(data))
    refused(db_path, "corrupt")


def _damage_text(db_path: Path, sql: str) -> None:
    conn = raw(db_path)
    conn.execute("PRAGMA ignore_check_constraints = ON")   # as a damaged page would
    conn.execute(sql)
    conn.close()


@pytest.fixture
def one_chat(db_path: Path) -> str:
    with ConversationStore(db_path) as store:
        c = store.create_conversation(title="my chat")
        store.add_message(c.id, "user", "first words")
        store.add_message(c.id, "assistant", "a reply")
        return c.id


def test_damaged_message_text(db_path: Path, one_chat: str) -> None:
    _damage_text(db_path, "UPDATE messages SET content = CAST(x'6869ff2073656372657420fe' AS TEXT) "
                          "WHERE content = 'a reply'")
    with ConversationStore(db_path) as store:      # the file itself is sound: it opens
        with pytest.raises(StoreError) as info:
            store.active_path(one_chat)
        assert info.value.reason == "corrupt", info.value
        assert str(db_path) in str(info.value) and "content" in str(info.value)
        assert "secret" not in str(info.value)      # the damaged text is not echoed
        with pytest.raises(StoreError) as info:
            store.export_json(one_chat)
        assert info.value.reason == "corrupt"


def test_damaged_title_text(db_path: Path, one_chat: str) -> None:
    _damage_text(db_path, "UPDATE conversations SET title = CAST(x'80' AS TEXT)")
    with ConversationStore(db_path) as store:
        with pytest.raises(StoreError) as info:
            store.list_conversations()
        assert info.value.reason == "corrupt", info.value


def test_damaged_role_text_on_write(db_path: Path, one_chat: str) -> None:
    """The writer thread's reads of a damaged row are corruption too."""
    _damage_text(db_path, "UPDATE messages SET role = CAST(x'75ff6572' AS TEXT) WHERE content = 'a reply'")
    with ConversationStore(db_path) as store:
        with pytest.raises(StoreError) as info:
            store.duplicate(one_chat)
        assert info.value.reason == "corrupt", info.value


@pytest.mark.parametrize("drop,missing", [
    ("DROP TABLE messages", "table messages"),
    ("DROP TABLE pending_engine_deletes", "table pending_engine_deletes"),
    ("DROP TABLE conversations_fts", "table conversations_fts"),
    ("DROP TRIGGER messages_fts_ai", "trigger messages_fts_ai"),
])
def test_dropped_table_detected_at_open(db_path: Path, drop: str, missing: str) -> None:
    populated(db_path)
    _damage_text(db_path, drop)
    err = refused(db_path, "corrupt")
    assert missing in str(err)


def test_table_dropped_while_open(db_path: Path, one_chat: str) -> None:
    with ConversationStore(db_path) as store:
        _damage_text(db_path, "DROP TABLE messages")
        with pytest.raises(StoreError) as info:
            store.active_path(one_chat)
        assert info.value.reason == "corrupt", info.value
        assert "no such table" in str(info.value)


def test_broken_reference_without_a_migration(db_path: Path, one_chat: str) -> None:
    """A message pointing at no conversation, in a file already at the newest schema: damage,
    not a failed upgrade (no upgrade ran)."""
    conn = raw(db_path)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("UPDATE messages SET conversation_id = 'no-such-chat' WHERE content = 'a reply'")
    conn.close()
    before = sha256(db_path)
    with pytest.raises(StoreError) as info:
        ConversationStore(db_path)
    assert info.value.reason == "corrupt", info.value
    assert "broken references" in str(info.value)
    assert sha256(db_path) == before


def test_a_multi_line_sqlite_message_is_one_line(db_path: Path, one_chat: str) -> None:
    """SQLite quotes names from the file in its messages, newlines and all (here a trigger that
    reads a table named over two lines): the StoreError is still one line."""
    _damage_text(db_path, 'CREATE TRIGGER odd BEFORE INSERT ON messages BEGIN SELECT * FROM "gone\n\r\x1b[2Kaway"; END')
    with ConversationStore(db_path) as store:
        with pytest.raises(StoreError) as info:
            store.add_message(one_chat, "user", "more words")
    text = str(info.value)
    assert info.value.reason == "corrupt", text
    assert text.isprintable() and "no such table: main.gone" in text and "away" in text
    assert str(db_path) in text
