"""The official `openai` client, sync and streaming, against a real `amber-engine serve` process on
the tiny model: logprobs (checked against the engine's raw logits), logit_bias, stop, n, the
Responses input items and usage, system_fingerprint, and the embeddings answer."""
from __future__ import annotations

import math

import numpy as np
import openai
import pytest

MODEL = "tiny-chat"
PROMPT = "Tell me about rivers."


def messages(text: str = PROMPT) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def chat(client, text: str = PROMPT, **kw):
    kw.setdefault("max_tokens", 10)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=MODEL, messages=messages(text), **kw)


def raw_greedy(tiny_model, prompt_ids: list[int], steps: int) -> list[tuple[int, float, np.ndarray]]:
    """(argmax id, its log-softmax, the whole log-softmax) at each greedy step, from the engine's
    runner directly (no server, no sampler)."""
    from engine.runtime.runner import Runner
    runner = Runner(tiny_model)
    cache = runner.new_cache()
    logits = runner.forward(cache, list(prompt_ids))
    out = []
    for _ in range(steps):
        z = np.asarray(logits, np.float64)
        logsm = z - (z.max() + np.log(np.exp(z - z.max()).sum()))
        token = int(np.argmax(z))
        out.append((token, float(logsm[token]), logsm))
        if token in tiny_model.eos_token_ids:
            break
        logits = runner.forward(cache, [token])
    return out


def test_chat_logprobs_are_the_models_own(client_a, tiny_model):
    from engine.generation.generate import Generator
    from engine.api import ChatMessage
    from engine.text.logprobs import TokenBytes
    r = chat(client_a, logprobs=True, top_logprobs=5, max_tokens=8)
    choice = r.choices[0]
    content = choice.logprobs.content
    assert content and len(content) == r.usage.completion_tokens
    # every sampled token is reported; the text keeps only whole characters (a reply cut inside one,
    # or stray bytes, never shows U+FFFD), so the bytes decode to it with the broken ones left out
    assert b"".join(bytes(e.bytes) for e in content).decode("utf-8", "ignore") == choice.message.content
    for e in content:
        assert e.logprob <= 0
        assert len(e.top_logprobs) == 5
        tops = [t.logprob for t in e.top_logprobs]
        assert tops == sorted(tops, reverse=True) and all(t <= 0 for t in tops)
        assert sum(math.exp(t) for t in tops) <= 1 + 1e-9
        # greedy: the chosen token is the most likely one
        assert e.logprob == e.top_logprobs[0].logprob and e.bytes == e.top_logprobs[0].bytes
    # The same values from the engine's raw logits for the same prompt.
    prompt = Generator(tiny_model).encode_chat([ChatMessage("user", PROMPT)])
    steps = raw_greedy(tiny_model, prompt, len(content))
    token_bytes = TokenBytes(tiny_model.tokenizer)
    for e, (token, logprob, logsm) in zip(content, steps, strict=True):
        assert bytes(e.bytes) == token_bytes(token)
        assert e.logprob == pytest.approx(logprob, abs=1e-4)
        second = np.sort(logsm)[-2]
        assert e.top_logprobs[1].logprob == pytest.approx(second, abs=1e-4)
    # Without logprobs: none, as before.
    assert chat(client_a, max_tokens=2).choices[0].logprobs is None


def test_streamed_logprobs_equal_the_whole_ones(client_a):
    whole = chat(client_a, logprobs=True, top_logprobs=2, max_tokens=12)
    chunks = list(chat(client_a, logprobs=True, top_logprobs=2, max_tokens=12, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in whole.choices[0].logprobs.content]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in whole.choices[0].logprobs.content],
                                                          abs=1e-4)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content


def test_completions_logprobs_in_the_legacy_shape(client_a):
    kw = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "logprobs": 3}
    r = client_a.completions.create(**kw)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert len(lp.tokens) == r.usage.completion_tokens
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert logprob <= 0 and token in top and top[token] == logprob
        assert 1 <= len(top) <= 4 and max(top.values()) == logprob      # greedy: the best one
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-9
    chunks = list(client_a.completions.create(**kw, stream=True))
    tokens = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
    offsets = [o for c in chunks if c.choices and c.choices[0].logprobs for o in c.choices[0].logprobs.text_offset]
    assert tokens == lp.tokens and offsets == lp.text_offset
    assert client_a.completions.create(**{**kw, "logprobs": None}).choices[0].logprobs is None


