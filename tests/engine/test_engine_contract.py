"""One contract, three engines: every `ChatEngine` method, run against `SessionManager` on the tiny
real model, `RemoteEngine` against Amber's own server (a real `amber-engine serve` process on
127.0.0.1 over the same model) and the GUI tests' fake, with the same expectations, the typed
errors included. What only an engine that saves sessions can do (resume after a restart) runs
where `capabilities.state_dir` says so. The fake may do only what this suite shows the real
engines do."""
from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, cast

import pytest

from engine.api import (CacheSaltMismatch, ChatEngine, ChatMessage, EngineCapabilities, GenerationResult,
                        KVLocation, ModelNotReady, PrefillProgress, SamplingParams, SessionBusy, SessionError,
                        SessionInfo, SessionKind, SessionKindConflict, SessionNotOpen, StreamEvent, TextChunk)
from tests.support.fake_engine import FakeEngine
from tests.support.server import KEY_A, ServerProcess

KINDS = ["local", "remote", "fake"]
HELLO = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hello there, how are you?")]
# Sampled, not greedy: the tiny model's greedy reply is one run of partial UTF-8 bytes, streamed as
# one chunk at the end; a seeded sample streams a chunk per token.
SHORT = SamplingParams(temperature=1.0, seed=3, max_new_tokens=6)
LONG = SamplingParams(temperature=1.0, seed=3, max_new_tokens=64)


@pytest.fixture(scope="module")
def server(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tiny_dir, tmp_path_factory.mktemp("contract-server") / "state", "--api-key", KEY_A)
    yield s
    assert s.stop() == 0


class Engines:
    """Makes one kind of engine over a state folder, and makes it again (an application restart)."""

    def __init__(self, kind: str, state: Path, request: pytest.FixtureRequest) -> None:
        self.kind, self.state, self.request = kind, state, request
        self.made: list[ChatEngine] = []

    def make(self) -> ChatEngine:
        engine: ChatEngine
        if self.kind == "local":
            from engine.sessions.manager import SessionManager
            engine = SessionManager(self.request.getfixturevalue("tiny_model"), self.state)
        elif self.kind == "remote":
            from engine.remote.engine import RemoteEndpoint, RemoteEngine
            server = self.request.getfixturevalue("server")
            engine = RemoteEngine(RemoteEndpoint(server.url, "tiny-chat", api_key=KEY_A))
        else:
            engine = FakeEngine(self.state, delay=0, save_delay=0.01)
        self.made.append(engine)
        return engine

    def restart(self, engine: ChatEngine) -> ChatEngine:
        engine.shutdown()
        return self.make()

    def shutdown_all(self) -> None:
        for e in self.made:
            e.shutdown()


@pytest.fixture(params=KINDS)
def engines(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engines]:
    made = Engines(request.param, tmp_path / "state", request)
    yield made
    made.shutdown_all()


@pytest.fixture
def engine(engines: Engines) -> ChatEngine:
    return engines.make()


def sid() -> str:
    return str(uuid.uuid4())


def events(engine: ChatEngine, session_id: str, sampling: SamplingParams = SHORT,
           messages: list[ChatMessage] = HELLO, cancel: Any = None) -> list[StreamEvent]:
    return list(engine.generate(session_id, messages, sampling, cancel))


def reply(engine: ChatEngine, session_id: str, messages: list[ChatMessage] = HELLO) -> GenerationResult:
    last = events(engine, session_id, messages=messages)[-1]
    assert isinstance(last, GenerationResult)
    return last


def saved(engine: ChatEngine, session_id: str) -> SessionInfo:
    """The session's info once no background save is in flight."""
    deadline = time.monotonic() + 60
    info = engine.info(session_id)
    while info.saving and time.monotonic() < deadline:
        time.sleep(0.01)
        info = engine.info(session_id)
    assert not info.saving
    return info


def raises_at_call_or_first_event(error: type[Exception], call: Callable[[], Any]) -> None:
    """`generate` may raise when called or at its first event (the contract allows both)."""
    with pytest.raises(error):
        next(iter(call()))


def next_turn(first: GenerationResult) -> list[ChatMessage]:
    return HELLO + [ChatMessage("assistant", first.text), ChatMessage("user", "And then?")]


# --- what an engine says it is ------------------------------------------------------------------

def test_capabilities_are_data(engines: Engines, engine: ChatEngine) -> None:
    caps = engine.capabilities
    assert isinstance(caps, EngineCapabilities)
    assert caps.remote == (engines.kind == "remote")
    assert caps.per_chat_salt == (engines.kind == "remote")
    assert (caps.state_dir is not None) == (engines.kind != "remote")
    assert caps.token_prompts == (engines.kind == "local")
    assert engine.context_window > 0 and engine.model_name and engine.provider


