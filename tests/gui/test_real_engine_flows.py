"""Every window flow that touches the engine, on the real engine: `SessionManager` over the tiny
model (built here, as tests/engine builds it), through `app.gui.backend.open_engine`, with the
real store in tmp_path. Open, send, stop, regenerate, edit; pin and unpin of chats the engine has
opened and of chats it has not (not opened since launch, or closed); delete and undo; switching
the model; closing a temporary chat mid-reply. The GUI tests on the fake prove the window against
the fake; these prove it against the engine that ships."""
from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from app.gui.backend import Backend
from app.gui.settings import Sampling, Settings
from engine.api import SessionKind, SessionNotOpen, TextChunk
from tests.support.gui import open_chat, send
from tests.support.server import TINY
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

MODEL_A, MODEL_B = "tiny-chat", "tiny-chat-b"
REPLY_WAIT = 60000      # ms: an upper bound on a loaded machine, never a speed target


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two tiny models (other weights): the default and one to switch to."""
    from engine.convert import convert_gguf
    out = {}
    for name, cfg in ((MODEL_A, TINY), (MODEL_B, TinyConfig(**{**TINY.__dict__, "seed": 8}))):
        base = tmp_path_factory.mktemp(name)
        src = write_tiny_gguf(base / f"{name}.gguf", cfg)
        out[name] = convert_gguf(src.path, base / name)
    return out


class Gate:
    """Holds the real engine's reply after its first text until the test lets it go (the test acts
    mid-reply, ordered by events, not by sleeps). The engine runs untouched: this only waits
    between the events it yields, as a slow reader would."""

    def __init__(self) -> None:
        self.armed = False
        self.reached = threading.Event()
        self.release = threading.Event()

    def wrap(self, engine: Any) -> Any:
        real = engine.generate

        def generate(*args: Any, **kwargs: Any) -> Iterator[Any]:
            events = real(*args, **kwargs)

            def run() -> Iterator[Any]:
                with contextlib.closing(events):
                    for ev in events:
                        yield ev
                        if self.armed and isinstance(ev, TextChunk):
                            self.armed = False
                            self.reached.set()
                            assert self.release.wait(60)
            return run()

        engine.generate = generate
        return engine


class RealWindows:
    """Main windows over `home` on the real engine; `gate` sits between the engine and the window."""

    def __init__(self, make_window: Any, home: Path, qtbot: Any, models: dict[str, Path]) -> None:
        self.make_window, self.home, self.qtbot, self.models = make_window, home, qtbot, models
        self.gate = Gate()
        self.errors: list[BaseException] = []
        settings = Settings(model=MODEL_A, provider="cpu")
        # Sampled (seeded), not greedy: the tiny model's greedy reply is partial UTF-8 bytes that
        # stream as one chunk at the end; a seeded sample streams a chunk per token.
        settings.sampling = Sampling(temperature=1.0, seed=3, max_new_tokens=16, model_defaults=False)
        settings.save(home / "settings.json")

    def window(self) -> Any:
        from app.gui.backend import open_engine
        from app.gui.main_window import MainWindow

        def factory(model_dir: Path, state_dir: Path, settings: Settings) -> Any:
            return self.gate.wrap(open_engine(model_dir, state_dir, settings))

        backend = Backend(engine_factory=factory, model_preparer=lambda name, progress: self.models[name],
                          model_lister=lambda: sorted(self.models))
        w = MainWindow(home=self.home, backend=backend)
        self.make_window.windows.append(w)
        w.confirm = lambda *a: True
        w.confirm_switch = lambda *a: True      # a model switch's cost, said first
        w.chats.errorOccurred.connect(self.errors.append)
        w.resize(1100, 720)
        w.show()
        self.qtbot.waitUntil(lambda: bool((w.engine is not None or w.engine_error) and w.chats_loaded),
                             timeout=REPLY_WAIT)
        assert w.engine_error is None, w.engine_error
        return w

    def restart(self, w: Any) -> Any:
        self.make_window.shutdown(w)
        return self.window()


@pytest.fixture
def real(make_window: Any, home: Path, qtbot: Any, models: dict[str, Path]) -> RealWindows:
    return RealWindows(make_window, home, qtbot, models)


def reply(qtbot: Any, w: Any, text: str) -> Any:
    """Sends `text` in the chat on screen and waits for the reply; it must not have failed."""
    ended: list[Any] = []
    w.replies.replyEnded.connect(lambda cid, txt, error, stopped: ended.append(error))
    send(qtbot, w, text, timeout=REPLY_WAIT)
    assert ended and ended[-1] is None, ended
    last = w.store.active_path(w.current_id)[-1]
    assert last.role == "assistant" and last.content
    return last


def engine_has_open(w: Any, chat_id: str) -> bool:
    try:
        w.engine.info(chat_id)
    except SessionNotOpen:
        return False
    return True


def manifest(real: RealWindows, chat_id: str) -> Path:
    return real.home / "state" / "sessions" / f"{chat_id}.json"


def saved_kind(real: RealWindows, chat_id: str) -> str | None:
    """The kind the engine saved for the chat (None: nothing saved)."""
    path = manifest(real, chat_id)
    return json.loads(path.read_text())["kind"] if path.is_file() else None


def saved_pinned(qtbot: Any, w: Any, chat_id: str) -> None:
    qtbot.waitUntil(lambda: w.chat_model.chat(chat_id).pinned and not w.chat_model.chat(chat_id).saving
                    and w.tasks.pending == 0, timeout=REPLY_WAIT)


def two_chats(real: RealWindows, qtbot: Any) -> tuple[Any, str, str]:
    """A window with chats A and B, one reply each; B is on screen (and the last one opened)."""
    w = real.window()
    reply(qtbot, w, "Hello, chat A.")
    a = w.current_id
    w.new_chat()
    reply(qtbot, w, "Hello, chat B.")
    return w, a, w.current_id


# --- the chat on screen ----------------------------------------------------------------------------

def test_send_regenerate_edit_and_stop(real: RealWindows, qtbot: Any) -> None:
    w = real.window()
    first = reply(qtbot, w, "Hello there.")
    cid = w.current_id
    assert w.chats.opened.get(cid) == SessionKind.REGULAR and engine_has_open(w, cid)
    assert first.figures["prefilled_tokens"] > 0 and first.model_name == MODEL_A

    with qtbot.waitSignal(w.replyFinished, timeout=REPLY_WAIT):           # regenerate (Ctrl+R)
        w.act_regen.trigger()
    path = w.store.active_path(cid)
    assert [m.role for m in path] == ["user", "assistant"] and path[-1].id != first.id
    assert len(w.store.siblings(path[-1].id)) == 2
    assert path[-1].figures["reused_tokens"] > 0          # the prompt's KV was kept

    user = path[0]
    with qtbot.waitSignal(w.replyFinished, timeout=REPLY_WAIT):           # edit the question
        w.edit_message(user.id, "Hello again, edited.")
    path = w.store.active_path(cid)
    assert path[0].content == "Hello again, edited." and len(w.store.siblings(path[0].id)) == 2
    assert path[-1].role == "assistant" and path[-1].content

    w.settings.sampling.max_new_tokens = 200            # stop: a reply long enough to be stopped
    real.gate.armed = True
    send(qtbot, w, "Tell me a long story.", wait=False)
    assert real.gate.reached.wait(REPLY_WAIT / 1000)
    qtbot.waitUntil(lambda: bool(w.chat_view.stream_text), timeout=REPLY_WAIT)
    with qtbot.waitSignal(w.replyFinished, timeout=REPLY_WAIT):
        w.stop()
        assert not w.composer.generating                # the window is free at once
        real.gate.release.set()
    stopped = w.store.active_path(cid)[-1]
    assert stopped.role == "assistant" and stopped.figures["finish_reason"] == "cancelled"
    assert 0 < stopped.figures["generated_tokens"] < 200
    w.settings.sampling.max_new_tokens = 16
    reply(qtbot, w, "Short one now.")                  # the session works on
    assert real.errors == []


# --- pinning and unpinning ----------------------------------------------------------------------------

def test_pin_a_chat_not_opened_since_launch_then_send_and_resume(real: RealWindows, qtbot: Any) -> None:
    w, a, b = two_chats(real, qtbot)
    w = real.restart(w)
    qtbot.waitUntil(lambda: w.current_id == b, timeout=REPLY_WAIT)       # B reopens; A is not opened
    w.sidebar.select(a)                                 # A selected in the list, not opened
    assert w.current_id == b and a not in w.chats.opened and not engine_has_open(w, a)

    w.toggle_pin(a)
    saved_pinned(qtbot, w, a)
    assert real.errors == [] and w.store.get_conversation(a).pinned
    assert engine_has_open(w, a) and w.engine.info(a).kind == SessionKind.PINNED
    assert saved_kind(real, a) == "pinned"              # saved at once, as a pinned session

    open_chat(qtbot, w, a)
    reply(qtbot, w, "Now that you are pinned?")         # sends work (they failed: "not open")
    qtbot.waitUntil(lambda: w.chat_model.chat(a).kv_state == "disk" and not w.chat_model.chat(a).saving,
                    timeout=REPLY_WAIT)
    assert w.engine.info(a).kv_bytes_disk > 0

    w = real.restart(w)
    qtbot.waitUntil(lambda: w.current_id == a and len(w.chat_view.widgets) == 4, timeout=REPLY_WAIT)
    reply(qtbot, w, "And after a restart?")
    assert "from disk" in w.status.started.text()       # resumed, not prefilled again
    assert real.errors == []


def test_unpin_a_pinned_chat_not_opened_since_launch(real: RealWindows, qtbot: Any) -> None:
    w, a, b = two_chats(real, qtbot)
    w.toggle_pin(a)
    saved_pinned(qtbot, w, a)
    assert w.engine.info(a).kv_bytes_disk > 0
    w = real.restart(w)
    qtbot.waitUntil(lambda: w.current_id == b, timeout=REPLY_WAIT)
    assert w.chat_model.chat(a).pinned and not engine_has_open(w, a)

    w.toggle_pin(a)                                     # unpin, not opened
    qtbot.waitUntil(lambda: not w.chat_model.chat(a).pinned and w.tasks.pending == 0, timeout=REPLY_WAIT)
    assert real.errors == [] and not w.store.get_conversation(a).pinned
    info = w.engine.info(a)
    assert info.kind == SessionKind.REGULAR and info.kv_bytes_disk == 0      # its pinned KV went
    assert saved_kind(real, a) != "pinned"
    open_chat(qtbot, w, a)
    reply(qtbot, w, "Still working?")

    w = real.restart(w)                                 # and it stays unpinned
    qtbot.waitUntil(lambda: w.current_id == a, timeout=REPLY_WAIT)
    assert not w.chat_model.chat(a).pinned
    reply(qtbot, w, "Once more.")
    assert w.engine.info(a).kind == SessionKind.REGULAR and saved_kind(real, a) != "pinned"


def test_pin_and_unpin_an_opened_chat_and_pin_after_close(real: RealWindows, qtbot: Any) -> None:
    w, a, b = two_chats(real, qtbot)
    w.toggle_pin(b)                                     # opened: on screen
    saved_pinned(qtbot, w, b)
    assert w.engine.info(b).kind == SessionKind.PINNED and w.engine.info(b).kv_bytes_disk > 0
    w.toggle_pin(b)
    qtbot.waitUntil(lambda: not w.chat_model.chat(b).pinned and w.tasks.pending == 0, timeout=REPLY_WAIT)
    assert w.engine.info(b).kind == SessionKind.REGULAR and w.engine.info(b).kv_bytes_disk == 0
    reply(qtbot, w, "Unpinned and working?")

    w.close_chat(b)                                     # closed: the engine lets it go
    qtbot.waitUntil(lambda: not engine_has_open(w, b), timeout=REPLY_WAIT)
    w.toggle_pin(b)                                     # then pinned
    saved_pinned(qtbot, w, b)
    assert real.errors == [] and w.engine.info(b).kind == SessionKind.PINNED
    open_chat(qtbot, w, b)
    reply(qtbot, w, "Pinned after closing?")
    qtbot.waitUntil(lambda: w.engine.info(b).kv_bytes_disk > 0 and not w.engine.info(b).saving,
                    timeout=REPLY_WAIT)
    assert real.errors == []


def test_pin_then_close_at_once_stays_pinned(real: RealWindows, qtbot: Any) -> None:
    """Closing the chat at once after pinning it: the engine pins (and saves) first, then closes;
    the pin stays and the chat resumes from disk after a restart."""
    w = real.window()
    reply(qtbot, w, "Keep me.")
    cid = w.current_id
    w.toggle_pin(cid)
    w.close_chat(cid)
    qtbot.waitUntil(lambda: w.tasks.pending == 0 and not w.chat_model.chat(cid).saving, timeout=REPLY_WAIT)
    assert real.errors == [] and w.chat_model.chat(cid).pinned and w.store.get_conversation(cid).pinned
    w = real.restart(w)
    open_chat(qtbot, w, cid)
    reply(qtbot, w, "Still pinned?")
    assert "from disk" in w.status.started.text() and real.errors == []


def test_a_chat_the_engine_let_go_of_still_answers(real: RealWindows, qtbot: Any) -> None:
    """The window's record of what the engine has open can go stale (the engine closed the
    session): the next message opens it again instead of failing with "not open"."""
    w = real.window()
    reply(qtbot, w, "Hello.")
    cid = w.current_id
    w.engine.close(cid)
    assert w.chats.opened.get(cid) == SessionKind.REGULAR and not engine_has_open(w, cid)
    reply(qtbot, w, "Are you still there?")
    assert engine_has_open(w, cid)


# --- deleting ---------------------------------------------------------------------------------------------

def test_delete_and_undo_then_delete_for_good(real: RealWindows, qtbot: Any) -> None:
    w, a, b = two_chats(real, qtbot)
    open_chat(qtbot, w, a)
    w.toggle_pin(a)
    saved_pinned(qtbot, w, a)
    w.delete_chat(a)
    assert w.chat_model.chat(a) is None or a not in w.chat_model.visible_chat_ids()
    w.undo_delete()
    qtbot.waitUntil(lambda: w.current_id == a, timeout=REPLY_WAIT)
    reply(qtbot, w, "Back from the bin?")               # undone: the chat and its session work
    assert saved_kind(real, a) == "pinned"

    w.delete_chat(a)
    w.deletions.commit(a)                               # the undo time ran out
    qtbot.waitUntil(lambda: w.tasks.pending == 0 and not manifest(real, a).exists(), timeout=REPLY_WAIT)
    assert not engine_has_open(w, a)
    assert a not in [c.id for c in w.store.list_conversations()]
    assert real.errors == []


# --- the model ------------------------------------------------------------------------------------------

def test_switch_model_and_back(real: RealWindows, qtbot: Any) -> None:
    w, a, b = two_chats(real, qtbot)
    w.toggle_pin(b)
    saved_pinned(qtbot, w, b)
    old = w.engine
    qtbot.waitUntil(lambda: w.model_picker.findData(MODEL_B) >= 0, timeout=REPLY_WAIT)
    i = w.model_picker.findData(MODEL_B)
    w.model_picker.setCurrentIndex(i)
    w.model_picker.activated.emit(i)
    qtbot.waitUntil(lambda: w.engine is not None and w.engine is not old, timeout=REPLY_WAIT)
    assert w.engine.model_name == MODEL_B
    # the pinned chat on screen was made with the first model: it is offered; kept on this one
    qtbot.waitUntil(lambda: w.model_notice.isVisible(), timeout=REPLY_WAIT)
    w.model_notice.keep_btn.click()
    assert reply(qtbot, w, "Hello, other model.").model_name == MODEL_B     # the pinned chat
    open_chat(qtbot, w, a)
    assert reply(qtbot, w, "And this chat?").model_name == MODEL_B          # a regular one

    old = w.engine
    i = w.model_picker.findData(MODEL_A)
    w.model_picker.setCurrentIndex(i)
    w.model_picker.activated.emit(i)
    qtbot.waitUntil(lambda: w.engine is not None and w.engine is not old, timeout=REPLY_WAIT)
    open_chat(qtbot, w, b)
    qtbot.waitUntil(lambda: w.model_notice.isVisible(), timeout=REPLY_WAIT)    # it went on with B
    w.model_notice.keep_btn.click()
    assert reply(qtbot, w, "Back to the first model.").model_name == MODEL_A
    assert real.errors == []


# --- temporary chats ------------------------------------------------------------------------------------

def test_close_a_temporary_chat_mid_reply(real: RealWindows, qtbot: Any) -> None:
    w = real.window()
    w.new_chat(temporary=True)
    w.settings.sampling.max_new_tokens = 200
    real.gate.armed = True
    send(qtbot, w, "A secret that must not be kept.", wait=False)
    assert real.gate.reached.wait(REPLY_WAIT / 1000)
    tid = w.current_id
    assert w.chats.is_temporary(tid) and engine_has_open(w, tid)
    w.close_chat(tid)                                   # mid-reply
    assert w.chat_model.chat(tid) is None and w.current_id is None
    real.gate.release.set()
    qtbot.waitUntil(lambda: w.stream is None and w.tasks.pending == 0, timeout=REPLY_WAIT)
    assert not engine_has_open(w, tid)
    assert not list((real.home / "state").rglob(f"*{tid}*"))     # nothing of it on disk
    assert tid not in [c.id for c in w.store.list_conversations()]
    w.settings.sampling.max_new_tokens = 16
    reply(qtbot, w, "A new chat after that.")           # the window goes on
    assert not w.chats.is_temporary(w.current_id)

