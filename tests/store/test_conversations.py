"""Conversations: creation, sidebar listing, titles, settings, KV state, threads."""
from __future__ import annotations

import threading
import uuid
from datetime import timezone

import pytest

from app.store import DEFAULT_TITLE, ConversationRow, ConversationStore, NotFoundError

from .helpers import raw


def test_create_and_get(store: ConversationStore) -> None:
    c = store.create_conversation(system_prompt="Be brief.", model_id="smol",
                                  model_fingerprint="abc123", settings={"temperature": 0.7},
                                  cache_salt="salt")
    uuid.UUID(c.id)  # a real UUID: it is also the engine session id
    got = store.get_conversation(c.id)
    assert got == c
    assert got.title == DEFAULT_TITLE and not got.title_locked
    assert got.settings == {"temperature": 0.7} and got.cache_salt == "salt"
    assert got.kv_state == "none" and got.kv_bytes == 0 and got.current_leaf_id is None
    assert got.created_at.tzinfo is timezone.utc and got.last_opened_at is None


def test_create_with_given_id_and_duplicate_id(store: ConversationStore) -> None:
    cid = str(uuid.uuid4())
    assert store.create_conversation(id=cid).id == cid
    with pytest.raises(ValueError):
        store.create_conversation(id=cid)
    with pytest.raises(ValueError):
        store.create_conversation(id="not-a-uuid")


def test_list_pinned_first_then_recently_updated(store: ConversationStore) -> None:
    a = store.create_conversation()
    b = store.create_conversation()
    c = store.create_conversation()
    store.add_message(a.id, "user", "touch a")  # a is now the most recently updated
    store.set_pinned(c.id, True)
    rows = store.list_conversations()
    assert [r.id for r in rows] == [c.id, a.id, b.id]
    assert all(type(r) is ConversationRow for r in rows)
    assert rows[0].pinned and not rows[1].pinned
    # Renaming, opening and KV bookkeeping do not reorder the sidebar.
    store.rename(b.id, "B")
    store.mark_opened(b.id)
    store.set_kv_state(b.id, "disk", 10)
    assert [r.id for r in store.list_conversations()] == [c.id, a.id, b.id]


def test_title_from_first_user_message_until_renamed(store: ConversationStore) -> None:
    c = store.create_conversation(title="placeholder")
    store.add_message(c.id, "system", "You are helpful.")
    long = ("  Explain   the difference between a list and a tuple in Python, with examples of when to use each one"
            "\nsecond line")
    store.add_message(c.id, "user", long)
    title = store.get_conversation(c.id).title
    assert title.startswith("Explain the difference between a list and a tuple")
    assert title.endswith("\u2026") and len(title) <= 60 and "\n" not in title
    store.add_message(c.id, "assistant", "Lists are mutable.")
    store.add_message(c.id, "user", "A later question does not change the title")
    assert store.get_conversation(c.id).title == title
    store.rename(c.id, "  My   tuples ")
    got = store.get_conversation(c.id)
    assert got.title == "My tuples" and got.title_locked
    # An edit of the first user message would retitle, but not once renamed.
    first_user = store.active_path(c.id)[1]
    store.add_message(c.id, "user", "Edited first question", parent_id=first_user.parent_id)
    assert store.get_conversation(c.id).title == "My tuples"
    with pytest.raises(ValueError):
        store.rename(c.id, "   ")


def test_editing_first_message_retitles_unlocked(store: ConversationStore) -> None:
    c = store.create_conversation()
    store.add_message(c.id, "user", "Original question")
    store.add_message(c.id, "user", "Better question", parent_id=None)
    assert store.get_conversation(c.id).title == "Better question"


def test_kv_state_settings_and_opened(store: ConversationStore) -> None:
    c = store.create_conversation()
    store.set_kv_state(c.id, "memory", 1234)
    with pytest.raises(ValueError):
        store.set_kv_state(c.id, "gpu", 1)
    with pytest.raises(ValueError):
        store.set_kv_state(c.id, "disk", -1)
    store.update_settings(c.id, system_prompt="New prompt", settings={"top_p": 0.9})
    store.mark_opened(c.id)
    got = store.get_conversation(c.id)
    assert (got.kv_state, got.kv_bytes) == ("memory", 1234)
    assert got.system_prompt == "New prompt" and got.settings == {"top_p": 0.9}
    assert got.last_opened_at is not None and got.last_opened_at >= got.created_at
    with pytest.raises(ValueError):
        store.update_settings(c.id, settings={"bad": object()})


