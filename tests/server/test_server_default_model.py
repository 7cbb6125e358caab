"""The real default model (SmolLM2-135M-Instruct) behind the server: a sensible reply, and a stored
chain whose last reply's own tokens are reused after a restart (its text re-tokenizes the same)."""
from __future__ import annotations

import openai
import pytest

from tests.support.server import DEFAULT_MODEL

pytestmark = pytest.mark.slow


def test_default_model_chat_and_chain_resume(default_model_dir, tmp_path, start_server):
    state = tmp_path / "state"
    s = start_server(default_model_dir, state)
    c = openai.OpenAI(base_url=s.url, api_key="unused", max_retries=0, timeout=300)
    r = c.completions.create(model=DEFAULT_MODEL, prompt="The capital of France is", max_tokens=4, temperature=0)
    assert "Paris" in r.choices[0].text
    chat = c.chat.completions.create(model=DEFAULT_MODEL, messages=[{"role": "user", "content": "Say hello."}],
                                     max_tokens=16, temperature=0)
    assert chat.choices[0].message.content.strip()
    # Two chains with the same first turn under different cache salts, so neither borrows the
    # other's KV: chain A is continued after a restart (from disk), chain B live in this server.
    first = dict(model=DEFAULT_MODEL, input="My name is Ada. Please remember it.", max_output_tokens=24,
                 temperature=0)
    r1 = c.responses.create(**first, extra_body={"cache_salt": "chain-a"})
    r1b = c.responses.create(**first, extra_body={"cache_salt": "chain-b"})
    assert r1b.output_text == r1.output_text
    a1 = r1.model_extra["amber"]
    follow = dict(model=DEFAULT_MODEL, input="What is my name?", max_output_tokens=12, temperature=0)
    live = c.responses.create(**follow, previous_response_id=r1b.id, extra_body={"cache_salt": "chain-b"})
    assert live.model_extra["amber"]["resume"] == "memory"
    assert s.stop() == 0

    s2 = start_server(default_model_dir, state)
    c = openai.OpenAI(base_url=s2.url, api_key="unused", max_retries=0, timeout=300)
    r2 = c.responses.create(**follow, previous_response_id=r1.id, extra_body={"cache_salt": "chain-a"})
    a2 = r2.model_extra["amber"]
    assert a2["resume"] == "disk" and a2["session_id"] == a1["session_id"]
    # Everything but the last sampled token (whose KV is never computed) came from disk.
    assert a2["reused_tokens"] >= a1["prompt_tokens"] + a1["generated_tokens"] - 1
    assert a2["prefilled_tokens"] <= 20
    # Greedy: the chain resumed from disk says exactly what the same chain said while still live
    # (the KV read back is the KV that was computed; which name the model recalls depends on the
    # CPU's kernels, so the reply is compared, not guessed).
    assert r2.output_text.strip() and r2.output_text == live.output_text
