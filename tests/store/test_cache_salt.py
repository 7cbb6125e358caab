"""A chat's cache salt (what a remote vLLM / Amber server gets as `cache_salt`) is stored with it."""
from __future__ import annotations

import pytest

from app.store import ConversationStore
from engine.remote.engine import new_cache_salt


def test_salt_survives_a_reopen_and_the_updated_order(store: ConversationStore, db_path):
    a = store.create_conversation(title="a")
    b = store.create_conversation(title="b")
    order = [c.id for c in store.list_conversations()]
    salt = new_cache_salt()
    assert len(salt) == 43                     # 256 bits, URL-safe base64
    store.set_cache_salt(a.id, salt)
    assert [c.id for c in store.list_conversations()] == order   # bookkeeping does not reorder
    store.close()
    again = ConversationStore(db_path)
    try:
        assert again.get_conversation(a.id).cache_salt == salt
        assert again.get_conversation(b.id).cache_salt is None
        again.set_cache_salt(a.id, None)
        assert again.get_conversation(a.id).cache_salt is None
    finally:
        again.close()


def test_bad_salts_and_unknown_chats_are_refused(store: ConversationStore):
    c = store.create_conversation()
    for bad in ("short", "x" * 129, 12345):
        with pytest.raises(ValueError):
            store.set_cache_salt(c.id, bad)     # type: ignore[arg-type]
    with pytest.raises(Exception, match="no conversation"):
        store.set_cache_salt("5b0f2d9e-8f7c-4d0a-9c1b-2e3f4a5b6c7d", new_cache_salt())
