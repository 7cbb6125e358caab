"""The official `openai` client against a real `amber-engine serve` process on the tiny model."""
from __future__ import annotations

import openai
import pytest

from tests.support.server import KEY_A, KEY_B

MODEL = "tiny-chat"
# A system prompt longer than one KV block (128 tokens), so repeats can reuse cached blocks.
SYSTEM = " ".join(f"Rule {i}: the quick brown fox jumps over the lazy dog." for i in range(10))


def chat(client, text: str = "Hello there!", **kw):
    kw.setdefault("max_tokens", 12)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], **kw)


def test_models_lists_the_served_model(client_a):
    models = client_a.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert client_a.models.retrieve(MODEL).id == MODEL


def test_default_names_whatever_model_is_served(client_a):
    """The README's example asks for "default": it keeps working whichever model is served,
    and the answers name the real model (the one /v1/models lists)."""
    assert client_a.models.retrieve("default").id == MODEL
    assert "default" not in [m.id for m in client_a.models.list().data]
    named = chat(client_a, "Hi", seed=3)
    by_alias = client_a.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hi"}], max_tokens=12, temperature=0, seed=3)
    assert by_alias.model == MODEL and by_alias.choices[0].message.content == named.choices[0].message.content
    with pytest.raises(openai.NotFoundError):
        client_a.chat.completions.create(model="SmolLM2-135M-Instruct", messages=[{"role": "user", "content": "Hi"}])


def test_chat_completion_equals_the_engine_and_reports_usage(client_a, tiny_model, tmp_path):
    from engine.api import ChatMessage, SamplingParams, SessionKind
    from engine.generation.generate import collect
    from engine.sessions.manager import SessionManager
    r = chat(client_a, "What is the capital of France?", max_tokens=16)
    choice = r.choices[0]
    assert r.object == "chat.completion" and r.model == MODEL
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
    # The same greedy reply as the engine gives directly.
    m = SessionManager(tiny_model, tmp_path / "direct")
    try:
        m.open("00000000-0000-0000-0000-000000000001", SessionKind.TEMPORARY)
        direct = collect(m.generate("00000000-0000-0000-0000-000000000001",
                                    [ChatMessage("user", "What is the capital of France?")],
                                    SamplingParams(greedy=True, max_new_tokens=16)))
    finally:
        m.shutdown()
    assert choice.message.content == direct.text
    assert r.usage.prompt_tokens == direct.figures.prompt_tokens
    assert r.usage.completion_tokens == direct.figures.generated_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens == 0
    amber = r.model_extra["amber"]
    assert amber["prefilled_tokens"] == r.usage.prompt_tokens and amber["ttft_ms"] > 0
    assert amber["resume"] == "none"


def test_streaming_chat_equals_the_non_streaming_reply(client_a):
    whole = chat(client_a, "Tell me a story.", max_tokens=20)
    stream = chat(client_a, "Tell me a story.", max_tokens=20, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == whole.choices[0].finish_reason
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage.completion_tokens == whole.usage.completion_tokens
    assert usage.model_extra["amber"]["generated_tokens"] == whole.usage.completion_tokens
    # Without include_usage there is no usage chunk.
    plain = list(chat(client_a, "Tell me a story.", max_tokens=5, stream=True))
    assert all(c.usage is None for c in plain) and all(c.choices for c in plain)


def test_repeated_long_prefix_is_served_from_the_cache(client_a):
    msgs = lambda q: [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]   # noqa: E731
    first = client_a.chat.completions.create(model=MODEL, messages=msgs("First question?"), max_tokens=2,
                                             temperature=0, extra_body={"cache_salt": "prefix-test"})
    second = client_a.chat.completions.create(model=MODEL, messages=msgs("Second question?"), max_tokens=2,
                                              temperature=0, extra_body={"cache_salt": "prefix-test"})
    assert first.usage.prompt_tokens > 256
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= 256 and cached % 128 == 0          # whole blocks of the shared system prompt
    assert second.model_extra["amber"]["prefilled_tokens"] == second.usage.prompt_tokens - cached


def test_the_cache_is_private_to_each_key_and_salt(client_a, client_b):
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Which rule?"}]
    once = lambda c, salt: c.chat.completions.create(   # noqa: E731
        model=MODEL, messages=msgs, max_tokens=1, temperature=0,
        extra_body={} if salt is None else {"cache_salt": salt})
    once(client_a, None)
    assert once(client_a, None).usage.prompt_tokens_details.cached_tokens > 0      # A hits A's cache
    assert once(client_b, None).usage.prompt_tokens_details.cached_tokens == 0     # B does not
    # A caller salt subdivides the key's own namespace only: B cannot reach A's with any salt.
    assert once(client_b, "x").usage.prompt_tokens_details.cached_tokens == 0
    assert once(client_a, "private").usage.prompt_tokens_details.cached_tokens == 0


def test_sampling_options(client_a):
    stop = chat(client_a, "Count: one two three", max_tokens=30)
    text = stop.choices[0].message.content
    assert len(text) > 2
    cut = text[2:4]
    stopped = chat(client_a, "Count: one two three", max_tokens=30, stop=[cut])
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].message.content == text[:text.index(cut)]
    short = chat(client_a, "Count", max_completion_tokens=3)
    assert short.usage.completion_tokens == 3 and short.choices[0].finish_reason == "length"
    seeded = [chat(client_a, "Pick a word", temperature=1.0, top_p=0.9, seed=42, max_tokens=8)
              .choices[0].message.content
              for _ in range(2)]
    assert seeded[0] == seeded[1]
    assert len({chat(client_a, "Pick a word", temperature=1.5, seed=s, max_tokens=8).choices[0].message.content
                for s in range(4)}) > 1
    # Penalties change a greedy reply that repeats itself (the tiny model loops).
    base = chat(client_a, "la la la la la", max_tokens=24).choices[0].message.content
    pen = chat(client_a, "la la la la la", max_tokens=24, frequency_penalty=2.0, presence_penalty=2.0)
    assert pen.choices[0].message.content != base