def test_the_typed_errors_are_session_errors() -> None:
    for error in (SessionNotOpen, SessionBusy, SessionKindConflict, CacheSaltMismatch, ModelNotReady):
        assert issubclass(error, SessionError)
        assert not issubclass(error, KeyError)


# --- sessions that are not open ------------------------------------------------------------------

def test_a_session_not_open_is_refused_by_every_method_but_open_close_and_delete(engine: ChatEngine) -> None:
    s = sid()
    with pytest.raises(SessionNotOpen):
        engine.info(s)
    with pytest.raises(SessionNotOpen):
        engine.pin(s)
    with pytest.raises(SessionNotOpen):
        engine.unpin(s)
    raises_at_call_or_first_event(SessionNotOpen, lambda: engine.generate(s, HELLO, SHORT))
    engine.close(s)                  # nothing to do
    engine.delete(s)                 # nothing saved: nothing to do
    info = engine.open(s, SessionKind.REGULAR)
    assert (info.session_id, info.kind, info.tokens) == (s, SessionKind.REGULAR, 0)


def test_close_forgets_the_session_and_open_brings_it_back(engine: ChatEngine) -> None:
    s = sid()
    engine.open(s, SessionKind.REGULAR)
    reply(engine, s)
    engine.close(s)
    with pytest.raises(SessionNotOpen):
        engine.info(s)
    with pytest.raises(SessionNotOpen):
        engine.pin(s)
    raises_at_call_or_first_event(SessionNotOpen, lambda: engine.generate(s, HELLO, SHORT))
    engine.open(s, SessionKind.PINNED)       # a closed chat pinned: opened as pinned, then it works
    assert engine.info(s).kind == SessionKind.PINNED
    assert reply(engine, s).figures.generated_tokens > 0


# --- generation ------------------------------------------------------------------------------------

def test_a_reply_streams_text_then_one_result(engine: ChatEngine) -> None:
    s = sid()
    engine.open(s, SessionKind.REGULAR)
    got = events(engine, s)
    assert isinstance(got[-1], GenerationResult)
    assert not any(isinstance(e, GenerationResult) for e in got[:-1])
    chunks = [e.text for e in got if isinstance(e, TextChunk)]
    assert chunks and got[-1].text == "".join(chunks)
    f = got[-1].figures
    assert f.prompt_tokens > 0 and 0 < f.generated_tokens <= SHORT.max_new_tokens
    assert f.finish_reason in ("eos", "length", "stop")
    assert engine.info(s).tokens > 0


def test_prompt_progress_comes_before_the_text_and_reaches_the_prompt(engine: ChatEngine) -> None:
    s = sid()
    engine.open(s, SessionKind.REGULAR)
    got = events(engine, s)
    first_text = next(i for i, e in enumerate(got) if isinstance(e, TextChunk))
    reports = [e for e in got[:first_text] if isinstance(e, PrefillProgress)]
    assert not any(isinstance(e, PrefillProgress) for e in got[first_text:])
    assert [r.done for r in reports] == sorted(r.done for r in reports)
    assert all(0 <= r.done <= r.total for r in reports)
    result = got[-1]
    assert isinstance(result, GenerationResult)
    if not engine.capabilities.remote:      # an OpenAI-compatible stream says nothing of its prefill
        assert reports and reports[-1].done == reports[-1].total == result.figures.prefilled_tokens > 0


def test_count_tokens_is_the_models_tokenizer_or_none(engines: Engines, engine: ChatEngine) -> None:
    text = "Hello there, how are you?"
    n = engine.count_tokens(text)
    if engine.capabilities.remote:
        assert n is None                     # no standard way to ask a server: the caller estimates
        return
    assert isinstance(n, int) and n > 0 and engine.count_tokens("") == 0
    longer = engine.count_tokens(" ".join([text] * 10))
    assert longer is not None and longer >= 10 * n - 10
    if engines.kind == "local":
        tokenizer = cast(Any, engine).model.tokenizer
        assert n == len(tokenizer.encode(text, add_special_tokens=False).ids)


def test_cancel_ends_the_reply_with_a_cancelled_result(engine: ChatEngine) -> None:
    import threading
    s = sid()
    engine.open(s, SessionKind.REGULAR)
    cancel = threading.Event()
    got: list[StreamEvent] = []
    for ev in engine.generate(s, HELLO, LONG, cancel):
        got.append(ev)
        if isinstance(ev, TextChunk):
            cancel.set()
    assert isinstance(got[-1], GenerationResult)
    assert got[-1].figures.finish_reason == "cancelled"
    assert reply(engine, s).figures.generated_tokens > 0      # the session works on


