"""Export to Markdown and JSON, and import of that JSON."""
from __future__ import annotations

import json

import pytest

from app.store import ConversationStore


def make(store: ConversationStore) -> str:
    c = store.create_conversation(system_prompt="Answer in French.", model_id="smol-135m",
                                  model_fingerprint="fp1", settings={"temperature": 0.2},
                                  cache_salt="secret-salt")
    q = store.add_message(c.id, "user", "What is **2+2**?\n\n```py\nprint(2+2)\n```")
    store.add_message(c.id, "assistant", "Quatre.", figures={"generated_tokens": 2,
                                                               "decode_tokens_per_s": 20.0})
    store.add_message(c.id, "assistant", "4", parent_id=q.id,
                      figures={"generated_tokens": 1, "ttft_ms": 50.0, "resume": "disk"})
    store.set_kv_state(c.id, "disk", 4096)
    return c.id


def test_markdown(store: ConversationStore) -> None:
    cid = make(store)
    md = store.export_markdown(cid)
    assert md.startswith("# What is **2+2**?\n")
    assert "## System prompt\n\nAnswer in French." in md
    assert "## User\n\nWhat is **2+2**?\n\n```py\nprint(2+2)\n```" in md
    assert "## Assistant\n\n4\n" in md and "Quatre" not in md  # the active path only
    assert "first token after 50 ms" in md and "history resumed from disk" in md
    assert "smol-135m" in md


def test_json_round_trip(store: ConversationStore) -> None:
    cid = make(store)
    data = store.export_json(cid)
    text = json.dumps(data)  # plain JSON
    assert "secret-salt" not in text and "4096" not in text  # no cache salt, no KV
    imported = store.import_json(json.loads(text))
    assert imported.id != cid
    assert imported.kv_state == "none" and imported.kv_bytes == 0 and imported.cache_salt is None
    original = store.get_conversation(cid)
    for field in ("title", "title_locked", "system_prompt", "model_id", "model_fingerprint",
                  "settings", "created_at", "updated_at"):
        assert getattr(imported, field) == getattr(original, field), field
    strip = lambda ms: [(m.role, m.content, m.depth, m.figures, m.created_at,  # noqa: E731
                         m.sibling_index, m.sibling_count) for m in ms]
    assert strip(store.active_path(imported.id)) == strip(store.active_path(cid))
    # The alternative came along too.
    first_alt = store.active_path(imported.id)[1]
    other = store.select_sibling(
        store.export_json(imported.id)["messages"][1]["id"])
    assert other[1].content == "Quatre." and first_alt.content == "4"
    # Importing a string works as well, and twice gives two conversations.
    again = store.import_json(text)
    assert len({cid, imported.id, again.id}) == 3


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(format="other"), "not an Amber conversation export"),
    (lambda d: d.update(version=99), "unsupported export version"),
    (lambda d: d["messages"][1].update(parent_id=12345), "does not name an earlier message"),
    (lambda d: d["messages"][0].update(role="wizard"), "unknown role"),
    (lambda d: d["messages"][0].update(content=None), "'content' must be str"),
    (lambda d: d.update(current_leaf_id=777), "current_leaf_id"),
    (lambda d: d["messages"][0].update(created_at="yesterday"), "ISO 8601"),
    (lambda d: d["messages"][1].update(tool_steps="calls"), "tool_steps must be a list"),
    (lambda d: d["messages"][1].update(tool_steps=[{"text": "", "calls": ["add"]}]), "tool_steps must be a list"),
])
def test_bad_import_is_refused(store: ConversationStore, mutate, message) -> None:  # type: ignore[no-untyped-def]
    data = store.export_json(make(store))
    before = len(store.list_conversations())
    mutate(data)
    with pytest.raises(ValueError, match=message):
        store.import_json(data)
    assert len(store.list_conversations()) == before


def test_tool_steps_are_exported_and_imported(store: ConversationStore) -> None:
    steps = [{"text": "Adding.", "calls": [{"id": "c1", "name": "add", "server": "calc", "arguments": {"a": 2, "b": 2},
                                            "status": "done", "result": "4"}]}]
    conv = store.create_conversation()
    store.add_message(conv.id, "user", "2 + 2?")
    store.add_message(conv.id, "assistant", "It is 4.", tool_steps=steps)
    data = json.loads(json.dumps(store.export_json(conv.id)))
    assert [m["tool_steps"] for m in data["messages"]] == [None, steps]
    imported = store.import_json(data)
    assert [m.tool_steps for m in store.active_path(imported.id)] == [None, steps]


def test_import_not_json(store: ConversationStore) -> None:
    with pytest.raises(ValueError, match="not JSON"):
        store.import_json("{nope")


