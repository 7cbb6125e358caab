"""One contract, one store in two modes: every `ChatStore` method, run against the SQLite store on
a real file in tmp_path and on the temporary chats' in-memory database, with the same expectations."""
from __future__ import annotations

import inspect
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from app.store import (
    CURRENT_LEAF,
    DEFAULT_TITLE,
    SNIPPET_CLOSE,
    SNIPPET_OPEN,
    ChatStore,
    ConversationDetail,
    ConversationRow,
    ConversationStore,
    MessageRow,
    NotFoundError,
    SearchHit,
)
from app.store.titles import chat_title, title_from_message

MODES = ["file", "memory"]


@pytest.fixture(params=MODES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ConversationStore]:
    s = (ConversationStore(tmp_path / "amber.sqlite3") if request.param == "file"
         else ConversationStore(in_memory=True))
    yield s
    s.close()


def _chat(store: ChatStore, *turns: str) -> tuple[ConversationDetail, list[MessageRow]]:
    """A conversation with alternating user/assistant messages."""
    conv = store.create_conversation(model_id="m")
    rows = [store.add_message(conv.id, "user" if i % 2 == 0 else "assistant", t)
            for i, t in enumerate(turns)]
    return store.get_conversation(conv.id), rows


# --- the shape of the contract ---------------------------------------------------------------

def test_the_store_implements_every_method_with_the_same_signature() -> None:
    cls = ConversationStore
    methods = [n for n, v in vars(ChatStore).items()
               if callable(v) and not n.startswith("_")]
    assert len(methods) == 22
    for name in methods:
        want = inspect.signature(getattr(ChatStore, name))
        got = inspect.signature(getattr(cls, name))
        assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == \
            [(p.name, p.kind, p.default) for p in want.parameters.values()], name
        assert got.return_annotation == want.return_annotation, name


