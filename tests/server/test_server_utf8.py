"""A reply cut at `max_tokens` inside a multi-byte character, through the API (a real in-process
server over a real SessionManager on the tiny model, the official `openai` client): the text
ends before the broken character, streamed or not, and never carries U+FFFD."""
from __future__ import annotations

import threading
from typing import Iterator

import pytest

from engine.api import GenerationResult
from engine.server import serve_in_thread
from engine.sessions.manager import SessionManager

MODEL = "tiny-chat"
FFFD = "\ufffd"


class Recording:
    """The real SessionManager; keeps each generation's token ids (the API does not return them)."""

    def __init__(self, manager: SessionManager) -> None:
        self._m = manager
        self.results: list[GenerationResult] = []
        self.lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self._m, name)

    def generate_tokens(self, sid, prompt, sampling=None, cancel=None):
        for event in self._m.generate_tokens(sid, prompt, sampling, cancel):
            if isinstance(event, GenerationResult):
                with self.lock:
                    self.results.append(event)
            yield event


@pytest.fixture
def client(tiny_model, tmp_path) -> Iterator:
    import openai

    m = SessionManager(tiny_model, tmp_path / "state")
    engine = Recording(m)
    handle = serve_in_thread(engine, "127.0.0.1", 0)
    try:
        yield engine, openai.OpenAI(base_url=f"http://127.0.0.1:{handle.port}/v1", api_key="none",
                                    max_retries=0, timeout=120)
    finally:
        handle.stop()
        m.shutdown()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_reply_cut_inside_a_character_ends_before_it(client, tiny_model, stream):
    engine, api = client
    decode = tiny_model.tokenizer.decode
    for seed in range(100):
        kw = dict(model=MODEL, prompt="Hello", max_tokens=3, temperature=2.0, top_p=1.0, seed=seed)
        if stream:
            text = "".join(c.choices[0].text for c in api.completions.create(stream=True, **kw))
        else:
            out = api.completions.create(**kw)
            assert out.choices[0].finish_reason == "length"
            text = out.choices[0].text
        ids = engine.results[-1].token_ids
        assert FFFD not in text, (seed, ids)
        assert text == decode(ids).replace(FFFD, "")
        if decode(ids).endswith(FFFD):      # this reply was cut inside a character
            return
    pytest.fail("no reply cut mid-character in 100 seeds")
