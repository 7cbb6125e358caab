"""Export from the window (File ▸ Export chat as Markdown / JSON / plain text) and File ▸ Import
chat… of the JSON back: a new chat with the same messages, title and roles; bad files are refused
with one line and change nothing."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.gui import open_chat, send, wait_idle


def _menu_texts(w) -> list[str]:  # type: ignore[no-untyped-def]
    return [a.text() for a in w.chat_files.export_menu.actions()]


def _export(qtbot, w, fmt: str, path: Path) -> None:  # type: ignore[no-untyped-def]
    asked: list[str] = []
    w.chat_files.pick_save = lambda title, suggested, filters: asked.append(suggested) or str(path)
    with qtbot.waitSignal(w.chat_files.exported, timeout=5000):
        w.chat_files.act_export[fmt].trigger()
    assert asked and Path(asked[0]).suffix == {"markdown": ".md", "json": ".json", "text": ".txt"}[fmt]


def test_export_three_formats_then_import_the_json_as_a_new_chat(make_window, engine, qtbot, tmp_path):
    w = make_window(engine)
    assert "File" in [a.text().replace("&", "") for a in w.menuBar().actions()]
    assert _menu_texts(w) == ["Markdown…", "JSON (re-importable)…", "Plain text…"]
    send(qtbot, w, "Plan a trip to Lisbon\n\n    indented line kept")
    send(qtbot, w, "And Porto?")
    wait_idle(qtbot, w)
    cid, title = w.current_id, w.chat_model.chat(w.current_id).title
    out = tmp_path / "out"
    out.mkdir()
    _export(qtbot, w, "markdown", out / "trip.md")
    _export(qtbot, w, "json", out / "trip.json")
    _export(qtbot, w, "text", out / "trip")          # no extension typed: the format's is added
    assert sorted(p.name for p in out.iterdir()) == ["trip.json", "trip.md", "trip.txt"]   # no temp files left
    md = (out / "trip.md").read_text()
    assert md.startswith(f"# {title}\n") and "## User\n\nPlan a trip to Lisbon\n\n    indented line kept" in md
    assert "## Assistant" in md and "And Porto?" in md
    text = (out / "trip.txt").read_text()
    assert "User:\nAnd Porto?" in text and "##" not in text
    assert "Exported to" in w.status.message.text()

    before = {r.id for r in w.chat_model.all_chats()}
    w.chat_files.pick_open = lambda title, filters: str(out / "trip.json")
    with qtbot.waitSignal(w.chat_files.imported, timeout=5000) as sig:
        w.chat_files.act_import.trigger()
    new_id = sig.args[0]
    assert new_id not in before and new_id != cid
    qtbot.waitUntil(lambda: w.current_id == new_id and len(w.chat_view.widgets) == 4, timeout=5000)
    original = w.store.active_path(cid)
    copy = w.store.active_path(new_id)
    assert [(m.role, m.content) for m in copy] == [(m.role, m.content) for m in original]
    assert w.store.get_conversation(new_id).title == title == w.chat_model.chat(new_id).title
    assert [(mw.item.role, mw.item.content) for mw in w.chat_view.widgets] == [(m.role, m.content) for m in original]
    assert w.chat_model.chat(new_id).kv_state == "none"      # no KV came with it
    # the new chat answers like any other (its history is sent to the engine)
    send(qtbot, w, "And Faro?")
    assert [m.content for m in engine.generations[-1] if m.role == "user"] == \
        ["Plan a trip to Lisbon\n\n    indented line kept", "And Porto?", "And Faro?"]


@pytest.mark.parametrize("content, why", [
    (b"{not json", "not JSON"),
    (b'{"format": "something-else"}', "not an Amber conversation export"),
    (json.dumps({"format": "amber-conversation", "version": 1, "conversation": {"title": "x"},
                 "messages": [{"id": 1, "role": "wizard", "content": "hi"}]}).encode(), "unknown role"),
])
def test_a_bad_file_is_refused_in_one_line_and_nothing_changes(make_window, engine, qtbot, tmp_path,
                                                               content, why):
    w = make_window(engine)
    send(qtbot, w, "keep me")
    wait_idle(qtbot, w)
    cid = w.current_id
    w.composer.set_text("a draft I am writing")
    bad = tmp_path / "bad\nname.json"
    bad.write_bytes(content)
    count = len(w.store.list_conversations())
    with qtbot.waitSignal(w.chat_files.failed, timeout=5000) as sig:
        w.chat_files.import_from(bad)
    line = sig.args[0]
    assert why in line and "\n" not in line and line == w.status.message.text()
    assert line.startswith("Could not import the chat: bad\\nname.json: ")
    assert len(w.store.list_conversations()) == count and w.current_id == cid
    assert w.composer.text() == "a draft I am writing"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_a_huge_file_is_refused_without_reading_it(make_window, engine, qtbot, tmp_path, monkeypatch):
    w = make_window(engine)
    fifo = tmp_path / "chat.json"
    os.mkfifo(fifo)                                  # opening it to read would block for ever
    with qtbot.waitSignal(w.chat_files.failed, timeout=5000) as sig:
        w.chat_files.import_from(fifo)
    assert "not a regular file" in sig.args[0]
    from app.store import export
    monkeypatch.setattr(export, "MAX_IMPORT_BYTES", 1000)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 5000)
    with qtbot.waitSignal(w.chat_files.failed, timeout=5000) as sig:
        w.chat_files.import_from(big)
    assert "too large" in sig.args[0]


def test_a_temporary_chat_exports_and_a_draft_has_nothing_to_export(make_window, engine, qtbot, tmp_path):
    w = make_window(engine)
    w.chat_files.pick_save = lambda *a: pytest.fail("no dialog for a draft")   # type: ignore[misc]
    w.chat_files.export_dialog("markdown")
    assert "Nothing to export" in w.status.message.text()
    w.new_chat(temporary=True)
    send(qtbot, w, "secret temporary question")
    wait_idle(qtbot, w)
    _export(qtbot, w, "json", tmp_path / "temp.json")
    data = json.loads((tmp_path / "temp.json").read_text())
    assert [m["content"] for m in data["messages"]][0] == "secret temporary question"
    # the window's own store never saw it
    assert all("secret" not in r.title for r in w.store.list_conversations())


def test_an_export_that_cannot_be_written_says_why(make_window, engine, qtbot, tmp_path):
    w = make_window(engine)
    send(qtbot, w, "hello")
    wait_idle(qtbot, w)
    target = tmp_path / "no-such-dir" / "x" / "chat.md"
    (tmp_path / "no-such-dir").write_text("a file where a folder should be")
    with qtbot.waitSignal(w.chat_files.failed, timeout=5000) as sig:
        w.chat_files.export_to(w.current_id, "markdown", target)
    assert sig.args[0].startswith("Could not export the chat: could not write chat.md")
    assert "\n" not in sig.args[0]


def test_reopened_import_keeps_alternatives(make_window, engine, qtbot, tmp_path):
    """The JSON carries every alternative: a regenerated reply's sibling comes back too."""
    w = make_window(engine)
    engine.reply = "first answer"
    send(qtbot, w, "question")
    wait_idle(qtbot, w)
    engine.reply = "second answer"
    with qtbot.waitSignal(w.replyFinished, timeout=5000):
        w.regenerate(w.chat_view.widgets[-1].item.id)
    wait_idle(qtbot, w)
    _export(qtbot, w, "json", tmp_path / "alt.json")
    with qtbot.waitSignal(w.chat_files.imported, timeout=5000) as sig:
        w.chat_files.import_from(tmp_path / "alt.json")
    new_id = sig.args[0]
    open_chat(qtbot, w, new_id)
    last = w.chat_view.widgets[-1].item
    assert last.content == "second answer"
    assert [s.content for s in w.store.siblings(last.id)] == ["first answer", "second answer"]