def test_a_session_generating_already_is_busy(engine: ChatEngine) -> None:
    s, other = sid(), sid()
    engine.open(s, SessionKind.REGULAR)
    engine.open(other, SessionKind.REGULAR)
    first = iter(engine.generate(s, HELLO, LONG))
    next(first)                                              # holding the session mid-reply
    raises_at_call_or_first_event(SessionBusy, lambda: engine.generate(s, HELLO, SHORT))
    assert isinstance(list(first)[-1], GenerationResult)
    assert reply(engine, s).figures.generated_tokens > 0     # free again


# --- kinds -------------------------------------------------------------------------------------------

def test_pin_and_unpin_an_open_session(engines: Engines, engine: ChatEngine) -> None:
    s = sid()
    engine.open(s, SessionKind.REGULAR)
    reply(engine, s)
    engine.pin(s)
    info = saved(engine, s)
    assert info.kind == SessionKind.PINNED and info.save_error is None
    assert (info.kv_bytes_disk > 0) == (engine.capabilities.state_dir is not None)
    engine.unpin(s)
    info = engine.info(s)
    assert info.kind == SessionKind.REGULAR and info.kv_bytes_disk == 0
    engine.unpin(s)                           # a regular session: nothing to do
    assert engine.info(s).kind == SessionKind.REGULAR


def test_open_again_with_another_kind_pins_or_unpins(engine: ChatEngine) -> None:
    s = sid()
    engine.open(s, SessionKind.REGULAR)
    assert engine.open(s, SessionKind.PINNED).kind == SessionKind.PINNED
    assert engine.open(s, SessionKind.REGULAR).kind == SessionKind.REGULAR


def test_a_temporary_session_stays_temporary(engine: ChatEngine) -> None:
    t = sid()
    engine.open(t, SessionKind.TEMPORARY)
    reply(engine, t)
    with pytest.raises(SessionKindConflict):
        engine.pin(t)
    with pytest.raises(SessionKindConflict):
        engine.open(t, SessionKind.REGULAR)
    engine.unpin(t)                           # not pinned: nothing to do
    assert engine.info(t).kind == SessionKind.TEMPORARY and engine.info(t).kv_bytes_disk == 0
    engine.close(t)
    with pytest.raises(SessionNotOpen):
        engine.info(t)
    r = sid()
    engine.open(r, SessionKind.REGULAR)
    with pytest.raises(SessionKindConflict):
        engine.open(r, SessionKind.TEMPORARY)


def test_a_salted_session_opens_with_its_own_salt_only(engine: ChatEngine) -> None:
    s = sid()
    engine.open(s, SessionKind.REGULAR, "salt-a")
    with pytest.raises(CacheSaltMismatch):
        engine.open(s, SessionKind.REGULAR, "salt-b")
    with pytest.raises(CacheSaltMismatch):
        engine.open(s, SessionKind.REGULAR)
    assert engine.open(s, SessionKind.REGULAR, "salt-a").cache_salt == "salt-a"


def test_delete_forgets_an_open_session(engines: Engines, engine: ChatEngine) -> None:
    s = sid()
    engine.open(s, SessionKind.PINNED)
    reply(engine, s)
    saved(engine, s)
    engine.delete(s)
    with pytest.raises(SessionNotOpen):
        engine.info(s)
    if engine.capabilities.state_dir is not None:
        engine = engines.restart(engine)
        info = engine.open(s, SessionKind.PINNED)
        assert info.tokens == 0 and info.kv_bytes_disk == 0      # nothing of it was left on disk


def test_a_shut_down_engine_is_not_ready(engine: ChatEngine) -> None:
    s = sid()
    engine.open(s, SessionKind.REGULAR)
    engine.shutdown()
    with pytest.raises(ModelNotReady):
        engine.open(sid(), SessionKind.REGULAR)
    raises_at_call_or_first_event((ModelNotReady, SessionNotOpen),     # type: ignore[arg-type]
                                  lambda: engine.generate(s, HELLO, SHORT))


# --- what is saved: after a restart (engines with a state folder) ---------------------------------------

@pytest.fixture
def saving(engines: Engines) -> Engines:
    if engines.kind == "remote":
        pytest.skip("a remote engine saves nothing here (capabilities.state_dir is None)")
    return engines


def test_a_pinned_session_resumes_from_disk_after_a_restart(saving: Engines) -> None:
    engine, s = saving.make(), sid()
    engine.open(s, SessionKind.PINNED, "salt-a")
    first = reply(engine, s)
    tokens = saved(engine, s).tokens
    engine = saving.restart(engine)
    with pytest.raises(SessionNotOpen):                      # not open until opened
        engine.pin(s)
    info = engine.open(s, SessionKind.PINNED, "salt-a")
    assert info.kind == SessionKind.PINNED and info.tokens == tokens
    assert info.kv_location == KVLocation.DISK and info.kv_bytes_disk > 0
    f = reply(engine, s, next_turn(first)).figures
    assert f.resume == "disk" and f.reused_tokens > 0


