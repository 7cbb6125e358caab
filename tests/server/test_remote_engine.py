"""engine.remote.engine.RemoteEngine (Amber as a client) against Amber's own server: a real
`amber-engine serve` process on 127.0.0.1 over the tiny model (the fixtures of tests/server)."""
from __future__ import annotations

import threading

import pytest

from engine.api import ChatMessage, GenerationResult, SamplingParams, SessionKind, TextChunk
from engine.remote.engine import RemoteEndpoint, RemoteEngine, RemoteError, new_cache_salt

MODEL = "tiny-chat"
# Longer than one KV block (128 tokens), so a repeat can reuse the server's cached blocks.
SYSTEM = " ".join(f"Rule {i}: the quick brown fox jumps over the lazy dog." for i in range(10))
CHAT_1 = "11111111-1111-4111-8111-111111111111"
CHAT_2 = "22222222-2222-4222-8222-222222222222"
TEMP_1 = "33333333-3333-4333-8333-333333333333"
TEMP_2 = "44444444-4444-4444-8444-444444444444"
GREEDY = SamplingParams(greedy=True, max_new_tokens=12)


def turn(eng: RemoteEngine, sid: str, text: str, system: str = SYSTEM,
         sampling: SamplingParams = GREEDY) -> tuple[list[str], GenerationResult]:
    msgs = ([ChatMessage("system", system)] if system else []) + [ChatMessage("user", text)]
    events = list(eng.generate(sid, msgs, sampling))
    assert isinstance(events[-1], GenerationResult)
    return [e.text for e in events if isinstance(e, TextChunk)], events[-1]


@pytest.fixture
def keys(client_a, client_b) -> tuple[str, str]:
    """The server's two API keys (from tests/server/conftest.py, through its client fixtures:
    `from conftest import` would find another folder's conftest when the suites run together)."""
    return client_a.api_key, client_b.api_key


@pytest.fixture
def remote(server, keys):
    eng = RemoteEngine(RemoteEndpoint(server.url, MODEL, api_key=keys[0]))
    yield eng
    eng.shutdown()


def test_connects_and_learns_the_server(remote, server):
    assert remote.flavor == "amber" and remote.model_name == MODEL
    assert remote.context_window == 512                      # from the server's model entry
    assert remote.provider == f"remote · Amber · 127.0.0.1:{server.port}"


def test_streamed_reply_equals_the_local_engine_and_figures_are_the_servers(remote, tiny_model, tmp_path):
    from engine.generation.generate import collect
    from engine.sessions.manager import SessionManager
    remote.open(CHAT_1, SessionKind.REGULAR, new_cache_salt())
    chunks, result = turn(remote, CHAT_1, "What is the capital of France?", system="")
    m = SessionManager(tiny_model, tmp_path / "direct")
    try:
        m.open("00000000-0000-0000-0000-000000000001", SessionKind.TEMPORARY)
        direct = collect(m.generate("00000000-0000-0000-0000-000000000001",
                                    [ChatMessage("user", "What is the capital of France?")], GREEDY))
    finally:
        m.shutdown()
    assert len(chunks) > 1 and "".join(chunks) == result.text == direct.text
    f = result.figures
    assert (f.prompt_tokens, f.generated_tokens) == (direct.figures.prompt_tokens, direct.figures.generated_tokens)
    assert f.prefilled_tokens == f.prompt_tokens and f.reused_tokens == 0 and f.resume == "none"
    assert f.finish_reason == direct.figures.finish_reason and f.ttft_ms > 0 and f.decode_tokens_per_s > 0
    assert f.context_used == f.prompt_tokens + f.generated_tokens and f.context_window == 512
    assert remote.info(CHAT_1).tokens == f.context_used


def test_a_chats_salt_reuses_its_prefix_and_other_chats_do_not(remote, keys):
    salt_1, salt_2 = new_cache_salt(), new_cache_salt()
    remote.open(CHAT_1, SessionKind.PINNED, salt_1)
    _, first = turn(remote, CHAT_1, "Hello there!")
    _, again = turn(remote, CHAT_1, "Hello there!")
    assert first.figures.reused_tokens == 0
    assert again.figures.reused_tokens >= 128                  # the server's cache, under this chat's salt
    assert again.text == first.text
    remote.open(CHAT_2, SessionKind.REGULAR, salt_2)
    _, other = turn(remote, CHAT_2, "Hello there!")
    assert other.figures.reused_tokens == 0 and other.text == first.text   # same prompt, other salt: a miss
    # The same salt under another API key is another namespace too (the server's rule).
    eng_b = RemoteEngine(RemoteEndpoint(remote.endpoint.base_url, MODEL, api_key=keys[1]))
    try:
        eng_b.open(CHAT_1, SessionKind.REGULAR, salt_1)
        _, under_b = turn(eng_b, CHAT_1, "Hello there!")
        assert under_b.figures.reused_tokens == 0
    finally:
        eng_b.shutdown()