def test_completions_text_and_token_prompts(client_a, tiny_model):
    r = client_a.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert r.object == "text_completion" and r.usage.completion_tokens <= 6
    ids = tiny_model.tokenizer.encode("The capital of France is", add_special_tokens=True).ids
    by_ids = client_a.completions.create(model=MODEL, prompt=ids, max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == r.choices[0].text
    chunks = list(client_a.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6,
                                              temperature=0, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens


def test_responses_chain_continues_the_same_session(client_a, client_b):
    first = client_a.responses.create(model=MODEL, input="My name is Ada.", instructions=SYSTEM,
                                      max_output_tokens=8, temperature=0)
    assert first.object == "response" and first.status in ("completed", "incomplete") and first.output_text
    amber1 = first.model_extra["amber"]
    second = client_a.responses.create(model=MODEL, input="What is my name?", instructions=SYSTEM,
                                       previous_response_id=first.id, max_output_tokens=8, temperature=0)
    amber2 = second.model_extra["amber"]
    assert amber2["session_id"] == amber1["session_id"]
    # The chain's KV is the session's: only the new turn (and the end of the last reply) is computed.
    assert amber2["reused_tokens"] >= amber1["prompt_tokens"]
    assert amber2["prefilled_tokens"] < 40
    assert second.usage.input_tokens_details.cached_tokens == amber2["reused_tokens"]
    assert second.previous_response_id == first.id
    assert client_a.responses.retrieve(second.id).output_text == second.output_text
    # Another key sees none of it.
    with pytest.raises(openai.NotFoundError):
        client_b.responses.retrieve(second.id)
    with pytest.raises(openai.NotFoundError):
        client_b.responses.create(model=MODEL, input="hi", previous_response_id=first.id)
    # store=false: nothing to continue from.
    loose = client_a.responses.create(model=MODEL, input="Hi", store=False, max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        client_a.responses.retrieve(loose.id)


def test_streaming_responses(client_a):
    whole = client_a.responses.create(model=MODEL, input="Stream me", max_output_tokens=10, temperature=0,
                                      store=False)
    events = list(client_a.responses.create(model=MODEL, input="Stream me", max_output_tokens=10,
                                            temperature=0, store=False, stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] in ("response.completed", "response.incomplete")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-1].response.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_client_errors(server, client_a):
    with pytest.raises(openai.NotFoundError) as e:
        client_a.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert e.value.code == "model_not_found"
    bad = openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.BadRequestError) as e:
        chat(client_a, n=9)
    assert "1 to 8" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        chat(client_a, "word " * 600)        # more than the tiny model's 512-token window
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        chat(client_a, temperature=5)
    with pytest.raises(openai.BadRequestError):
        chat(client_a, stop=[str(i) for i in range(17)])
    with pytest.raises(openai.BadRequestError):
        client_a.completions.create(model=MODEL, prompt=[10 ** 9], max_tokens=2)
    # The server still works afterwards.
    assert chat(client_a, max_tokens=2).usage.completion_tokens >= 1


def test_key_namespaces_are_distinct_for_both_keys(client_b):
    assert KEY_A != KEY_B
    assert chat(client_b, max_tokens=2).usage.completion_tokens >= 1