def test_logit_bias_bans_and_forces_tokens(client_a, tiny_model):
    base = chat(client_a, logprobs=True, max_tokens=6)
    first = base.choices[0].logprobs.content[0]
    from engine.text.logprobs import TokenBytes
    token_bytes = TokenBytes(tiny_model.tokenizer)
    vocab = tiny_model.tokenizer.get_vocab_size(with_added_tokens=True)
    first_id = next(i for i in range(vocab) if token_bytes(i) == bytes(first.bytes))
    banned = chat(client_a, logprobs=True, max_tokens=6, logit_bias={str(first_id): -100})
    assert banned.choices[0].logprobs.content[0].bytes != first.bytes
    # The logprobs stay the model's own: the banned token is still reported as the likeliest.
    assert banned.choices[0].logprobs.content[0].top_logprobs == [] and \
        banned.choices[0].logprobs.content[0].logprob < first.logprob
    forced_id = tiny_model.tokenizer.token_to_id("a")
    forced = chat(client_a, max_tokens=4, logit_bias={str(forced_id): 100})
    assert forced.choices[0].message.content == "a" * 4
    streamed = chat(client_a, max_tokens=4, logit_bias={str(forced_id): 100}, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == "a" * 4
    for bias, needle in [({"abc": 1}, "logit_bias"), ({"5": 101}, "logit_bias"), ({str(vocab): 1}, "vocabulary"),
                         ({"5": "x"}, "logit_bias")]:
        with pytest.raises(openai.BadRequestError) as e:
            chat(client_a, logit_bias=bias)
        assert needle in e.value.message


def test_stop_takes_up_to_sixteen_strings(client_a):
    whole = chat(client_a, max_tokens=16).choices[0].message.content
    cut = whole[len(whole) // 2:len(whole) // 2 + 2]
    assert cut.strip()
    stops = [f"never-{i}" for i in range(15)] + [cut]
    r = chat(client_a, max_tokens=16, stop=stops)
    assert r.choices[0].message.content == whole[:whole.index(cut)] and r.choices[0].finish_reason == "stop"
    chunks = list(chat(client_a, max_tokens=16, stop=stops, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == r.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client_a, stop=stops + ["one more"])
    assert "at most 16" in e.value.message
    with pytest.raises(openai.BadRequestError):
        chat(client_a, stop=["x" * 257])


def test_n_choices(client_a):
    greedy = chat(client_a, n=3, max_tokens=8)
    assert [c.index for c in greedy.choices] == [0, 1, 2]
    assert len({c.message.content for c in greedy.choices}) == 1
    assert greedy.choices[0].message.content == chat(client_a, max_tokens=8).choices[0].message.content
    assert greedy.usage.completion_tokens == sum(chat(client_a, max_tokens=8).usage.completion_tokens for _ in range(3))
    sampled = chat(client_a, n=4, max_tokens=12, temperature=1.5, top_p=1, seed=7)
    texts = [c.message.content for c in sampled.choices]
    assert len(set(texts)) > 1                  # each choice its own draw
    again = chat(client_a, n=4, max_tokens=12, temperature=1.5, top_p=1, seed=7)
    assert [c.message.content for c in again.choices] == texts      # a seed makes all of them repeatable
    # Streaming: every chunk says its choice; each choice's text is its own reply.
    chunks = list(chat(client_a, n=3, max_tokens=8, stream=True, stream_options={"include_usage": True}))
    by_index: dict[int, str] = {}
    finished = []
    for c in chunks:
        for ch in c.choices:
            by_index[ch.index] = by_index.get(ch.index, "") + (ch.delta.content or "")
            if ch.finish_reason:
                finished.append(ch.index)
    assert by_index == {i: greedy.choices[0].message.content for i in range(3)}
    assert sorted(finished) == [0, 1, 2]
    assert chunks[-1].usage.completion_tokens == greedy.usage.completion_tokens
    text = client_a.completions.create(model=MODEL, prompt="Once upon", max_tokens=5, temperature=0, n=2)
    assert [c.index for c in text.choices] == [0, 1] and text.choices[0].text == text.choices[1].text
    with pytest.raises(openai.BadRequestError) as e:
        chat(client_a, n=9)
    assert "n is the number of choices, 1 to 8" in e.value.message


def test_system_fingerprint_is_set_everywhere(client_a):
    r = chat(client_a, max_tokens=2)
    assert isinstance(r.system_fingerprint, str) and r.system_fingerprint.startswith("fp_")
    chunks = list(chat(client_a, max_tokens=2, stream=True))
    assert {c.system_fingerprint for c in chunks} == {r.system_fingerprint}
    assert client_a.completions.create(model=MODEL, prompt="x", max_tokens=2).system_fingerprint == \
        r.system_fingerprint


def test_responses_usage_and_input_items(client_a):
    first = client_a.responses.create(model=MODEL, input="Hello there!", max_output_tokens=6, temperature=0)
    details = first.usage.input_tokens_details
    assert details.cached_tokens == 0 and details.cache_write_tokens == first.usage.input_tokens
    assert first.usage.output_tokens_details.reasoning_tokens == 0
    second = client_a.responses.create(model=MODEL, input=[{"role": "user", "content": "And then?"}],
                                       previous_response_id=first.id, max_output_tokens=6, temperature=0)
    items = client_a.responses.input_items.list(second.id)
    assert [(i.role, i.content[0].text) for i in items.data] == [
        ("user", "And then?"), ("assistant", first.output_text), ("user", "Hello there!")]
    assert items.data[0].content[0].type == "input_text" and items.data[1].content[0].type == "output_text"
    assert items.first_id == items.data[0].id and items.last_id == items.data[-1].id and not items.has_more
    page = client_a.responses.input_items.list(second.id, limit=1, order="asc")
    assert page.has_more and [i.content[0].text for i in page.data] == ["Hello there!"]
    # the client follows `after` from page to page
    walked = list(client_a.responses.input_items.list(second.id, limit=1, order="asc"))
    assert [i.id for i in walked] == [i.id for i in reversed(items.data)]
    for bad in ({"limit": 0}, {"limit": 101}, {"order": "up"}, {"after": "msg_nope"}):
        with pytest.raises(openai.BadRequestError):
            client_a.responses.input_items.list(second.id, **bad)
    with pytest.raises(openai.NotFoundError):
        client_a.responses.input_items.list("resp_" + "0" * 48)
    events = list(client_a.responses.create(model=MODEL, input="Hi", max_output_tokens=4, stream=True, store=False))
    for e in events[:2]:
        assert e.type in ("response.created", "response.in_progress")
        assert e.response.usage.input_tokens == 0 and e.response.usage.input_tokens_details.cache_write_tokens == 0
    assert events[-1].response.usage.input_tokens_details.cache_write_tokens == 0     # store: false writes none


def test_embeddings_say_a_chat_model_cannot_serve_them(client_a):
    with pytest.raises(openai.NotFoundError) as e:
        client_a.embeddings.create(model=MODEL, input="hello")
    assert e.value.code == "embeddings_not_supported" and "cannot serve embeddings" in e.value.message


def test_n_choices_are_decoded_together_by_the_batcher(tiny_model, tmp_path):
    from engine.server import serve_in_thread
    from engine.sessions.manager import SessionManager
    manager = SessionManager(tiny_model, tmp_path / "state")
    handle = serve_in_thread(manager, "127.0.0.1", 0)
    try:
        batcher = manager.generator.runner.batcher
        assert manager.batches_decode and batcher is not None
        client = openai.OpenAI(base_url=handle.url, api_key="unused", max_retries=0, timeout=120)
        r = client.chat.completions.create(model=MODEL, messages=messages(), n=4, max_tokens=32, temperature=0)
        assert len({c.message.content for c in r.choices}) == 1
        # Four choices of one generation, stepped as rows of one batch: their steps shared runs.
        assert batcher.batched_steps > 0 and batcher.batched_rows > batcher.batched_steps
        # More choices than the scheduler's places (4): one generation, one place; all finish.
        chunks = list(client.chat.completions.create(model=MODEL, messages=messages(), n=6, max_tokens=6,
                                                     temperature=0, stream=True))
        finished = sorted(ch.index for c in chunks for ch in c.choices if ch.finish_reason)
        assert finished == list(range(6))
    finally:
        handle.stop()
        manager.shutdown()


def test_an_engine_without_token_prompts_refuses_logprobs_and_logit_bias(tmp_path):
    """Served over an engine that takes no token prompts (the GUI tests' fake, as the remote engine):
    what needs the model's tokenizer is a clear 400; n and the fingerprint still work."""
    from engine.server import serve_in_thread
    from tests.support.fake_engine import FakeEngine
    engine = FakeEngine(tmp_path / "fake", delay=0)
    handle = serve_in_thread(engine, "127.0.0.1", 0, state_dir=tmp_path / "state")
    try:
        client = openai.OpenAI(base_url=handle.url, api_key="unused", max_retries=0, timeout=60)
        name = engine.model_name
        for kw, needle in [({"logprobs": True}, "log-probabilities"), ({"logit_bias": {"1": 5}}, "logit_bias")]:
            with pytest.raises(openai.BadRequestError) as e:
                client.chat.completions.create(model=name, messages=messages(), **kw)
            assert needle in e.value.message
        r = client.chat.completions.create(model=name, messages=messages(), n=2)
        assert [c.index for c in r.choices] == [0, 1] and r.system_fingerprint.startswith("fp_")
    finally:
        handle.stop()
        engine.shutdown()
