"""The controllers on their own: no window, no widget — a real SQLite store, the fake engine,
and the signals a window would subscribe to."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.gui.backend import Backend
from app.gui.controllers.chats import ChatsController
from app.gui.controllers.deletions import Deletions
from app.gui.controllers.engine import EngineController
from app.gui.controllers.replies import RepliesController
from app.gui.settings import Settings
from app.gui.tasks import TaskRunner


class Rig:
    """The four controllers wired as the window wires them."""

    def __init__(self, qtbot: Any, home: Path, engine: Any):
        self.qtbot, self.settings = qtbot, Settings()
        self.tasks = TaskRunner(max_threads=4)
        backend = Backend(engine_factory=lambda md, sd, s: engine,
                          model_preparer=lambda name, progress: home / "models" / "Fake",
                          model_lister=lambda: ["Other-Model"])
        self.engines = EngineController(backend, home, self.tasks)
        self.chats = ChatsController(self.engines, self.tasks)
        self.deletions = Deletions(self.chats, self.engines)
        self.replies = RepliesController(self.chats, self.engines, self.deletions,
                                         lambda: self.settings, self.tasks)
        self.events: list[tuple[str, Any]] = []
        for name in ("chunk", "turnStarted", "userStored", "turnFinished", "replyEnded",
                     "queued", "dequeued", "stopped"):
            getattr(self.replies, name).connect(lambda *a, n=name: self.events.append((n, a)))
        with qtbot.waitSignal(self.engines.ready, timeout=5000):
            self.engines.load(self.settings)
        with qtbot.waitSignal(self.chats.listLoaded, timeout=5000):
            self.chats.load(home / "amber.sqlite3", backend.make_store)

    def names(self) -> list[str]:
        return [n for n, _ in self.events]

    def send(self, text: str) -> None:
        with self.qtbot.waitSignal(self.replies.replyEnded, timeout=10000):
            self.replies.send(text)

    def close(self) -> None:
        self.tasks.wait(5)
        self.replies.stream_runner.pool.waitForDone(5000)
        if self.chats.store is not None:
            self.chats.store.close()


@pytest.fixture
def rig(qtbot: Any, home: Path, engine: Any) -> Any:
    r = Rig(qtbot, home, engine)
    yield r
    r.close()


def test_a_first_message_creates_the_chat_and_stores_the_turn(rig: Any, engine: Any) -> None:
    rig.chats.new()
    draft = rig.chats.draft.id
    engine.reply = "the answer"
    rig.send("the question")
    assert rig.chats.current_id == draft and rig.chats.draft is None
    assert rig.names()[:2] == ["turnStarted", "userStored"] and "chunk" in rig.names()
    _, (chat_id, out, item, stopped) = next(e for e in rig.events if e[0] == "turnFinished")
    assert chat_id == draft and not stopped and item.content == "the answer"
    stored = [(m.role, m.content) for m in rig.chats.store.active_path(draft)]
    assert stored == [("user", "the question"), ("assistant", "the answer")]
    assert rig.chats.model.chat(draft).busy is False
    assert rig.settings.last_chat_id == draft


def test_a_send_to_another_chat_waits_in_the_queue(rig: Any, engine: Any, qtbot: Any) -> None:
    engine.delay = 0.02
    rig.chats.new()
    rig.replies.send("long one")
    first = rig.chats.current_id
    rig.chats.new()
    q = rig.replies.enqueue("second chat")
    assert rig.replies.queue.has(q.chat_id) and q.chat_id != first
    qtbot.waitUntil(lambda: not rig.replies.queue and rig.replies.stream is None, timeout=15000)
    assert "dequeued" in rig.names()
    assert [m.role for m in rig.chats.store.active_path(q.chat_id)] == ["user", "assistant"]


def test_stop_releases_at_once_and_keeps_the_partial_reply(rig: Any, engine: Any, qtbot: Any) -> None:
    engine.delay = 0.05
    rig.chats.new()
    rig.replies.send("go")
    qtbot.waitUntil(lambda: "chunk" in rig.names(), timeout=5000)
    rig.replies.stop()
    assert rig.replies.stream is not None and rig.replies.stream.stopped   # winding down
    assert not rig.replies.streaming(rig.chats.current_id)
    qtbot.waitUntil(lambda: rig.replies.stream is None, timeout=10000)
    path = rig.chats.store.active_path(rig.chats.current_id)
    assert path[-1].role == "assistant" and path[-1].figures["finish_reason"] == "cancelled"


def test_a_deletion_can_be_undone_then_commits(rig: Any, engine: Any, qtbot: Any) -> None:
    rig.chats.new()
    rig.send("keep me?")
    cid = rig.chats.current_id
    with qtbot.waitSignal(rig.deletions.restored, timeout=2000):
        rig.deletions.hide(cid, "keep me?")
        assert cid not in rig.chats.model.visible_chat_ids()
        rig.deletions.undo()
    assert cid in rig.chats.model.visible_chat_ids() and not rig.deletions.pending
    rig.deletions.hide(cid, "keep me?")
    rig.deletions.commit(cid)
    qtbot.waitUntil(lambda: (cid,) in engine.called("delete"), timeout=5000)
    rig.tasks.wait(5)
    assert rig.chats.model.chat(cid) is None
    assert cid not in [c.id for c in rig.chats.store.list_conversations()]


def test_pin_saves_the_kv_and_the_list_follows(rig: Any, engine: Any, qtbot: Any) -> None:
    rig.chats.new()
    rig.send("pin this")
    cid = rig.chats.current_id
    rig.chats.toggle_pin(cid)
    qtbot.waitUntil(lambda: rig.chats.model.chat(cid).kv_state == "disk"
                    and not rig.chats.model.chat(cid).saving, timeout=10000)
    assert rig.chats.kind(cid).value == "pinned" and engine.disk_files()
    assert rig.chats.store.get_conversation(cid).pinned


def test_search_ranks_chats_and_a_new_query_wins(rig: Any, qtbot: Any) -> None:
    rig.chats.new()
    rig.send("apples and pears")
    rig.chats.new()
    rig.send("bananas")
    with qtbot.waitSignal(rig.chats.listChanged, timeout=5000):
        rig.chats.search("apples")
    assert rig.chats.model.searching
    assert len(rig.chats.model.visible_chat_ids()) == 1
    rig.chats.search("")
    assert not rig.chats.model.searching and len(rig.chats.model.visible_chat_ids()) == 2


def test_models_are_listed_and_a_failed_load_says_why(qtbot: Any, home: Path) -> None:
    tasks = TaskRunner()

    def broken(name: str, progress: Any) -> Path:
        raise FileNotFoundError("no such model: X")

    engines = EngineController(Backend(model_preparer=broken, model_lister=lambda: ["A", "B"]),
                               home, tasks)
    with qtbot.waitSignal(engines.failed, timeout=5000) as failed:
        engines.load(Settings())
    assert "no such model" in failed.args[0] and engines.engine is None and not engines.loading
    with qtbot.waitSignal(engines.modelsListed, timeout=5000) as listed:
        engines.refresh_models()
    assert listed.args[0] == ["A", "B"]
    tasks.wait(5)
