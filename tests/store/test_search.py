"""Full-text search: ranking, snippets, prefixes, safe parsing, index kept in sync."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.store import SNIPPET_CLOSE, SNIPPET_OPEN, ConversationStore
from app.store.search import match_expression

from .helpers import raw

FILLER = " ".join(f"word{i}" for i in range(80))


def chat(store: ConversationStore, title: str | None, *texts: str) -> str:
    c = store.create_conversation()
    for i, t in enumerate(texts):
        store.add_message(c.id, "user" if i % 2 == 0 else "assistant", t)
    if title:
        store.rename(c.id, title)
    return c.id


def test_ranking(store: ConversationStore) -> None:
    in_title = chat(store, "All about the quokka", "hello", "hi")
    dense = chat(store, "Animals", "quokka quokka quokka, the quokka is small")
    sparse = chat(store, "Travel", f"{FILLER} we saw one quokka {FILLER}")
    chat(store, "Other", "nothing to see here")
    hits = store.search("quokka")
    assert [h.conversation_id for h in hits] == [in_title, dense, sparse]
    assert hits[0].rank > hits[1].rank > hits[2].rank > 0
    assert [h.title for h in hits] == ["All about the quokka", "Animals", "Travel"]


def test_snippets_mark_matches(store: ConversationStore) -> None:
    cid = chat(store, "Trip", f"{FILLER} the ferry to Rottnest island leaves at nine {FILLER}")
    hit, = store.search("rottnest")
    assert hit.conversation_id == cid
    assert f"{SNIPPET_OPEN}Rottnest{SNIPPET_CLOSE}" in hit.snippet
    assert hit.snippet.startswith("\u2026") and len(hit.snippet) < 200
    title_only = chat(store, "Zebra notes", "no match in the text")
    hit, = store.search("zebra")
    assert hit.conversation_id == title_only
    assert hit.snippet == f"{SNIPPET_OPEN}Zebra{SNIPPET_CLOSE} notes"


def test_all_words_prefix_and_diacritics(store: ConversationStore) -> None:
    a = chat(store, None, "the crème brûlée recipe")
    b = chat(store, None, "a recipe for bread")
    assert {h.conversation_id for h in store.search("recipe")} == {a, b}
    assert [h.conversation_id for h in store.search("creme recipe")] == [a]  # AND, no accents
    assert [h.conversation_id for h in store.search("brul")] == [a]  # typing: prefix
    assert store.search("brul ") == []  # a finished word is matched whole


@pytest.mark.parametrize(("query", "found"), [('"', False), ("AND", True), ("NEAR(a b)", True), ("title:x", True),
                                             ("a OR", True), ("*", False), ("(", False), ("'; DROP", True)])
def test_fts_syntax_is_searched_literally(store: ConversationStore, query: str, found: bool) -> None:
    """FTS5's operators, column filters and punctuation are plain text: a query's words are searched
    as words (never a syntax error or an operator); punctuation alone finds nothing."""
    literal = chat(store, None, "near a bridge and the title x or a drop")
    chat(store, None, "nothing in common here")
    assert [h.conversation_id for h in store.search(query)] == ([literal] if found else [])


def test_match_expression() -> None:
    assert match_expression("  ") is None
    assert match_expression('say "hi') == '"say" "hi"*'
    assert match_expression("done ") == '"done"'


def test_index_follows_updates_and_deletes(store: ConversationStore, db_path: Path) -> None:
    cid = chat(store, None, "alpha")
    m = store.active_path(cid)[0]
    store.update_message(m.id, content="beta")
    # Only the title (taken from the first message) still says alpha; the text says beta.
    hits = store.search("alpha")
    assert [h.conversation_id for h in hits] == [cid]
    assert hits[0].snippet == f"{SNIPPET_OPEN}alpha{SNIPPET_CLOSE}"
    assert store.search("beta")[0].conversation_id == cid
    store.rename(cid, "gamma")
    assert [h.conversation_id for h in store.search("gamma")] == [cid]
    assert store.search("alpha") == []
    store.delete(cid)
    assert store.search("beta") == [] and store.search("gamma") == []
    conn = raw(db_path)
    for table in ("messages_fts", "conversations_fts"):
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")


def test_limit(store: ConversationStore) -> None:
    for i in range(5):
        chat(store, None, f"common {i}")
    assert len(store.search("common", limit=3)) == 3
    assert store.search("common", limit=0) == []
