"""Messages: the tree of edits and regenerations, the active path, figures, branching."""
from __future__ import annotations

import pytest

from app.store import ConversationStore, NotFoundError

from .helpers import raw

FIGURES = {"prompt_tokens": 12, "generated_tokens": 40, "ttft_ms": 85.5,
           "decode_tokens_per_s": 31.25, "finish_reason": "eos", "resume": "disk",
           "provider": "CPUExecutionProvider"}


def test_append_moves_current_leaf(store: ConversationStore) -> None:
    c = store.create_conversation()
    u = store.add_message(c.id, "user", "Hi")
    a = store.add_message(c.id, "assistant", "Hello!", figures=FIGURES)
    assert (u.parent_id, u.depth, a.parent_id, a.depth) == (None, 0, u.id, 1)
    assert (a.sibling_index, a.sibling_count) == (0, 1)
    assert store.get_conversation(c.id).current_leaf_id == a.id
    path = store.active_path(c.id)
    assert [(m.role, m.content) for m in path] == [("user", "Hi"), ("assistant", "Hello!")]
    assert path[1].figures == FIGURES and path[0].figures is None


def test_figures_also_stored_as_columns(store: ConversationStore, db_path) -> None:  # type: ignore[no-untyped-def]
    from engine.api import GenerationFigures

    c = store.create_conversation()
    store.add_message(c.id, "user", "q")
    m = store.add_message(c.id, "assistant", "a", figures=FIGURES)
    g = store.add_message(c.id, "assistant", "b", parent_id=m.parent_id,
                          figures=GenerationFigures(generated_tokens=3, resume="memory"))
    assert g.figures is not None and g.figures["generated_tokens"] == 3
    rows = dict((r[0], r[1:]) for r in raw(db_path).execute(
        "SELECT id, generated_tokens, ttft_ms, tokens_per_s, finish_reason, resumed_from_disk "
        "FROM messages WHERE role = 'assistant'"))
    assert rows[m.id] == (40, 85.5, 31.25, "eos", 1)
    assert rows[g.id][0] == 3 and rows[g.id][4] == 0


def test_regenerate_and_flip_between_alternatives(store: ConversationStore) -> None:
    c = store.create_conversation()
    u = store.add_message(c.id, "user", "Tell me a joke")
    a1 = store.add_message(c.id, "assistant", "joke one")
    a2 = store.add_message(c.id, "assistant", "joke two", parent_id=u.id)  # regenerate
    assert (a2.sibling_index, a2.sibling_count) == (1, 2)
    path = store.active_path(c.id)
    assert [m.content for m in path] == ["Tell me a joke", "joke two"]
    assert (path[1].sibling_index, path[1].sibling_count) == (1, 2)
    path = store.select_sibling(a1.id)
    assert [m.content for m in path] == ["Tell me a joke", "joke one"]
    assert (path[1].sibling_index, path[1].sibling_count) == (0, 2)
    assert store.active_path(c.id) == path
    sibs = store.siblings(a2.id)
    assert [(m.id, m.sibling_index, m.sibling_count) for m in sibs] == [(a1.id, 0, 2), (a2.id, 1, 2)]
    assert [m.id for m in store.siblings(u.id)] == [u.id]
    with pytest.raises(NotFoundError):
        store.siblings(10_000)


def test_flip_follows_most_recent_descendant(store: ConversationStore) -> None:
    c = store.create_conversation()
    q1 = store.add_message(c.id, "user", "first question")
    store.add_message(c.id, "assistant", "first answer")
    store.add_message(c.id, "user", "follow-up on the first")
    q1b = store.add_message(c.id, "user", "edited question", parent_id=None)  # edit of q1
    store.add_message(c.id, "assistant", "answer to the edit")
    # Back to the original: the path continues all the way to where that branch ended.
    path = store.select_sibling(q1.id)
    assert [m.content for m in path] == ["first question", "first answer", "follow-up on the first"]
    assert (path[0].sibling_index, path[0].sibling_count) == (0, 2)
    # Continue the original branch, flip away and back: the newest message is found again.
    store.add_message(c.id, "assistant", "answer to follow-up")
    store.select_sibling(q1b.id)
    path = store.select_sibling(q1.id)
    assert path[-1].content == "answer to follow-up" and len(path) == 4


def test_update_message_when_stream_finishes(store: ConversationStore) -> None:
    c = store.create_conversation()
    store.add_message(c.id, "user", "q")
    a = store.add_message(c.id, "assistant", "")
    before = store.get_conversation(c.id).updated_at
    done = store.update_message(a.id, content="full reply", figures=FIGURES)
    assert done.content == "full reply" and done.figures == FIGURES and done.id == a.id
    assert store.active_path(c.id)[-1].content == "full reply"
    assert store.get_conversation(c.id).updated_at >= before
    assert store.search("full reply")[0].conversation_id == c.id


def test_parent_must_belong_to_conversation(store: ConversationStore) -> None:
    a = store.create_conversation()
    b = store.create_conversation()
    m = store.add_message(a.id, "user", "in a")
    with pytest.raises(NotFoundError):
        store.add_message(b.id, "user", "x", parent_id=m.id)
    with pytest.raises(ValueError):
        store.add_message(a.id, "robot", "x")
    # The failed writes left nothing behind.
    assert store.active_path(b.id) == []


def test_duplicate_branches_the_path(store: ConversationStore) -> None:
    c = store.create_conversation(system_prompt="sys", settings={"seed": 1}, cache_salt="s")
    ms = [store.add_message(c.id, r, t) for r, t in
          [("user", "one"), ("assistant", "two"), ("user", "three"), ("assistant", "four")]]
    store.add_message(c.id, "assistant", "alternative four", parent_id=ms[2].id)
    full = store.duplicate(c.id)
    assert full.id != c.id and full.kv_state == "none"
    assert (full.system_prompt, full.settings, full.cache_salt) == ("sys", {"seed": 1}, "s")
    assert [m.content for m in store.active_path(full.id)] == ["one", "two", "three",
                                                               "alternative four"]
    # Only the path is copied: no alternatives in the branch.
    assert all(m.sibling_count == 1 for m in store.active_path(full.id))
    part = store.duplicate(c.id, upto_message_id=ms[1].id)
    assert [m.content for m in store.active_path(part.id)] == ["one", "two"]
    store.add_message(part.id, "user", "diverge")
    assert len(store.active_path(c.id)) == 4  # the source is untouched
    with pytest.raises(NotFoundError):
        store.duplicate(c.id, upto_message_id=10_000)


def test_deleting_conversation_removes_messages(store: ConversationStore, db_path) -> None:  # type: ignore[no-untyped-def]
    c = store.create_conversation()
    for i in range(5):
        store.add_message(c.id, "user", f"message {i}")
    keep = store.create_conversation()
    store.add_message(keep.id, "user", "kept")
    assert store.delete(c.id) is True
    conn = raw(db_path)
    assert conn.execute("SELECT count(*) FROM messages WHERE conversation_id = ?",
                        (c.id,)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 1
    assert [r.id for r in store.list_conversations()] == [keep.id]
    assert store.search("message") == []
