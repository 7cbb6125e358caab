"""An engine error after a stream has started (the model's graph failing mid-decode) reaches the
client as the spec's error event: a `data: {"error": ...}` chunk in a chat stream (the `openai`
client raises it), an `error` event in a Responses stream (the client yields it typed). An
in-process server over the real SessionManager whose generations fail after their first piece."""
from __future__ import annotations

import openai
import pytest

from engine.api import TextChunk
from engine.runtime.model import ModelRunError
from engine.server import serve_in_thread
from engine.sessions.manager import SessionManager

MODEL = "tiny-chat"


class FailsAfterFirstPiece:
    """The real SessionManager, its generations raising the engine's ModelRunError (what ORT's
    failure on a crafted graph becomes) once their first text piece is out."""

    def __init__(self, manager: SessionManager) -> None:
        self._m = manager

    def __getattr__(self, name):
        return getattr(self._m, name)

    def generate_tokens(self, sid, prompt, sampling=None, cancel=None):
        for event in self._m.generate_tokens(sid, prompt, sampling, cancel):
            yield event
            if isinstance(event, TextChunk) and event.text:
                raise ModelRunError("model.onnx", RuntimeError("MatMul: shapes do not match"))


@pytest.fixture
def client(tiny_model, tmp_path):
    manager = SessionManager(tiny_model, tmp_path / "state")
    handle = serve_in_thread(FailsAfterFirstPiece(manager), "127.0.0.1", 0, state_dir=tmp_path / "state")
    yield openai.OpenAI(base_url=handle.url, api_key="unused", max_retries=0, timeout=120)
    handle.stop()
    manager.shutdown()


def test_chat_stream_ends_with_an_error_the_client_raises(client):
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=20, temperature=0, stream=True)
    seen = []
    with pytest.raises(openai.APIError, match="MatMul: shapes do not match"):
        for chunk in stream:
            seen.append(chunk)
    assert seen and seen[0].choices[0].delta.role == "assistant"


def test_responses_stream_ends_with_a_typed_error_event(client):
    events = list(client.responses.create(model=MODEL, input="Hi", max_output_tokens=20, temperature=0,
                                          store=False, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and "response.output_text.delta" in kinds
    assert kinds[-1] == "error" and "response.completed" not in kinds
    error = events[-1]
    assert error.code == "model_error" and "MatMul: shapes do not match" in error.message and error.param is None
