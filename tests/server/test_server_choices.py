"""`n` choices through the official `openai` client against an in-process server over a real
SessionManager on the tiny model: the request's prompt is prefilled once (the engine's own count of
prefilled tokens grows by the prompt, not n times it), its choices decode as one batch, and each
choice has its index, finish reason and text; usage counts the prompt once and every choice's
tokens; greedy choices are the n=1 reply."""
from __future__ import annotations

from typing import Iterator

import openai
import pytest

MODEL = "tiny-chat"


@pytest.fixture
def served(tiny_model, tmp_path) -> Iterator[tuple[openai.OpenAI, object]]:
    from engine.server import serve_in_thread
    from engine.sessions.manager import SessionManager
    manager = SessionManager(tiny_model, tmp_path / "state")
    handle = serve_in_thread(manager, "127.0.0.1", 0)
    try:
        yield openai.OpenAI(base_url=handle.url, api_key="unused", max_retries=0, timeout=120), manager
    finally:
        handle.stop()
        manager.shutdown()


def prefilled(manager) -> int:
    return int(manager.stats()["prefilled_tokens"])


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_chat_choices_prefill_once_and_equal_the_single_reply(served):
    client, manager = served
    batcher = manager.generator.runner.batcher
    before, steps = prefilled(manager), batcher.batched_steps
    r = client.chat.completions.create(model=MODEL, messages=ask("Tell me about rivers."), n=3,
                                       max_tokens=12, temperature=0)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert prefilled(manager) - before == r.usage.prompt_tokens > 0          # once, not 3 times
    assert r.model_extra["amber"]["prefilled_tokens"] == r.usage.prompt_tokens
    assert batcher.batched_steps > steps          # the choices' steps ran as batches
    one = client.chat.completions.create(model=MODEL, messages=ask("Tell me about rivers."), n=1,
                                         max_tokens=12, temperature=0)
    assert [c.message.content for c in r.choices] == [one.choices[0].message.content] * 3
    assert [c.finish_reason for c in r.choices] == [one.choices[0].finish_reason] * 3
    assert r.usage.prompt_tokens == one.usage.prompt_tokens
    assert r.usage.completion_tokens == 3 * one.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_streamed_chat_choices(served):
    client, manager = served
    one = client.chat.completions.create(model=MODEL, messages=ask("What is a lantern?"), max_tokens=10,
                                         temperature=0)
    text = "Why is the sky blue, then?"     # a prompt of its own: nothing of it cached yet
    before = prefilled(manager)
    chunks = list(client.chat.completions.create(model=MODEL, messages=ask(text), n=3, max_tokens=10,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    texts: dict[int, str] = {}
    reasons: dict[int, str] = {}
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] = texts.get(ch.index, "") + (ch.delta.content or "")
            if ch.finish_reason:
                assert ch.index not in reasons
                reasons[ch.index] = ch.finish_reason
    assert sorted(texts) == sorted(reasons) == [0, 1, 2]
    usage = chunks[-1].usage
    assert prefilled(manager) - before == usage.prompt_tokens
    alone = client.chat.completions.create(model=MODEL, messages=ask(text), max_tokens=10, temperature=0)
    assert texts == {i: alone.choices[0].message.content for i in range(3)}
    assert reasons == {i: alone.choices[0].finish_reason for i in range(3)}
    assert usage.completion_tokens == 3 * alone.usage.completion_tokens
    assert one.usage.completion_tokens > 0


def test_completion_choices_seeded_and_streamed(served):
    client, manager = served
    kw = dict(model=MODEL, prompt="Once upon a time", n=3, max_tokens=12, temperature=1.5, top_p=1, seed=21)
    before = prefilled(manager)
    first = client.completions.create(**kw)
    assert prefilled(manager) - before == first.usage.prompt_tokens
    assert [c.index for c in first.choices] == [0, 1, 2]
    texts = [c.text for c in first.choices]
    assert len(set(texts)) > 1                   # each choice its own draw (the seed plus its index)
    again = client.completions.create(**kw)
    assert [c.text for c in again.choices] == texts
    # Choice i draws as an n=1 request with seed + i does.
    single = client.completions.create(**{**kw, "n": 1, "seed": 23})
    assert single.choices[0].text == texts[2]
    streamed: dict[int, str] = {}
    finished: list[int] = []
    for c in client.completions.create(**kw, stream=True):
        for ch in c.choices:
            streamed[ch.index] = streamed.get(ch.index, "") + ch.text
            if ch.finish_reason:
                finished.append(ch.index)
    assert streamed == dict(enumerate(texts)) and sorted(finished) == [0, 1, 2]
    assert first.usage.completion_tokens == sum(
        client.completions.create(**{**kw, "n": 1, "seed": 21 + i}).usage.completion_tokens for i in range(3))


def test_a_prompt_too_long_for_choices_is_a_400_and_nothing_is_left_open(served):
    client, manager = served
    before = prefilled(manager)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=[5 + i % 400 for i in range(600)], n=3, max_tokens=4)
    assert e.value.code == "context_length_exceeded"
    assert prefilled(manager) == before and manager.stats()["open_sessions"] == 0

