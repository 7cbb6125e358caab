"""MCP tools in the window on the real engine: `SessionManager` over a tiny random model with
Qwen2.5's tool template (tests/support/tool_template.py), through `app.gui.backend.open_engine`,
a real MCP server (tests/support/mcp_server.py) and the real store in tmp_path.

A random model does not call tools by itself, so the model's first reply of a turn is forced to be
a call of `colour_of`, as the API's tool_choice does (an output constraint: engine.text.constraints
over the Hermes format's grammar); the engine runs untouched otherwise. The call is asked, run,
its result folded into the reply, the model writes its answer after it; the pinned chat's tool
history survives a restart and its next turn renders it through the model's own template."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterator

import pytest

from app.gui.backend import Backend
from app.gui.settings import Sampling, Settings
from app.tools.history import chat_messages
from tests.support.gui import send, wait_idle
from tests.support.mcp_gui import answer, reply_cards, wait_connected, write_mcp_json
from tests.support.tool_template import tiny_tool_model

MODEL = "tiny-tools"
REPLY = 120000      # ms: an upper bound on a loaded machine, never a speed target


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_tool_model(tmp_path_factory.mktemp("tool-model"), MODEL)


def force_first_call(engine: Any) -> Any:
    """The first generation of each turn (the last message is the user's) must be a call of
    colour_of: an output constraint, as tool_choice names a function in the API."""
    from engine.text.constraints import lark
    from engine.text.tool_calls import detect_format

    fmt = detect_format(engine.chat_template)
    assert fmt is not None and fmt.name == "hermes"
    real = engine.generate

    def generate(session_id: str, messages: Any, sampling: Any = None, cancel: Any = None,
                 tools: Any = None) -> Iterator[Any]:
        last = messages[-1]
        role = last["role"] if isinstance(last, dict) else last.role
        if tools and role == "user":
            # its arguments exactly the schema's (no extra keys for a random model to ramble in)
            forced = [{"type": "function", "function": {**t["function"], "parameters": {
                **t["function"]["parameters"], "additionalProperties": False}}}
                for t in tools if t["function"]["name"] == "colour_of"]
            sampling = dataclasses.replace(sampling, constraint=lark(fmt.grammar(forced)), max_new_tokens=200)
        return real(session_id, messages, sampling, cancel, tools=tools)

    engine.generate = generate
    return engine


def window(make_window: Any, home: Path, qtbot: Any, model_dir: Path) -> Any:
    from app.gui.backend import open_engine
    from app.gui.main_window import MainWindow

    backend = Backend(engine_factory=lambda md, sd, s: force_first_call(open_engine(md, sd, s)),
                      model_preparer=lambda name, progress: model_dir, model_lister=lambda: [MODEL])
    w = MainWindow(home=home, backend=backend)
    make_window.windows.append(w)
    w.confirm = lambda *a: True
    w.confirm_switch = lambda *a: True
    w.resize(1100, 720)
    w.show()
    qtbot.waitUntil(lambda: bool((w.engine is not None or w.engine_error) and w.chats_loaded), timeout=REPLY)
    assert w.engine_error is None, w.engine_error
    return w


def test_a_real_model_calls_a_tool_and_a_pinned_chat_keeps_it(make_window: Any, home: Path, qtbot: Any,
                                                              model_dir: Path) -> None:
    settings = Settings(model=MODEL, provider="cpu")
    settings.sampling = Sampling(temperature=1.0, seed=3, max_new_tokens=16, model_defaults=False)
    settings.save(home / "settings.json")
    write_mcp_json(home)
    w = window(make_window, home, qtbot, model_dir)
    assert w.engine.capabilities.tool_format == "hermes"
    wait_connected(qtbot, w)
    assert w.composer.tools.text() == "4 tools available"
    send(qtbot, w, "What colour is the fruit?", wait=False)
    with qtbot.waitSignal(w.replyFinished, timeout=REPLY):
        card = answer(qtbot, w, "AllowToolOnce", timeout=REPLY)
    assert card.call["name"] == "colour_of" and card.call["arguments"]["fruit"] in ("apple", "banana")
    [done] = reply_cards(w)
    colour = {"apple": "red", "banana": "yellow"}[done.call["arguments"]["fruit"]]
    assert done.status == "done" and not done.expanded and f"Result:\n{colour}" in done.details.text()
    cid = w.current_id
    row = w.store.active_path(cid)[-1]
    assert row.tool_steps[0]["calls"][0]["result"] == colour
    assert "<tool_call>" not in row.content        # the call is kept as a step, not as reply text
    w.toggle_pin(cid)
    qtbot.waitUntil(lambda: w.chat_model.chat(cid).pinned, timeout=REPLY)
    wait_idle(qtbot, w, timeout=REPLY)
    make_window.shutdown(w)

    w = window(make_window, home, qtbot, model_dir)
    wait_connected(qtbot, w)
    qtbot.waitUntil(lambda: w.current_id == cid and len(w.chat_view.widgets) == 2, timeout=REPLY)
    [kept] = reply_cards(w)
    assert kept.status == "done" and colour in kept.details.text()
    # the next turn's prompt: the call and its result, through the model's own template
    rows = w.store.active_path(cid)
    prompt = w.engine.chat_template.render(chat_messages(rows, with_tools=True), tools=[])
    assert '"name": "colour_of", "arguments": {"fruit": ' in prompt
    assert f"<tool_response>\n{colour}\n</tool_response>" in prompt
    send(qtbot, w, "And a banana?", wait=False)
    with qtbot.waitSignal(w.replyFinished, timeout=REPLY):
        answer(qtbot, w, "DenyTool", timeout=REPLY)
    last = w.store.active_path(cid)[-1]
    assert last.tool_steps[0]["calls"][0]["status"] == "denied"
    assert len(w.store.active_path(cid)) == 4
