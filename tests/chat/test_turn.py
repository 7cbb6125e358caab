"""One turn as a plain generator (app/chat/turn.py): a real store, the fake engine, no widgets."""
from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any


from app.chat.turn import Chunk, Prefill, TurnOutcome, TurnRequest, UserSaved, drain, run_turn
from app.gui.settings import Settings
from engine.api import SessionKind

from tests.support.fake_engine import FakeEngine

CID = str(uuid.uuid4())
TID = str(uuid.uuid4())


def _request(chat_id: str, mode: str = "send", **kw: Any) -> TurnRequest:
    return TurnRequest(chat_id=chat_id, mode=mode, settings=Settings(), **kw)  # type: ignore[arg-type]


def test_a_send_stores_both_messages_and_streams_the_reply(store: Any, tmp_path: Path) -> None:
    engine = FakeEngine(tmp_path / "state", delay=0, reply="one two three")
    events, out = drain(run_turn(_request(CID, create=True, open_session=True, text="hello",
                                          model_name="Fake"), store, engine, threading.Event()))
    assert isinstance(events[0], UserSaved) and events[0].row.content == "hello"
    chunks = [e for e in events if isinstance(e, Chunk)]
    assert "".join(c.text for c in chunks) == "one two three"
    assert any(isinstance(e, Prefill) for e in events)
    assert isinstance(out, TurnOutcome) and out.error is None
    assert [(r.role, r.content) for r in out.rows] == [("user", "hello"), ("assistant", "one two three")]
    assert out.assistant.model_name == "Fake"
    assert out.figures is not None and out.figures["finish_reason"] != "cancelled"
    assert store.get_conversation(CID).kv_state == "memory"   # the engine's word, stored
    assert engine.called("open")[0][:2] == (CID, SessionKind.REGULAR)


def test_regenerate_writes_a_sibling_reply_under_the_same_user_message(store: Any, tmp_path: Path) -> None:
    engine = FakeEngine(tmp_path / "state", delay=0, reply="first")
    _, out = drain(run_turn(_request(CID, create=True, open_session=True, text="q"), store,
                            engine, threading.Event()))
    user_id = out.rows[0].id
    engine.reply = "second"
    events, out2 = drain(run_turn(_request(CID, "regenerate", parent_id=user_id), store, engine,
                                  threading.Event()))
    assert events[0] == UserSaved(None)
    assert [r.content for r in out2.rows] == ["q", "second"]
    assert out2.rows[1].sibling_count == 2 and out2.rows[1].sibling_index == 1


def test_an_edit_branches_the_user_message(store: Any, tmp_path: Path) -> None:
    engine = FakeEngine(tmp_path / "state", delay=0, reply="ok")
    _, out = drain(run_turn(_request(CID, create=True, open_session=True, text="v1"), store,
                            engine, threading.Event()))
    _, out2 = drain(run_turn(_request(CID, "edit", text="v2", parent_id=out.rows[0].parent_id),
                             store, engine, threading.Event()))
    assert [r.content for r in out2.rows] == ["v2", "ok"]
    assert out2.rows[0].sibling_count == 2


def test_a_cancelled_turn_keeps_the_partial_reply(store: Any, tmp_path: Path) -> None:
    engine = FakeEngine(tmp_path / "state", delay=0, reply="a b c d e f g h")
    cancel = threading.Event()
    gen = run_turn(_request(CID, create=True, open_session=True, text="q"), store, engine, cancel)
    seen = ""
    try:
        while True:
            ev = next(gen)
            if isinstance(ev, Chunk):
                seen += ev.text
                if len(seen.split()) >= 2:
                    cancel.set()
    except StopIteration as stop:
        out = stop.value
    assert out.assistant is not None
    assert out.assistant.content == out.text and out.text.startswith("a b") and out.text != "a b c d e f g h"
    assert out.figures["finish_reason"] == "cancelled"


def test_an_engine_failure_is_reported_with_what_had_streamed(store: Any, tmp_path: Path) -> None:
    class Failing(FakeEngine):
        def generate(self, *a: Any, **kw: Any):  # type: ignore[override]
            yield from ()
            raise RuntimeError("the model fell over")

    engine = Failing(tmp_path / "state", delay=0)
    _, out = drain(run_turn(_request(CID, create=True, open_session=True, text="q"), store,
                            engine, threading.Event()))
    assert isinstance(out.error, RuntimeError) and "fell over" in str(out.error)
    assert out.assistant is None and [r.role for r in out.rows] == ["user"]


def test_a_temporary_turn_in_the_memory_store(tmp_path: Path) -> None:
    from app.store import ConversationStore

    temp = ConversationStore(in_memory=True)
    temp.create_conversation(id=TID, system_prompt="", model_id="Fake")
    engine = FakeEngine(tmp_path / "state", delay=0, reply="hi")
    _, out = drain(run_turn(_request(TID, text="q", kind=SessionKind.TEMPORARY, temporary=True,
                                     open_session=True), temp, engine, threading.Event()))
    assert [r.content for r in out.rows] == ["q", "hi"]
    assert engine.called("open")[0][1] == SessionKind.TEMPORARY


def test_the_chat_overflow_policy_reaches_the_engine(store: Any, tmp_path: Path) -> None:
    seen: list[Any] = []

    class Spy(FakeEngine):
        def generate(self, sid: str, messages: Any, sampling: Any, cancel: Any = None):  # type: ignore[override]
            seen.append(sampling)
            return super().generate(sid, messages, sampling, cancel)

    engine = Spy(tmp_path / "state", delay=0, reply="x")
    store.create_conversation(id=CID, system_prompt="be brief", model_id="m")
    store.update_settings(CID, settings={"overflow": "stop"})
    drain(run_turn(_request(CID, text="q", open_session=True), store, engine, threading.Event()))
    assert seen[0].overflow == "stop"