def test_text(store: ConversationStore) -> None:
    from app.store import export

    cid = make(store)
    text = export.to_text(store.get_conversation(cid), store.active_path(cid))
    assert text.startswith("What is **2+2**?\n\nSystem:\nAnswer in French.\n\nUser:\nWhat is **2+2**?")
    assert text.endswith("Assistant:\n4\n") and "Quatre" not in text and "tokens" not in text


def test_a_temporary_chat_exports_the_same_json(store: ConversationStore) -> None:
    mem = ConversationStore(in_memory=True)
    c = mem.create_conversation(system_prompt="Be brief.")
    q = mem.add_message(c.id, "user", "hello")
    mem.add_message(c.id, "assistant", "hi")
    mem.add_message(c.id, "assistant", "hey", parent_id=q.id)
    imported = store.import_json(json.dumps(mem.export_json(c.id)))
    assert [(m.role, m.content) for m in store.active_path(imported.id)] == [("user", "hello"), ("assistant", "hey")]
    assert imported.system_prompt == "Be brief." and imported.title == "hello"
    assert store.siblings(store.active_path(imported.id)[1].id)[0].content == "hi"


def test_hostile_values_are_cleaned_not_kept(store: ConversationStore) -> None:
    data = store.export_json(make(store))
    data["conversation"]["title"] = "x  \n " * 300
    data["conversation"]["settings"] = {"temperature": 0.2, "sampling": {"temperature": "hot", "top_k": 5},
                                        "overflow": {"nested": 1}}
    data["messages"][1]["figures"] = {"decode_tokens_per_s": "fast", "generated_tokens": 3,
                                      "finish_reason": "eos", "deep": {"a": 1}, "ttft_ms": float("nan"),
                                      "context_used": 10**20}
    imported = store.import_json(data)
    assert len(imported.title) == 200 and "\n" not in imported.title
    assert imported.settings == {"temperature": 0.2, "sampling": {"top_k": 5}}
    figures = store.export_json(imported.id)["messages"][1]["figures"]
    assert figures.get("generated_tokens") == 3 and figures.get("finish_reason") == "eos"
    assert "decode_tokens_per_s" not in figures and "deep" not in figures and "ttft_ms" not in figures
    assert "context_used" not in figures          # a status bar's 32-bit progress bar shows it


@pytest.mark.parametrize("text, message", [
    ("[" * 100_000 + "]" * 100_000, "not JSON"),
    (b"\xff\xfe{}", "not JSON"),
    ("[]", "not an Amber conversation export"),
])
def test_hostile_files_are_refused_in_one_line(store: ConversationStore, text, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message) as info:
        store.import_json(text)
    assert "\n" not in str(info.value)


def test_a_file_over_the_bound_is_refused_before_parsing(store: ConversationStore, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from app.store import export

    monkeypatch.setattr(export, "MAX_IMPORT_BYTES", 100)
    with pytest.raises(ValueError, match="too large"):
        store.import_json(json.dumps(store.export_json(make(store))))


def test_a_file_of_tiny_values_is_refused_before_parsing(store: ConversationStore, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every JSON value becomes a Python object: `[[],[],…]` within the size bound would take
    gigabytes, so the values are counted first (what is inside strings is text, not counted)."""
    from app.store import export

    monkeypatch.setattr(export, "MAX_IMPORT_VALUES", 200)
    with pytest.raises(ValueError, match="too many JSON values"):
        store.import_json("[" + "[]," * 1000 + "[]]")
    data = store.export_json(make(store))
    data["messages"][0]["content"] = 'code: {"a": [1, 2, 3]}, \\" [ { ' * 2000
    imported = store.import_json(json.dumps(data))
    assert store.active_path(imported.id)[0].content == data["messages"][0]["content"]


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "1900-05-01T00:00:00"])
def test_a_time_out_of_range_is_refused_and_the_list_still_loads(store: ConversationStore, when: str) -> None:
    """Year 1 an hour east of UTC is year 0 in UTC: stored, it would break the chat list for good."""
    for part, key in (("conversation", "updated_at"), ("message", "created_at")):
        data = store.export_json(make(store))
        (data["conversation"] if part == "conversation" else data["messages"][0])[key] = when
        with pytest.raises(ValueError, match="out of range"):
            store.import_json(data)
    assert store.list_conversations()
    data = store.export_json(make(store))
    data["messages"][0]["created_at"] = "2020-01-01T00:00:00+23:59"      # the far east: kept, in UTC
    imported = store.import_json(data)
    assert store.active_path(imported.id)[0].created_at.isoformat() == "2019-12-31T00:01:00+00:00"