def test_unknown_ids_raise_not_found(store: ConversationStore) -> None:
    missing = str(uuid.uuid4())
    for call in (lambda: store.get_conversation(missing), lambda: store.rename(missing, "x"),
                 lambda: store.set_pinned(missing, True), lambda: store.active_path(missing),
                 lambda: store.add_message(missing, "user", "x"),
                 lambda: store.update_message(999, content="x"),
                 lambda: store.select_sibling(999), lambda: store.export_json(missing)):
        with pytest.raises(NotFoundError):
            call()


def test_data_survives_reopen(db_path) -> None:  # type: ignore[no-untyped-def]
    with ConversationStore(db_path) as s:
        c = s.create_conversation(model_id="m")
        s.add_message(c.id, "user", "persist me")
    with ConversationStore(db_path) as s:
        assert [m.content for m in s.active_path(c.id)] == ["persist me"]
        assert s.backup_path is None  # already at the newest schema: nothing to back up


def test_pragmas(store: ConversationStore, db_path) -> None:  # type: ignore[no-untyped-def]
    conn = raw(db_path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with store._db.writer.connect() as c:  # the store's own connection
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
    with store._db.reader.connect() as c:
        assert c.exec_driver_sql("PRAGMA query_only").scalar() == 1


def test_concurrent_writers_and_readers(store: ConversationStore) -> None:
    convs = [store.create_conversation() for _ in range(4)]
    failures: list[BaseException] = []

    def writer(cid: str) -> None:
        try:
            for i in range(25):
                store.add_message(cid, "user" if i % 2 == 0 else "assistant", f"m{i}")
        except BaseException as exc:  # noqa: BLE001 # pragma: no cover - reported below
            failures.append(exc)

    def reader() -> None:
        try:
            for _ in range(50):
                store.list_conversations()
                store.search("m1")
        except BaseException as exc:  # noqa: BLE001 # pragma: no cover - reported below
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(c.id,)) for c in convs]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    for c in convs:
        path = store.active_path(c.id)
        assert [m.content for m in path] == [f"m{i}" for i in range(25)]
        assert [m.depth for m in path] == list(range(25))


def test_closed_store_refuses(db_path) -> None:  # type: ignore[no-untyped-def]
    from app.store import StoreError

    s = ConversationStore(db_path)
    s.close()
    s.close()  # idempotent
    with pytest.raises(StoreError):
        s.list_conversations()
    with pytest.raises(StoreError):
        s.create_conversation()


def test_a_failed_write_leaves_nothing(store: ConversationStore, db_path) -> None:  # type: ignore[no-untyped-def]
    from sqlalchemy import text

    c = store.create_conversation()

    def half_then_fail(session):  # type: ignore[no-untyped-def]
        session.execute(text("INSERT INTO messages (conversation_id, depth, role, content, "
                             "created_at) VALUES (:c, 0, 'user', 'half', 0)"), {"c": c.id})
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        store._writer.run(half_then_fail)
    assert raw(db_path).execute("SELECT count(*) FROM messages").fetchone() == (0,)
    store.add_message(c.id, "user", "the writer carries on")
    assert len(store.active_path(c.id)) == 1


def test_rows_are_frozen_and_hashable(store: ConversationStore) -> None:
    import dataclasses

    c = store.create_conversation(settings={"a": 1})
    m = store.add_message(c.id, "user", "x", figures={"generated_tokens": 1})
    for value in (c, m, store.list_conversations()[0]):
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.id = "other"  # type: ignore[misc]
        hash(value)


def test_title_from_message() -> None:
    from app.store.titles import title_from_message

    assert title_from_message(" \n\t ") is None
    assert title_from_message("\n\n  Short   one \nrest") == "Short one"
    long = "word " * 40
    cut = title_from_message(long)
    assert cut is not None and cut.endswith("\u2026") and len(cut) <= 60
    assert title_from_message("x" * 100, limit=10) == "x" * 9 + "\u2026"