def test_temporary_chats_never_share_a_cached_prefix(remote):
    remote.open(TEMP_1, SessionKind.TEMPORARY)
    _, a1 = turn(remote, TEMP_1, "Good morning!")
    _, a2 = turn(remote, TEMP_1, "Good morning!")
    assert a2.figures.reused_tokens >= 128                     # within the chat: its memory-only salt
    remote.close(TEMP_1)
    remote.open(TEMP_2, SessionKind.TEMPORARY)
    _, b = turn(remote, TEMP_2, "Good morning!")
    assert b.figures.reused_tokens == 0                        # a new temporary chat: nothing to hit
    remote.open(TEMP_1, SessionKind.TEMPORARY)                 # the same id reopened: a fresh salt
    _, c = turn(remote, TEMP_1, "Good morning!")
    assert c.figures.reused_tokens == 0
    assert "store" not in remote.request_body(TEMP_1, [ChatMessage("user", "x")])


def test_sampling_reaches_the_server(remote):
    remote.open(CHAT_2, SessionKind.REGULAR, new_cache_salt())
    sp = SamplingParams(temperature=0.9, top_p=0.9, seed=11, max_new_tokens=8, top_k=40,
                        repetition_penalty=1.1)
    _, r1 = turn(remote, CHAT_2, "Pick a word.", sampling=sp)
    _, r2 = turn(remote, CHAT_2, "Pick a word.", sampling=sp)
    assert r1.text == r2.text                                  # the seed was sent and honoured
    _, r3 = turn(remote, CHAT_2, "Pick a word.", sampling=SamplingParams(max_new_tokens=3, greedy=True))
    assert r3.figures.generated_tokens <= 3 and r3.figures.finish_reason in ("length", "eos", "stop")


def test_cancel_stops_the_server_and_it_serves_the_next_request(remote):
    remote.open(CHAT_1, SessionKind.REGULAR, new_cache_salt())
    cancel = threading.Event()
    got = []
    for ev in remote.generate(CHAT_1, [ChatMessage("user", "Write a very long story.")],
                              SamplingParams(greedy=True, max_new_tokens=400), cancel):
        if isinstance(ev, TextChunk):
            got.append(ev.text)
            if len(got) == 2:
                cancel.set()
        else:
            result = ev
    assert result.figures.finish_reason == "cancelled" and len(got) < 400
    chunks, after = turn(remote, CHAT_1, "Hello there!")
    assert chunks and after.figures.finish_reason in ("length", "eos")


def test_errors_from_amber_are_one_line(server, keys):
    with pytest.raises(RemoteError, match=r"answered 401 \(the API key was refused\)"):
        RemoteEngine(RemoteEndpoint(server.url, MODEL, api_key="wrong-key-" + "9" * 20))
    with pytest.raises(RemoteError, match=r"answered 401 \(no API key was given\)"):
        RemoteEngine(RemoteEndpoint(server.url, MODEL))
    with pytest.raises(RemoteError, match=rf"does not serve model 'gpt-9' \(it serves: {MODEL}\)"):
        RemoteEngine(RemoteEndpoint(server.url, "gpt-9", api_key=keys[0]))
    eng = RemoteEngine(RemoteEndpoint(server.url, MODEL, api_key=keys[0]))
    eng.open(CHAT_1, SessionKind.REGULAR, new_cache_salt())
    try:
        eng.endpoint.model = "gpt-9"         # the server itself refuses an unknown model
        with pytest.raises(RemoteError, match=r"404") as e:
            turn(eng, CHAT_1, "hi")
        assert "\n" not in str(e.value)
        eng.endpoint.model = MODEL
        with pytest.raises(RemoteError, match=r"\((400|413)\)"):
            turn(eng, CHAT_1, "word " * 5000)   # longer than the context window
    finally:
        eng.shutdown()


def _long_chat(turns: int) -> list[ChatMessage]:
    msgs = [ChatMessage("system", "You are terse.")]
    for i in range(turns):
        msgs += [ChatMessage("user", f"Question {i}: " + "tell me about the lazy dog " * 6),
                 ChatMessage("assistant", f"Answer {i}: " + "the quick brown fox " * 6)]
    return msgs + [ChatMessage("user", "Last question?")]


def test_a_chat_longer_than_the_servers_window_follows_the_overflow_policy(remote):
    from engine.api import OverflowPolicy
    remote.open(CHAT_1, SessionKind.REGULAR, new_cache_salt())
    msgs = _long_chat(12)                      # well over the tiny model's 512 tokens
    events = list(remote.generate(CHAT_1, msgs, SamplingParams(greedy=True, max_new_tokens=8)))
    f = events[-1].figures
    assert f.dropped_messages > 0 and f.prompt_tokens < 512 and f.finish_reason in ("length", "eos")
    kept = remote.request_body(CHAT_1, msgs[:1] + msgs[1 + f.dropped_messages:])["messages"]
    assert kept[0]["role"] == "system" and kept[-1]["content"] == "Last question?"
    with pytest.raises(RemoteError, match=r"longer than the model's context window"):
        list(remote.generate(CHAT_1, msgs, SamplingParams(greedy=True, max_new_tokens=8,
                                                          overflow=OverflowPolicy.STOP.value)))
    rolled = list(remote.generate(CHAT_1, msgs, SamplingParams(greedy=True, max_new_tokens=8,
                                                               overflow=OverflowPolicy.ROLLING.value)))
    assert rolled[-1].figures.dropped_messages > f.dropped_messages - 1
