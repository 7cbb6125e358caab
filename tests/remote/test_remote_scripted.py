"""RemoteEngine against a scripted server on 127.0.0.1: what is sent, figures, and error paths."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from engine.api import ChatMessage, GenerationResult, SamplingParams, SessionKind, SessionNotOpen, TextChunk
from engine.remote.engine import RemoteEndpoint, RemoteEngine, RemoteError, detect_flavor, list_models
from engine.remote.http import normalize_base_url

from tests.support.raw_openai_server import RawServer

MSGS = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")]
SID = "0b6f2a52-3c1e-4a55-9d8e-1f0c1d7e2a10"


@pytest.fixture
def server():
    s = RawServer()
    yield s
    s.stop()


def run(engine: RemoteEngine, sid: str = SID, sampling: SamplingParams | None = None, cancel=None):
    events = list(engine.generate(sid, MSGS, sampling, cancel))
    assert isinstance(events[-1], GenerationResult)
    return [e.text for e in events if isinstance(e, TextChunk)], events[-1]


def posts(server: RawServer) -> list[dict]:
    return [r for r in server.requests if r["body"] is not None]


def test_streams_text_and_takes_the_servers_figures(server):
    eng = RemoteEngine(RemoteEndpoint(server.base_url, "m"))
    assert eng.flavor == "llamacpp" and eng.model_name == "m"
    eng.open(SID, SessionKind.REGULAR, "salt-not-used-by-llamacpp")
    chunks, result = run(eng)
    assert chunks == ["Hel", "lo", " wörld"] and result.text == "Hello wörld"
    f = result.figures
    assert (f.prompt_tokens, f.reused_tokens, f.prefilled_tokens, f.generated_tokens) == (17, 5, 12, 3)
    assert f.prefill_ms == 34.5 and f.decode_tokens_per_s == 41.0
    assert f.finish_reason == "length" and f.context_used == 20 and f.ttft_ms > 0
    assert "llama.cpp" in f.provider and "127.0.0.1" in f.provider
    assert eng.info(SID).tokens == 20
    eng.shutdown()


def test_llamacpp_gets_cache_prompt_and_its_own_sampling_names(server):
    eng = RemoteEngine(RemoteEndpoint(server.base_url, "m"))
    eng.open(SID, SessionKind.PINNED, "s" * 43)
    run(eng, sampling=SamplingParams(temperature=0.5, top_p=0.8, top_k=30, repetition_penalty=1.2,
                                     max_new_tokens=9, seed=4, stop=["\n\n"]))
    body = posts(server)[-1]["body"]
    assert body["cache_prompt"] is True and "cache_salt" not in body and "store" not in body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["top_k"], body["seed"],
            body["repeat_penalty"], body["stop"]) == (9, 0.5, 0.8, 30, 4, 1.2, ["\n\n"])
    assert body["messages"] == [m.to_dict() for m in MSGS]
    tmp = "7d0c3d0e-5a4e-4f51-8f0e-0a6b1c2d3e4f"
    eng.open(tmp, SessionKind.TEMPORARY)
    run(eng, tmp)
    assert posts(server)[-1]["body"]["cache_prompt"] is False
    eng.shutdown()


def test_vllm_gets_the_chats_salt_and_temporary_chats_a_throwaway_one():
    s = RawServer(models=[{"id": "big", "owned_by": "vllm", "max_model_len": 32768}])
    try:
        eng = RemoteEngine(RemoteEndpoint(s.base_url, "big"))
        assert eng.flavor == "vllm" and eng.context_window == 32768
        salt = "A" * 43
        assert eng.open(SID, SessionKind.REGULAR, salt).cache_salt == salt
        run(eng, sampling=SamplingParams(top_k=20, repetition_penalty=1.1))
        run(eng)
        b1, b2 = posts(s)[-2]["body"], posts(s)[-1]["body"]
        assert b1["cache_salt"] == b2["cache_salt"] == salt and "cache_prompt" not in b1
        assert b1["top_k"] == 20 and b1["repetition_penalty"] == 1.1 and "store" not in b1
        tmp = "7d0c3d0e-5a4e-4f51-8f0e-0a6b1c2d3e4f"
        info = eng.open(tmp, SessionKind.TEMPORARY, salt)      # a stored salt is never used for it
        assert info.cache_salt is None
        run(eng, tmp)
        first = posts(s)[-1]["body"]["cache_salt"]
        assert first != salt and len(first) >= 43
        run(eng, tmp)
        assert posts(s)[-1]["body"]["cache_salt"] == first    # reused within the chat only
        eng.close(tmp)
        eng.open(tmp, SessionKind.TEMPORARY)
        run(eng, tmp)
        assert posts(s)[-1]["body"]["cache_salt"] not in (first, salt)
        eng.shutdown()
    finally:
        s.stop()


def test_plain_openai_servers_get_standard_fields_only():
    s = RawServer(models=[{"id": "gpt", "owned_by": "system"}])
    try:
        eng = RemoteEngine(RemoteEndpoint(s.base_url, "gpt", api_key="sk-secret"))
        assert eng.flavor == "openai"
        eng.open(SID, SessionKind.REGULAR, "x" * 43)
        run(eng, sampling=SamplingParams(top_k=40, repetition_penalty=1.1, min_p=0.1))
        req = posts(s)[-1]
        extras = {"cache_salt", "cache_prompt", "top_k", "min_p", "repetition_penalty", "store", "user"}
        assert not extras & set(req["body"])
        assert req["headers"]["Authorization"] == "Bearer sk-secret"
        assert "sk-secret" not in repr(eng.endpoint) and "sk-secret" not in str(eng.stats())
        eng.shutdown()
    finally:
        s.stop()


def test_flavor_detection_and_addresses():
    assert detect_flavor([{"id": "a", "owned_by": "vllm"}]) == "vllm"
    assert detect_flavor([{"id": "a", "owned_by": "me"}]) == "llamacpp"
    assert detect_flavor([{"id": "a", "owned_by": "amber"}]) == "amber"
    assert detect_flavor([{"id": "a", "owned_by": "library"}]) == "openai"
    assert normalize_base_url("localhost:8000") == "http://localhost:8000/v1"
    assert normalize_base_url("https://h.example/api/v1/") == "https://h.example/api/v1"
    for bad in ("ftp://x/v1", "http://", "", "http://h:99999/v1"):
        with pytest.raises(RemoteError):
            normalize_base_url(bad)


def test_unknown_model_names_what_the_server_has(server):
    with pytest.raises(RemoteError, match=r"does not serve model 'nope' \(it serves: m\)"):
        RemoteEngine(RemoteEndpoint(server.base_url, "nope"))
    assert [m["id"] for m in list_models(RemoteEndpoint(server.base_url, ""))] == ["m"]
    assert RemoteEngine(RemoteEndpoint(server.base_url, "")).model_name == "m"   # empty: the first


def test_refused_connection_is_one_line():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(RemoteError) as e:
        RemoteEngine(RemoteEndpoint(f"http://127.0.0.1:{port}/v1", "m"))
    assert str(e.value).startswith(f"cannot reach 127.0.0.1:{port}") and "\n" not in str(e.value)


@pytest.mark.parametrize("mode, pattern", [
    ("401", r"answered 401 \(the API key was refused\): Invalid API key \[key\]$"),
    ("404", r"answered 404 .*unknown model 'm'.*does not exist"),
    ("500", r"failed with a server error \(500\): Internal Server Error"),
    ("garbage", r"an event from 127\.0\.0\.1:\d+ is not JSON"),
    ("html", r"reply is not JSON"),
    ("huge_line", r"line longer than 1024 KiB"),
    ("error_event", r"reported an error: out of memory on the GPU"),
    ("cut", ""),
])
def test_error_replies_become_one_clear_message(server, mode, pattern):
    eng = RemoteEngine(RemoteEndpoint(server.base_url, "m", api_key="sk-very-secret"))
    eng.open(SID)
    server.behaviour = mode
    if mode == "cut":      # ends without finish_reason or [DONE]: what arrived, then the error
        got = []
        with pytest.raises(RemoteError, match=r"ended the reply without finishing it|closed the connection"):
            for ev in eng.generate(SID, MSGS):
                got.append(ev.text)
        assert got == ["partial"]
        return
    with pytest.raises(RemoteError, match=pattern) as e:
        run(eng)
    assert "\n" not in str(e.value) and "\x1b" not in str(e.value) and "very-secret" not in str(e.value)
    eng.shutdown()


def test_missing_key_is_named(server):
    server.behaviour = "401"
    with pytest.raises(RemoteError, match=r"401 \(no API key was given\)"):
        RemoteEngine(RemoteEndpoint(server.base_url, "m"))


def test_a_server_that_ignores_stream_still_answers(server):
    eng = RemoteEngine(RemoteEndpoint(server.base_url, "m"))
    eng.open(SID)
    server.behaviour = "json"
    chunks, result = run(eng)
    assert chunks == ["whole reply"] and result.figures.prompt_tokens == 7
    assert result.figures.finish_reason == "eos"
    eng.shutdown()


def test_silent_server_times_out(server):
    eng = RemoteEngine(RemoteEndpoint(server.base_url, "m", read_timeout_s=0.5))
    eng.open(SID)
    server.behaviour = "silent"
    got: list[str] = []
    with pytest.raises(RemoteError, match=r"sent nothing for 0\.5 s \(timed out\)"):
        for ev in eng.generate(SID, MSGS):
            if isinstance(ev, TextChunk):
                got.append(ev.text)
    assert got == ["one"]
    eng.shutdown()


def test_cancel_cuts_a_silent_stream_and_the_server_sees_it(server):
    eng = RemoteEngine(RemoteEndpoint(server.base_url, "m"))
    eng.open(SID)
    server.behaviour = "silent"
    cancel = threading.Event()
    events = []
    for ev in eng.generate(SID, MSGS, cancel=cancel):
        events.append(ev)
        if isinstance(ev, TextChunk):
            cancel.set()
    assert isinstance(events[-1], GenerationResult)
    assert events[-1].figures.finish_reason == "cancelled" and events[-1].text == "one"
    for _ in range(100):            # the handler notices the closed connection
        if server.disconnects:
            break
        time.sleep(0.05)
    assert server.disconnects
    eng.shutdown()


@pytest.mark.parametrize("body", [
    b'{"error": {"message": "This model\'s maximum context length is 4096 tokens. '
    b'However, you requested 5000 tokens", "code": 400}}',
    b'{"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", '
    b'"type": "exceed_context_size_error"}}',
    b'{"error": {"message": "the prompt has 635 tokens; this server accepts at most 511", '
    b'"code": "context_length_exceeded"}}',
])
def test_servers_ways_of_saying_too_long_are_recognised(body):
    from engine.remote.http import ContextOverflow, status_error
    ep = RemoteEndpoint("http://127.0.0.1:1/v1", "m")
    assert isinstance(status_error(ep, 400, body, "/chat/completions"), ContextOverflow)
    assert not isinstance(status_error(ep, 400, b'{"error": {"message": "temperature must be <= 2"}}', "x"),
                          ContextOverflow)


def test_clear_cache_forgets_every_session_but_the_pinned_ones():
    """The server owns its cache; clearing forgets the sessions' salts (pinned chats keep theirs),
    so a temporary chat is sent under a new salt and the server's cache of it is not used again."""
    eng = RemoteEngine(RemoteEndpoint("http://127.0.0.1:9/v1", "m", flavor="vllm"), connect=False)
    pinned, regular, temp = (f"00000000-0000-4000-8000-00000000000{i}" for i in (1, 2, 3))
    eng.open(pinned, SessionKind.PINNED, "salt-p")
    eng.open(regular, SessionKind.REGULAR, "salt-r")
    eng.open(temp, SessionKind.TEMPORARY)
    msgs = [ChatMessage("user", "hi")]
    temp_salt = eng.request_body(temp, msgs, SamplingParams())["cache_salt"]
    assert eng.stats()["open_sessions"] == 3
    assert eng.clear_cache() == 0
    assert eng.stats()["open_sessions"] == 1
    assert eng.info(pinned).cache_salt == "salt-p" and eng.info(pinned).kind == SessionKind.PINNED
    with pytest.raises(SessionNotOpen):                # forgotten: reopened with its stored salt
        eng.info(regular)
    eng.open(temp, SessionKind.TEMPORARY)
    assert eng.request_body(temp, msgs, SamplingParams())["cache_salt"] not in (temp_salt, None)
