"""MCP tools in the window, on the fake engine (a model with a Hermes/Qwen tool format) and a real
MCP server (tests/support/mcp_server.py, a stdio process): the model calls a tool, the user is
asked on a card, the tool runs, its result is folded into the reply, and the model answers with
it. Deny, "always", a pinned chat's tool history across a restart (the real SQLite file), a
temporary chat's kept nowhere, a model without a tool format, and the settings page."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from app.store import ConversationStore
from tests.support.fake_engine import FakeEngine
from tests.support.gui import send, wait_idle
from tests.support.mcp_gui import answer, asking_card, reply_cards, wait_connected, write_mcp_json
from tests.support.tool_replies import calling

REPLY = 60000


def tool_engine(home: Path, **kw: Any) -> FakeEngine:
    return FakeEngine(home / "state", delay=0, reply=calling(), tool_format="hermes", **kw)


def connected_window(make_window: Any, home: Path, qtbot: Any, engine: FakeEngine | None = None) -> tuple[Any, Any]:
    """mcp.json with the test server, a window on a tool-calling fake engine, the server connected."""
    write_mcp_json(home)
    engine = engine or tool_engine(home)
    w = make_window(engine)
    wait_connected(qtbot, w)
    return w, engine


def test_approved_call_round_trip_and_a_pinned_chat_keeps_it_across_a_restart(make_window: Any, home: Path,
                                                                               qtbot: Any) -> None:
    w, engine = connected_window(make_window, home, qtbot)
    assert w.composer.tools.text() == "4 tools available"
    send(qtbot, w, "what is 19 + 23?", wait=False)
    with qtbot.waitSignal(w.replyFinished, timeout=REPLY):
        card = answer(qtbot, w, "AllowToolOnce")
        assert "19" in card.details.text() and card.call["server"] == "test-tools"
    last = w.chat_view.widgets[-1]
    assert last.item.content == "The answer is 42."
    [done] = reply_cards(w)
    assert done.status == "done" and not done.expanded and not done.details.isVisible()   # folded
    assert "Result:\n42" in done.details.text()
    done.toggle.click()                                  # opens on a click
    assert done.details.isVisible()
    # the model was given the result, and offered the tools both times
    assert engine.requests[-1][0][-1]["content"] == "42" and engine.requests[-1][1] is not None
    cid = w.current_id
    w.toggle_pin(cid)
    qtbot.waitUntil(lambda: w.chat_model.chat(cid).pinned, timeout=5000)
    wait_idle(qtbot, w)
    make_window.shutdown(w)

    with ConversationStore(home / "amber.sqlite3") as store:     # the real file, after the window
        steps = store.active_path(cid)[-1].tool_steps
    assert steps is not None and steps[0]["calls"][0]["result"] == "42"

    w = make_window(engine)
    wait_connected(qtbot, w)
    qtbot.waitUntil(lambda: w.current_id == cid and len(w.chat_view.widgets) == 2, timeout=REPLY)   # reopened
    [kept] = reply_cards(w)
    assert kept.status == "done" and not kept.expanded and "42" in kept.details.text()
    engine.reply = lambda messages: "Still 42."
    send(qtbot, w, "are you sure?", timeout=REPLY)
    history = engine.requests[-1][0]
    roles = [m["role"] if isinstance(m, dict) else m.role for m in history]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert history[2]["tool_calls"][0]["function"]["arguments"] == {"a": 19, "b": 23}


def test_denied_call_is_not_run_and_the_model_is_told(make_window: Any, home: Path, qtbot: Any) -> None:
    w, engine = connected_window(make_window, home, qtbot)
    send(qtbot, w, "what is 19 + 23?", wait=False)
    with qtbot.waitSignal(w.replyFinished, timeout=REPLY):
        answer(qtbot, w, "DenyTool")
    [card] = reply_cards(w)
    assert card.status == "denied" and "42" not in card.details.text()
    told = engine.requests[-1][0][-1]
    assert told["role"] == "tool" and "did not allow" in told["content"]
    assert w.chat_view.widgets[-1].item.content == f"The answer is {told['content']}."


def test_always_allow_is_kept_and_later_calls_are_not_asked(make_window: Any, home: Path, qtbot: Any) -> None:
    path = write_mcp_json(home)
    engine = tool_engine(home)
    w = make_window(engine)
    wait_connected(qtbot, w)
    asked: list[Any] = []
    w.replies.toolAsked.connect(lambda cid, approval: asked.append(approval))
    send(qtbot, w, "what is 19 + 23?", wait=False)
    with qtbot.waitSignal(w.replyFinished, timeout=REPLY):
        answer(qtbot, w, "AllowToolAlways")
    qtbot.waitUntil(lambda: json.loads(path.read_text())["mcpServers"]["test-tools"].get("alwaysAllow") == ["add"],
                    timeout=5000)
    send(qtbot, w, "and once more?", timeout=REPLY)
    assert len(asked) == 1
    assert [c.status for c in reply_cards(w)] == ["done"]
    assert w.chat_view.widgets[-1].item.content == "The answer is 42."
    make_window.shutdown(w)
    w = make_window(engine)          # after a restart, from mcp.json
    wait_connected(qtbot, w)
    send(qtbot, w, "a new chat", timeout=REPLY)
    assert len(asked) == 1 and w.chat_view.widgets[-1].item.content == "The answer is 42."


def test_stop_while_a_call_waits(make_window: Any, home: Path, qtbot: Any) -> None:
    w, engine = connected_window(make_window, home, qtbot)
    send(qtbot, w, "what is 19 + 23?", wait=False)
    qtbot.waitUntil(lambda: asking_card(w) is not None, timeout=REPLY)
    w.replies.stop()
    wait_idle(qtbot, w, timeout=REPLY)
    last = w.store.active_path(w.current_id)[-1]
    assert last.tool_steps[0]["calls"][0]["status"] == "cancelled" and len(engine.requests) == 1


def test_temporary_chat_keeps_its_tool_calls_in_memory_only(make_window: Any, home: Path, qtbot: Any) -> None:
    w, engine = connected_window(make_window, home, qtbot)
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    send(qtbot, w, "what is 19 + 23? secretword", wait=False)
    with qtbot.waitSignal(w.replyFinished, timeout=REPLY):
        answer(qtbot, w, "AllowToolOnce")
    tid = w.current_id
    assert w.chats.is_temporary(tid)
    assert w.temp.active_path(tid)[-1].tool_steps[0]["calls"][0]["result"] == "42"   # in memory
    assert w.store.list_conversations() == []
    wait_idle(qtbot, w)
    make_window.shutdown(w)
    for f in ("amber.sqlite3", "amber.sqlite3-wal"):
        p = home / f
        assert not p.exists() or b"secretword" not in p.read_bytes()
    assert not list((home / "state").rglob(f"*{tid}*"))


def test_a_model_without_a_tool_format_is_offered_no_tools(make_window: Any, home: Path, qtbot: Any) -> None:
    write_mcp_json(home)
    engine = FakeEngine(home / "state", delay=0, reply="plain words")
    w = make_window(engine)
    wait_connected(qtbot, w)
    qtbot.waitUntil(lambda: w.composer.tools.isVisible(), timeout=5000)
    assert w.composer.tools.text() == \
        "Tools are unavailable for this model (its chat template has no tool-call format)"
    send(qtbot, w, "what is 19 + 23?", timeout=REPLY)
    assert engine.requests[-1][1] is None and w.chat_view.widgets[-1].item.content == "plain words"
    assert reply_cards(w) == []


def test_tools_switched_off_are_not_offered(make_window: Any, home: Path, qtbot: Any) -> None:
    w, engine = connected_window(make_window, home, qtbot)
    w.settings.mcp_tools = False
    w.tool_binding.update_state()
    assert not w.composer.tools.isVisible()
    engine.reply = lambda messages: "no tools here"
    send(qtbot, w, "what is 19 + 23?", timeout=REPLY)
    assert engine.requests[-1][1] is None


def test_settings_page_lists_servers_with_their_status(make_window: Any, home: Path, qtbot: Any) -> None:
    from app.gui.dialogs.mcp_page import McpServerDialog
    from app.gui.dialogs.settings_dialog import SettingsDialog
    from tests.support.mcp_server import stdio_config

    (home / "mcp.json").write_text("{ not json", encoding="utf-8")
    engine = tool_engine(home)
    w = make_window(engine)
    qtbot.waitUntil(lambda: w.tools.config.error is not None, timeout=5000)
    dlg = SettingsDialog(w.settings, w.home, parent=w, tools=w.tools)
    page = dlg.tools_page
    assert page is not None
    dlg.tabs.setCurrentIndex([dlg.tabs.tabText(i) for i in range(dlg.tabs.count())].index("Tools"))
    dlg.show()
    qtbot.waitExposed(dlg)
    assert page.problem.isVisible()
    assert page.problem.text().startswith("mcp.json is not valid JSON (line 1") and "\n" not in page.problem.text()

    def fill(name: str, command: list[str], env: dict[str, str]) -> Any:
        def ask(server: Any, taken: set[str]) -> Any:
            d = McpServerDialog(server, taken, page)
            d.name.setText(name)
            d.command.setText(" ".join(command))
            d.env.setPlainText("\n".join(f"{k}={v}" for k, v in env.items()))
            return d.server()
        return ask

    cfg = stdio_config()
    page.ask = fill("calc", [cfg["command"], *cfg["args"]], cfg["env"])
    page.add_btn.click()
    qtbot.waitUntil(lambda: page.status_text("calc") == "Connected, 4 tools", timeout=REPLY)
    page.ask = fill("ghost", ["amber-no-such-command-here"], {})
    page.add_btn.click()
    qtbot.waitUntil(lambda: page.status_text("ghost").startswith("MCP server 'ghost' failed"), timeout=REPLY)
    assert page.status_text("calc") == "Connected, 4 tools"
    wait_idle(qtbot, w)      # the file is written off the UI thread
    saved = json.loads((home / "mcp.json").read_text())["mcpServers"]
    assert set(saved) == {"calc", "ghost"} and saved["ghost"] == {"command": "amber-no-such-command-here"}
    page.table.item(1, 0).setCheckState(Qt.CheckState.Unchecked)       # switch ghost off
    qtbot.waitUntil(lambda: page.status_text("ghost") == "Off", timeout=5000)
    wait_idle(qtbot, w)
    assert json.loads((home / "mcp.json").read_text())["mcpServers"]["ghost"]["disabled"] is True
    page.table.selectRow(1)
    page.remove_btn.click()
    assert [s.name for s in w.tools.config.servers] == ["calc"]
    taken = McpServerDialog(None, {"calc"}, page)     # a name another server has is refused, in words
    taken.name.setText("calc")
    taken.command.setText("x")
    taken.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok).click()
    assert taken.result() == 0 and taken.error.text() == "There is a server named 'calc' already"
    dlg.reject()
    dlg.deleteLater()


def test_screenshot_tool_call_asked_and_folded(make_window: Any, home: Path, qtbot: Any, shots: Any) -> None:
    """For a person to look at (`make screenshots`): the card asking, then the reply with its call folded."""
    write_mcp_json(home)
    engine = FakeEngine(home / "state", delay=0, reply=calling(preface="Let me add those. "), tool_format="hermes")
    w = make_window(engine)
    wait_connected(qtbot, w)
    send(qtbot, w, "what is 19 + 23?", wait=False)
    qtbot.waitUntil(lambda: asking_card(w) is not None, timeout=REPLY)
    asked = shots(w, "tool_call_asked")
    with qtbot.waitSignal(w.replyFinished, timeout=REPLY):
        qtbot.mouseClick(asking_card(w).allow_once, Qt.MouseButton.LeftButton)
    folded = shots(w, "tool_call_folded")
    reply_cards(w)[0].toggle.click()
    opened = shots(w, "tool_call_opened")
    assert asked.stat().st_size > 0 and folded.stat().st_size > 0 and opened.stat().st_size > 0
