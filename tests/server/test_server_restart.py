"""A stored response chain is a pinned Amber session: it resumes after a server restart from the KV
on disk, with no prefill of its history."""
from __future__ import annotations

import openai

from tests.support.server import KEY_A, KEY_B

MODEL = "tiny-chat"
INSTRUCTIONS = " ".join(f"Guideline {i}: answer briefly and kindly." for i in range(8))


def client(server, key: str = KEY_A) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key=key, max_retries=0, timeout=120)


def test_chain_resumes_from_disk_after_a_restart(tiny_dir, tmp_path, start_server):
    state = tmp_path / "state"
    first_server = start_server(tiny_dir, state, "--api-key", KEY_A, "--api-key", KEY_B)
    c = client(first_server)
    r1 = c.responses.create(model=MODEL, instructions=INSTRUCTIONS, input="My name is Ada.",
                            max_output_tokens=10, temperature=0)
    r2 = c.responses.create(model=MODEL, instructions=INSTRUCTIONS, input="I like tea.",
                            previous_response_id=r1.id, max_output_tokens=10, temperature=0)
    a2 = r2.model_extra["amber"]
    assert a2["resume"] == "memory" and a2["reused_tokens"] > 0
    # Reference: what the third turn computes on the server that never stopped (a branch of r2).
    live = c.responses.create(model=MODEL, instructions=INSTRUCTIONS, input="What is my name?",
                              previous_response_id=r2.id, max_output_tokens=10, temperature=0, store=False)
    assert first_server.stop() == 0                 # SIGTERM: graceful, the pinned session is saved

    second_server = start_server(tiny_dir, state, "--api-key", KEY_A, "--api-key", KEY_B)
    c = client(second_server)
    assert c.responses.retrieve(r2.id).output_text == r2.output_text
    r3 = c.responses.create(model=MODEL, instructions=INSTRUCTIONS, input="What is my name?",
                            previous_response_id=r2.id, max_output_tokens=10, temperature=0)
    a3 = r3.model_extra["amber"]
    assert a3["session_id"] == a2["session_id"]
    assert a3["resume"] == "disk" and a3["resume_ms"] > 0
    # The whole history came from disk: only the new user turn (and the last reply, as far as its
    # re-tokenized text differs from the sampled tokens: the tiny model's gibberish often does) is
    # prefilled. The slow test on the real model checks the reply's tokens are reused too.
    assert a3["reused_tokens"] >= a2["prompt_tokens"]
    assert a3["prefilled_tokens"] <= a3["prompt_tokens"] - a2["prompt_tokens"]
    assert a3["prefilled_tokens"] * 4 < a3["prompt_tokens"]
    assert r3.usage.input_tokens_details.cached_tokens == a3["reused_tokens"]
    # Greedy, so the resumed chain answers exactly as the uninterrupted server did.
    assert r3.output_text == live.output_text
    # The chain is still private to key A after the restart.
    try:
        client(second_server, KEY_B).responses.retrieve(r3.id)
        raise AssertionError("key B read key A's response")
    except openai.NotFoundError:
        pass
    # Deleting the chain's responses deletes its session (manifest and KV).
    sessions = state / "sessions"
    assert (sessions / f"{a3['session_id']}.json").is_file()
    for r in (r3, r2, r1):
        c.responses.delete(r.id)
    assert not (sessions / f"{a3['session_id']}.json").exists()
