"""A turn that calls MCP tools (app/chat/turn.py with a Toolbox): the fake engine writes a call
in the Hermes format, the turn asks, runs it on a real MCP server (tests/support/mcp_server.py,
stdio), gives the model the result and stores the reply with its tool steps."""
from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.chat.turn import Chunk, ToolAsked, ToolRan, TurnRequest, run_turn
from app.gui.settings import Settings
from app.store import ConversationStore
from app.tools.mcp_client import list_tools
from app.tools.mcp_config import McpServerConfig, parse_server
from app.tools.toolbox import Decision, Toolbox, tool_format
from tests.support.fake_engine import FakeEngine
from tests.support.mcp_server import stdio_config
from tests.support.tool_replies import calling

CID = str(uuid.uuid4())


@pytest.fixture(scope="module")
def server() -> McpServerConfig:
    return parse_server("test-tools", stdio_config())


@pytest.fixture(scope="module")
def tools(server: McpServerConfig) -> list[Any]:
    return list_tools(server)


def toolbox(server: McpServerConfig, tools: list[Any]) -> Toolbox:
    fmt = tool_format("hermes")
    assert fmt is not None
    return Toolbox(fmt, tools, {server.name: server})


def run(store: Any, engine: FakeEngine, box: Toolbox, answer: Decision | None, text: str = "what is 19 + 23?",
        create: bool = True) -> tuple[list[Any], Any]:
    """Runs a turn to its end, answering each approval with `answer` (None: cancel the turn)."""
    cancel = threading.Event()
    req = TurnRequest(chat_id=CID, mode="send", settings=Settings(), text=text, create=create,  # type: ignore[arg-type]
                      open_session=create, tools=box, model_name="Fake")
    gen = run_turn(req, store, engine, cancel)
    events: list[Any] = []
    while True:
        try:
            ev = next(gen)
        except StopIteration as stop:
            return events, stop.value
        events.append(ev)
        if isinstance(ev, ToolAsked):
            if answer is None:
                cancel.set()
            else:
                ev.approval.decide(answer)