def test_rows_and_contract_import_without_sqlalchemy() -> None:
    # A fresh interpreter: this one has SQLAlchemy loaded already (the SQLite fixture).
    code = ("import sys\n"
            "import app.store, app.store.rows, app.store.protocol\n"
            "from app.store import MessageRow, ChatStore\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'alembic')))\n"
            "from app.store import ConversationStore\n"
            "print('sqlalchemy' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "True"]


def test_both_stores_hand_out_the_same_row_classes(store: ChatStore) -> None:
    conv, (m,) = _chat(store, "hello")
    assert type(conv) is ConversationDetail
    assert type(store.list_conversations()[0]) is ConversationRow
    assert type(m) is MessageRow and type(m.id) is int
    assert type(store.search("hello")[0]) is SearchHit
    with pytest.raises(AttributeError):
        m.content = "changed"  # type: ignore[misc]  # frozen
    hash(m)


# --- conversations ---------------------------------------------------------------------------

def test_create_and_get(store: ChatStore) -> None:
    cid = str(uuid.uuid4())
    conv = store.create_conversation(id=cid, system_prompt="be brief", model_id="m",
                                     model_fingerprint="fp", settings={"temperature": 0.5},
                                     cache_salt="s" * 16, pinned=True)
    assert conv == store.get_conversation(cid)
    assert (conv.id, conv.title, conv.pinned, conv.title_locked) == (cid, DEFAULT_TITLE, True, False)
    assert (conv.system_prompt, conv.model_id, conv.model_fingerprint) == ("be brief", "m", "fp")
    assert (conv.settings, conv.cache_salt) == ({"temperature": 0.5}, "s" * 16)
    assert (conv.kv_state, conv.kv_bytes, conv.current_leaf_id, conv.last_opened_at) == \
        ("none", 0, None, None)
    assert conv.created_at.tzinfo is not None and conv.updated_at == conv.created_at
    assert store.create_conversation(title="  Plan  ").title == "Plan"


def test_create_refuses_bad_and_duplicate_ids(store: ChatStore) -> None:
    cid = store.create_conversation().id
    uuid.UUID(cid)
    with pytest.raises(ValueError):
        store.create_conversation(id=cid)
    with pytest.raises(ValueError):
        store.create_conversation(id="not-a-uuid")
    with pytest.raises(ValueError):
        store.create_conversation(settings={"bad": object()})


def test_list_pinned_first_then_recently_updated(store: ChatStore) -> None:
    a = store.create_conversation().id
    b = store.create_conversation().id
    c = store.create_conversation().id
    assert [r.id for r in store.list_conversations()] == [c, b, a]
    store.add_message(a, "user", "now a is the newest")
    assert [r.id for r in store.list_conversations()] == [a, c, b]
    store.set_pinned(b, True)
    assert [r.id for r in store.list_conversations()] == [b, a, c]
    store.set_pinned(b, False)
    assert [(r.id, r.pinned) for r in store.list_conversations()][0] == (a, False)


def test_rename_locks_the_title(store: ChatStore) -> None:
    conv = store.create_conversation()
    store.rename(conv.id, "  Trip \n plan ")
    d = store.get_conversation(conv.id)
    assert (d.title, d.title_locked) == ("Trip plan", True)
    store.add_message(conv.id, "user", "something else entirely")
    assert store.get_conversation(conv.id).title == "Trip plan"
    with pytest.raises(ValueError):
        store.rename(conv.id, " \t ")


def test_an_auto_title_never_overrides_a_rename(store: ChatStore) -> None:
    conv = store.create_conversation()
    store.add_message(conv.id, "user", "how do I bake bread at home")
    assert store.set_auto_title(conv.id, "  Baking \n bread ") is True
    d = store.get_conversation(conv.id)
    assert (d.title, d.title_locked) == ("Baking bread", False)   # a made title: still renamable
    store.rename(conv.id, "Mine")
    assert store.set_auto_title(conv.id, "Baking bread at home") is False
    assert store.get_conversation(conv.id).title == "Mine"
    with pytest.raises(ValueError):
        store.set_auto_title(conv.id, "  ")
    with pytest.raises(NotFoundError):
        store.set_auto_title(str(uuid.uuid4()), "Nobody")


def test_kv_state_cache_salt_opened_and_settings(store: ChatStore) -> None:
    cid = store.create_conversation().id
    store.set_kv_state(cid, "disk", 4096)
    store.set_cache_salt(cid, "x" * 20)
    store.mark_opened(cid)
    store.update_settings(cid, system_prompt="new prompt", settings={"top_p": 0.9})
    d = store.get_conversation(cid)
    assert (d.kv_state, d.kv_bytes, d.cache_salt) == ("disk", 4096, "x" * 20)
    assert d.last_opened_at is not None and d.last_opened_at >= d.created_at
    assert (d.system_prompt, d.settings) == ("new prompt", {"top_p": 0.9})
    store.update_settings(cid, system_prompt="only the prompt")
    assert store.get_conversation(cid).settings == {"top_p": 0.9}
    store.set_cache_salt(cid, None)
    assert store.get_conversation(cid).cache_salt is None
    bads: list[Callable[[], object]] = [
                lambda: store.set_kv_state(cid, "cloud", 1),
                lambda: store.set_kv_state(cid, "memory", -1),
                lambda: store.set_cache_salt(cid, "short")]
    for bad in bads:
        with pytest.raises(ValueError):
            bad()


def test_a_chat_remembers_its_model(store: ChatStore) -> None:
    """What the window loads to run the chat: recorded at creation, changed when the chat goes on
    with another model, copied by a duplicate; unknown (None) where never recorded."""
    made = store.create_conversation(model_id="Tiny-A", model_choice="Tiny-A")
    assert store.get_conversation(made.id).model_choice == "Tiny-A"
    assert store.create_conversation(model_id="x").model_choice is None
    assert store.create_conversation(model_choice="").model_choice == ""       # the default model
    store.add_message(made.id, "user", "hello")
    store.set_model(made.id, "Remote-7B", "remote:abc")
    got = store.get_conversation(made.id)
    assert (got.model_id, got.model_choice) == ("Remote-7B", "remote:abc")
    assert store.duplicate(made.id).model_choice == "remote:abc"
    before = [r.id for r in store.list_conversations()]
    store.set_model(made.id, "Tiny-A", "Tiny-A")      # bookkeeping: the list order stays
    assert [r.id for r in store.list_conversations()] == before


def test_unknown_ids_raise_not_found(store: ChatStore) -> None:
    ghost = str(uuid.uuid4())
    calls: list[Callable[[], object]] = [
             lambda: store.get_conversation(ghost), lambda: store.rename(ghost, "x"),
             lambda: store.set_pinned(ghost, True), lambda: store.set_kv_state(ghost, "none", 0),
             lambda: store.set_cache_salt(ghost, None), lambda: store.mark_opened(ghost),
             lambda: store.update_settings(ghost, system_prompt="p"),
             lambda: store.set_model(ghost, "m", ""),
             lambda: store.add_message(ghost, "user", "hi"), lambda: store.active_path(ghost),
             lambda: store.duplicate(ghost), lambda: store.update_message(10**9, content="x"),
             lambda: store.siblings(10**9), lambda: store.select_sibling(10**9)]
    for call in calls:
        with pytest.raises(NotFoundError):
            call()
    assert issubclass(NotFoundError, LookupError) and not issubclass(NotFoundError, KeyError)


def test_delete_and_pending_engine_deletes(store: ConversationStore) -> None:
    conv, _ = _chat(store, "hello", "hi")
    keep = store.create_conversation().id
    assert store.delete(conv.id) is True
    assert store.delete(conv.id) is False
    assert [r.id for r in store.list_conversations()] == [keep]
    with pytest.raises(NotFoundError):
        store.get_conversation(conv.id)
    pending = store.pending_engine_deletes()
    # A saved chat's deletion owes the engine a delete of the saved session; a temporary chat's
    # session is never saved, so the in-memory store owes nothing.
    assert pending == ([conv.id] if store.path.name == "amber.sqlite3" else [])
    store.confirm_engine_deleted(conv.id)
    assert store.pending_engine_deletes() == []


# --- messages --------------------------------------------------------------------------------

def test_add_message_moves_the_leaf_and_counts_depth(store: ChatStore) -> None:
    conv, (u, a) = _chat(store, "hello", "hi there")
    assert (u.parent_id, u.depth, a.parent_id, a.depth) == (None, 0, u.id, 1)
    assert a.id != u.id and store.get_conversation(conv.id).current_leaf_id == a.id
    assert (u.conversation_id, u.role, u.content) == (conv.id, "user", "hello")
    assert (u.sibling_index, u.sibling_count) == (0, 1)
    assert [m.id for m in store.active_path(conv.id)] == [u.id, a.id]
    assert store.active_path(store.create_conversation().id) == []
    with pytest.raises(ValueError):
        store.add_message(conv.id, "robot", "beep")


def test_figures_and_model_name_round_trip(store: ChatStore) -> None:
    conv = store.create_conversation()
    u = store.add_message(conv.id, "user", "q")
    figs = {"generated_tokens": 3, "ttft_ms": 12.5, "finish_reason": "stop"}
    a = store.add_message(conv.id, "assistant", "a", figures=figs, model_name="Tiny-1")
    assert (a.figures, a.model_name) == (figs, "Tiny-1")
    assert store.active_path(conv.id)[1].figures == figs
    assert store.active_path(conv.id)[0] == u

    class Figures:  # engine.api.GenerationFigures offers to_dict()
        def to_dict(self) -> dict[str, Any]:
            return {"generated_tokens": 9}

    store.update_message(a.id, figures=Figures())
    assert store.active_path(conv.id)[1].figures == {"generated_tokens": 9}
    with pytest.raises(ValueError):
        store.add_message(conv.id, "assistant", "x", figures=42)


STEPS = [{"text": "", "calls": [{"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3},
                                  "server": "calc", "status": "done", "result": "5"}]}]


def test_tool_steps_round_trip_and_are_copied(store: ChatStore) -> None:
    conv = store.create_conversation()
    store.add_message(conv.id, "user", "2 + 3?")
    steps = [dict(STEPS[0])]
    a = store.add_message(conv.id, "assistant", "It is 5.", tool_steps=steps)
    steps[0]["text"] = "changed after the call"        # the store kept its own copy
    assert a.tool_steps == STEPS
    path = store.active_path(conv.id)
    assert path[1].tool_steps == STEPS and path[0].tool_steps is None
    copy = store.duplicate(conv.id)
    assert store.active_path(copy.id)[1].tool_steps == STEPS
    assert store.add_message(conv.id, "assistant", "plain", parent_id=path[0].id, tool_steps=[]).tool_steps is None
    with pytest.raises(ValueError):
        store.add_message(conv.id, "assistant", "x", tool_steps=[{"calls": object()}])
    with pytest.raises(ValueError):
        store.add_message(conv.id, "assistant", "x", tool_steps="calls")


def test_update_message_when_the_stream_finishes(store: ChatStore) -> None:
    conv, (_, a) = _chat(store, "q", "")
    before = store.get_conversation(conv.id).updated_at
    row = store.update_message(a.id, content="the whole reply")
    assert (row.id, row.content, row.sibling_count) == (a.id, "the whole reply", 1)
    assert store.active_path(conv.id)[-1].content == "the whole reply"
    assert store.get_conversation(conv.id).updated_at >= before


def test_parent_must_belong_to_the_conversation(store: ChatStore) -> None:
    _, (u1,) = _chat(store, "one")
    two = store.create_conversation()
    with pytest.raises(NotFoundError):
        store.add_message(two.id, "assistant", "x", parent_id=u1.id)
    assert store.active_path(two.id) == []


def test_regenerate_siblings_and_flips(store: ChatStore) -> None:
    conv, (u, a1) = _chat(store, "q", "first answer")
    a2 = store.add_message(conv.id, "assistant", "second answer", parent_id=u.id)
    assert (a2.sibling_index, a2.sibling_count) == (1, 2)
    assert [m.content for m in store.siblings(a1.id)] == ["first answer", "second answer"]
    assert [(m.sibling_index, m.sibling_count) for m in store.siblings(a2.id)] == [(0, 2), (1, 2)]
    assert store.active_path(conv.id)[-1].id == a2.id
    path = store.select_sibling(a1.id)
    assert [m.id for m in path] == [u.id, a1.id] == [m.id for m in store.active_path(conv.id)]
    assert (path[-1].sibling_index, path[-1].sibling_count) == (0, 2)
    assert store.get_conversation(conv.id).current_leaf_id == a1.id


def test_flip_follows_the_most_recent_descendant(store: ChatStore) -> None:
    conv, (u, a1, u2, a2) = _chat(store, "q", "a1", "q2", "a2")
    b1 = store.add_message(conv.id, "assistant", "b1", parent_id=u.id)
    store.add_message(conv.id, "user", "b-q2")
    path = store.select_sibling(a1.id)
    assert [m.id for m in path] == [u.id, a1.id, u2.id, a2.id]
    path = store.select_sibling(b1.id)
    assert [m.content for m in path] == ["q", "b1", "b-q2"]


def test_editing_the_first_message_is_a_new_root(store: ChatStore) -> None:
    conv, (u, _) = _chat(store, "first version", "reply")
    edit = store.add_message(conv.id, "user", "second version", parent_id=None)
    assert (edit.parent_id, edit.depth, edit.sibling_index, edit.sibling_count) == (None, 0, 1, 2)
    assert [m.content for m in store.siblings(u.id)] == ["first version", "second version"]
    assert store.get_conversation(conv.id).title == "second version"  # not renamed: re-derived


def test_title_from_the_first_user_message_only(store: ChatStore) -> None:
    conv = store.create_conversation()
    store.add_message(conv.id, "system", "You are terse.", parent_id=CURRENT_LEAF)
    long = "Please plan a long weekend trip to the mountains with my family of five people " * 2
    store.add_message(conv.id, "user", long)
    assert store.get_conversation(conv.id).title == chat_title(long) == title_from_message(long)
    store.add_message(conv.id, "assistant", "Sure")
    store.add_message(conv.id, "user", "and a second question")
    assert store.get_conversation(conv.id).title == chat_title(long)
    blank = store.create_conversation()
    store.add_message(blank.id, "user", "  \n ")
    assert store.get_conversation(blank.id).title == DEFAULT_TITLE


def test_duplicate_copies_the_path(store: ChatStore) -> None:
    conv, (u, a, u2, _) = _chat(store, "q1", "a1", "q2", "a2")
    store.add_message(conv.id, "assistant", "alt", parent_id=u.id)   # not on the copied path
    store.select_sibling(a.id)
    store.set_pinned(conv.id, True)
    store.set_kv_state(conv.id, "memory", 10)
    full = store.duplicate(conv.id)
    assert (full.title, full.title_locked, full.pinned, full.kv_state) == ("q1", False, False, "none")
    assert full.id != conv.id and full.model_id == "m"
    assert [m.content for m in store.active_path(full.id)] == ["q1", "a1", "q2", "a2"]
    assert all(m.sibling_count == 1 for m in store.active_path(full.id))
    branch = store.duplicate(conv.id, upto_message_id=u2.id, title="q1 (branch)")
    assert (branch.title, branch.title_locked) == ("q1 (branch)", True)
    path = store.active_path(branch.id)
    assert [m.content for m in path] == ["q1", "a1", "q2"]
    assert branch.current_leaf_id == path[-1].id and path[-1].id != u2.id
    assert [m.content for m in store.active_path(conv.id)] == ["q1", "a1", "q2", "a2"]
    _, (x,) = _chat(store, "elsewhere")
    with pytest.raises(NotFoundError):
        store.duplicate(conv.id, upto_message_id=x.id)


def test_search_finds_titles_and_messages_with_marked_snippets(store: ChatStore) -> None:
    trip, _ = _chat(store, "Plan a mountain trip", "Pack warm socks and a map")
    cake, _ = _chat(store, "Bake a cake", "Use butter, flour and sugar")
    hits = store.search("socks")
    assert [h.conversation_id for h in hits] == [trip.id]
    assert f"{SNIPPET_OPEN}socks{SNIPPET_CLOSE}" in hits[0].snippet.lower()
    assert hits[0].title == "Plan a mountain trip" and hits[0].rank > 0
    assert [h.conversation_id for h in store.search("butter sugar")] == [cake.id]
    assert store.search("butter socks") == []
    assert {h.conversation_id for h in store.search("a")} == {trip.id, cake.id}   # "a" in both titles
    assert [h.conversation_id for h in store.search("cake")] == [cake.id]    # a title match
    assert store.search("") == store.search("  \t") == store.search("zebra") == []
    assert len(store.search("a", limit=1)) == 1 and store.search("socks", limit=0) == []


def test_close_twice_is_harmless(store: ChatStore) -> None:
    store.create_conversation()
    store.close()
    store.close()
