"""Fuzzing File ▸ Import chat…: a real export's bytes damaged, and JSON documents generated to
look like one, go through the import the window uses (`app.chat.transfer.import_chat`).

Property: the import makes a new chat or ends in a `TransferError` whose message is one line;
never another exception, a hang or unbounded memory; a refused file adds no chat.
"""
from __future__ import annotations

import json
from datetime import timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.chat.transfer import TransferError, import_chat
from app.store import ConversationStore
from fuzz_util import byte_mutations, mutate
from tests.support.bounded import run_bounded


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> ConversationStore:
    s = ConversationStore(tmp_path_factory.mktemp("fuzz-import") / "amber.sqlite3")
    yield s
    s.close()


@pytest.fixture(scope="module")
def export(store) -> bytes:
    c = store.create_conversation(system_prompt="Be brief.", settings={"sampling": {"temperature": 0.5}})
    q = store.add_message(c.id, "user", "Plan a trip ünïcode {\"x\": [1, 2]}")
    store.add_message(c.id, "assistant", "Day 1 …", figures={"generated_tokens": 3, "ttft_ms": 12.5})
    store.add_message(c.id, "assistant", "Another", parent_id=q.id)
    return json.dumps(store.export_json(c.id), ensure_ascii=False).encode()


def _import(store: ConversationStore, path: Path, data: bytes) -> None:
    path.write_bytes(data)
    before = len(store.list_conversations())
    try:
        made = run_bounded(lambda: import_chat(store, path), seconds=60, max_mb=128)
    except TransferError as exc:
        assert "\n" not in str(exc) and str(exc)
        assert len(store.list_conversations()) == before
        return
    # what was imported reads back: the list, the path, both exports
    assert made.id in {r.id for r in store.list_conversations()}
    store.active_path(made.id)
    store.export_markdown(made.id)
    store.export_json(made.id)


@given(ops=byte_mutations(8))
def test_a_damaged_export_imports_or_is_refused_in_one_line(store, export, tmp_path_factory, ops):
    _import(store, tmp_path_factory.getbasetemp() / "damaged.json", mutate(export, ops))


# times as an export writes them, from any year and offset (year 1 an hour east of UTC is year 0)
_times = st.builds(lambda d, minutes: d.replace(tzinfo=timezone(timedelta(minutes=minutes))).isoformat(),
                   st.datetimes(), st.integers(-23 * 60 - 59, 23 * 60 + 59))
_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | _times,
                       lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=4), max_leaves=20)


@given(conversation=st.dictionaries(st.sampled_from(["title", "title_locked", "settings", "created_at",
                                                     "system_prompt", "model_id"]), _values),
       messages=st.lists(st.dictionaries(st.sampled_from(["id", "parent_id", "role", "content", "figures",
                                                          "created_at", "model_name"]), _values), max_size=5),
       leaf=_values)
def test_a_generated_export_imports_or_is_refused_in_one_line(store, tmp_path_factory, conversation, messages, leaf):
    doc = {"format": "amber-conversation", "version": 1, "conversation": conversation, "messages": messages,
           "current_leaf_id": leaf}
    _import(store, tmp_path_factory.getbasetemp() / "generated.json",
            json.dumps(doc, allow_nan=True).encode())
    store.list_conversations()          # whatever was imported, the chat list still loads