def test_approved_call_runs_and_the_model_answers_with_its_result(store: Any, tmp_path: Path, server: Any,
                                                                  tools: Any) -> None:
    engine = FakeEngine(tmp_path / "state", delay=0, reply=calling(), tool_format="hermes")
    events, out = run(store, engine, toolbox(server, tools), Decision.ONCE)
    asked = [e for e in events if isinstance(e, ToolAsked)]
    assert len(asked) == 1
    call = asked[0].approval.call
    assert (call.name, call.server, call.arguments) == ("add", "test-tools", {"a": 19, "b": 23})
    ran = [e.record for e in events if isinstance(e, ToolRan)]
    assert [(r["status"], r["result"]) for r in ran] == [("done", "42")]
    # the call's markup never streams to the window; the answer does
    shown = "".join(e.text for e in events if isinstance(e, Chunk))
    assert "<tool_call>" not in shown and shown == "The answer is 42."
    assert out.error is None and out.assistant.content == "The answer is 42."
    assert out.assistant.tool_steps == [{"text": "", "calls": ran}]
    # the second generation saw the call and its result, with the tools offered both times
    (first, tools1), (second, tools2) = engine.requests
    assert [t["function"]["name"] for t in tools1] == ["add", "lookup", "shout", "colour_of"] and tools2 == tools1
    assert second[-2]["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 19, "b": 23}}
    assert second[-1] == {"role": "tool", "tool_call_id": call.id, "name": "add", "content": "42"}
    # the format's markers keep their text in the reply (a model may have them as special tokens)
    assert [args[2].keep_special for args in engine.called("generate")] == [("<tool_call>",)] * 2


def test_denied_call_does_not_run_and_the_model_is_told(store: Any, tmp_path: Path, server: Any,
                                                        tools: Any) -> None:
    calls: list[Any] = []
    box = toolbox(server, tools)
    box.caller = lambda *a: calls.append(a)  # type: ignore[assignment,func-returns-value]
    engine = FakeEngine(tmp_path / "state", delay=0, reply=calling(), tool_format="hermes")
    events, out = run(store, engine, box, Decision.DENY)
    assert calls == []
    record = out.assistant.tool_steps[0]["calls"][0]
    assert record["status"] == "denied" and "did not allow" in record["result"]
    assert engine.requests[-1][0][-1]["content"] == record["result"]
    assert out.assistant.content == f"The answer is {record['result']}."


def test_always_runs_later_calls_without_asking(store: Any, tmp_path: Path, server: Any, tools: Any) -> None:
    box = toolbox(server, tools)
    engine = FakeEngine(tmp_path / "state", delay=0, reply=calling(), tool_format="hermes")
    events, _ = run(store, engine, box, Decision.ALWAYS)
    assert sum(isinstance(e, ToolAsked) for e in events) == 1
    events, out = run(store, engine, box, None, text="and again?", create=False)   # None: would cancel if asked
    assert not any(isinstance(e, ToolAsked) for e in events)
    assert out.assistant.content == "The answer is 42."
    # the next turn's prompt held the first turn's call and result (rendered from the store)
    history = engine.requests[-2][0]
    assert [m["role"] if isinstance(m, dict) else m.role for m in history] == \
        ["system", "user", "assistant", "tool", "assistant", "user"]


def test_a_round_after_calls_streams_as_a_new_paragraph(store: Any, tmp_path: Path, server: Any,
                                                         tools: Any) -> None:
    engine = FakeEngine(tmp_path / "state", delay=0, reply=calling(preface="Let me add. "), tool_format="hermes")
    events, out = run(store, engine, toolbox(server, tools), Decision.ONCE)
    assert "".join(e.text for e in events if isinstance(e, Chunk)) == "Let me add.\n\nThe answer is 42."
    assert out.assistant.content == "The answer is 42." and out.assistant.tool_steps[0]["text"] == "Let me add."


def test_stop_while_asking_stores_the_call_as_cancelled(tmp_path: Path, server: Any, tools: Any) -> None:
    store = ConversationStore(in_memory=True)
    engine = FakeEngine(tmp_path / "state", delay=0, reply=calling(preface="Let me add. "), tool_format="hermes")
    events, out = run(store, engine, toolbox(server, tools), None)
    assert [e.record["status"] for e in events if isinstance(e, ToolRan)] == ["cancelled"]
    assert len(engine.requests) == 1
    assert out.assistant.tool_steps[0]["text"] == "Let me add."
    assert out.figures["finish_reason"] == "cancelled"


def test_a_call_of_a_tool_nobody_offers_is_answered_without_asking(store: Any, tmp_path: Path, server: Any,
                                                                   tools: Any) -> None:
    engine = FakeEngine(tmp_path / "state", delay=0, reply=calling(name="format_disk"), tool_format="hermes")
    events, out = run(store, engine, toolbox(server, tools), None)
    assert not any(isinstance(e, ToolAsked) for e in events)
    record = out.assistant.tool_steps[0]["calls"][0]
    assert record["status"] == "unknown" and "no tool named 'format_disk'" in record["result"]


def test_arguments_that_are_no_json_object_are_answered_without_asking(store: Any, tmp_path: Path, server: Any,
                                                                       tools: Any) -> None:
    def reply(messages: Any) -> str:
        if messages[-1].role == "tool":
            return "sorry"
        return '<tool_call>\n{"name": "add", "arguments": "two and three"}\n</tool_call>'

    engine = FakeEngine(tmp_path / "state", delay=0, reply=reply, tool_format="hermes")
    events, out = run(store, engine, toolbox(server, tools), None)
    assert not any(isinstance(e, ToolAsked) for e in events)
    record = out.assistant.tool_steps[0]["calls"][0]
    assert record["status"] == "failed" and "not a JSON object" in record["result"]