def test_a_saved_session_keeps_its_salt_and_kind_across_a_restart(saving: Engines) -> None:
    engine, s = saving.make(), sid()
    engine.open(s, SessionKind.PINNED, "salt-a")
    reply(engine, s)
    saved(engine, s)
    engine = saving.restart(engine)
    with pytest.raises(CacheSaltMismatch):
        engine.open(s, SessionKind.PINNED, "salt-b")
    engine.close(s)
    with pytest.raises(SessionKindConflict):
        engine.open(s, SessionKind.TEMPORARY)      # a saved session's id is not a temporary one's
    engine.close(s)
    info = engine.open(s, SessionKind.REGULAR, "salt-a")    # opened as regular: unpinned
    assert info.kind == SessionKind.REGULAR and info.kv_bytes_disk == 0
    engine = saving.restart(engine)
    assert engine.open(s, SessionKind.PINNED, "salt-a").kv_bytes_disk == 0    # nothing kept


def test_pinning_a_session_not_opened_since_the_restart(saving: Engines) -> None:
    """What the window does for a chat it has not opened: open it as pinned, pin it; the next
    reply is saved and resumes after another restart."""
    engine, s = saving.make(), sid()
    engine.open(s, SessionKind.REGULAR)
    first = reply(engine, s)
    engine = saving.restart(engine)
    with pytest.raises(SessionNotOpen):
        engine.pin(s)
    engine.open(s, SessionKind.PINNED)
    engine.pin(s)
    assert saved(engine, s).kind == SessionKind.PINNED
    second = reply(engine, s, next_turn(first))
    assert saved(engine, s).kv_bytes_disk > 0
    engine = saving.restart(engine)
    info = engine.open(s, SessionKind.PINNED)
    assert info.kind == SessionKind.PINNED and info.kv_location == KVLocation.DISK
    third = next_turn(first) + [ChatMessage("assistant", second.text), ChatMessage("user", "Go on.")]
    assert reply(engine, s, third).figures.resume == "disk"


# --- tools: shown to models whose template teaches tool calls -----------------------------------

ADD_TOOL = {"type": "function", "function": {"name": "add", "description": "Add two integers.",
                                             "parameters": {"type": "object", "required": ["a", "b"],
                                                            "properties": {"a": {"type": "integer"},
                                                                           "b": {"type": "integer"}}}}}
TOOL_TURN: list[Any] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "add", "content": "5"},
]


def test_tools_are_refused_where_the_template_shows_none(engine: ChatEngine) -> None:
    """The tiny model's template is plain ChatML: no tool format, and tools are refused."""
    assert engine.capabilities.tool_format is None
    s = sid()
    engine.open(s)
    raises_at_call_or_first_event(ValueError, lambda: engine.generate(s, HELLO, SHORT, tools=[ADD_TOOL]))
    assert isinstance(reply(engine, s), GenerationResult)     # the session still works


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from engine.runtime.model import load_model
    from tests.support.tool_template import tiny_tool_model
    return load_model(tiny_tool_model(tmp_path_factory.mktemp("tool-model")), provider="cpu", threads=1)


@pytest.mark.parametrize("kind", ["local", "fake"])
def test_tool_calls_and_results_in_the_history(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A Qwen-style template: the engine says "hermes", takes `tools=` and a history holding an
    assistant turn's `tool_calls` and the `tool` result, and replies; the next turn goes on."""
    engine: ChatEngine
    if kind == "local":
        from engine.sessions.manager import SessionManager
        engine = SessionManager(request.getfixturevalue("tool_model"), tmp_path / "state")
    else:
        engine = FakeEngine(tmp_path / "state", delay=0, tool_format="hermes")
    try:
        assert engine.capabilities.tool_format == "hermes"
        s = sid()
        engine.open(s)
        first = list(engine.generate(s, TOOL_TURN, SHORT, tools=[ADD_TOOL]))[-1]
        assert isinstance(first, GenerationResult) and first.figures.finish_reason in ("eos", "length")
        nxt = TOOL_TURN + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "And 4 + 4?"}]
        second = list(engine.generate(s, nxt, SHORT, tools=[ADD_TOOL]))[-1]
        assert isinstance(second, GenerationResult)
        assert second.figures.prompt_tokens > first.figures.prompt_tokens
    finally:
        engine.shutdown()
