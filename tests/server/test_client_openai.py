"""The official `openai` client, sync and async, against a real `amber-engine serve` on 127.0.0.1
(the tiny model): chat completions, completions and Responses, whole and streamed, and a stored
Responses chain. Every body and event the server sends is also checked against OpenAI's OpenAPI
spec (tests/support/openapi_check.py, installed by the conftest)."""
from __future__ import annotations

import asyncio

import openai
import pytest

from tests.support.server import KEY_A

MODEL = "tiny-chat"
ASK = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture
def async_client(server):
    return openai.AsyncOpenAI(base_url=server.url, api_key=KEY_A, max_retries=0, timeout=120)


def test_sync_chat_whole_and_streamed_agree(client_a):
    whole = client_a.chat.completions.create(model=MODEL, messages=ASK, max_tokens=10, temperature=0)
    chunks = list(client_a.chat.completions.create(model=MODEL, messages=ASK, max_tokens=10, temperature=0,
                                                   stream=True, stream_options={"include_usage": True}))
    assert whole.object == "chat.completion" and whole.system_fingerprint.startswith("fp_")
    assert {c.id for c in chunks} == {chunks[0].id} and all(c.object == "chat.completion.chunk" for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_sync_completions_whole_and_streamed_agree(client_a):
    whole = client_a.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=0)
    chunks = list(client_a.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=0,
                                              stream=True))
    assert whole.object == "text_completion"
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks][-1] == whole.choices[0].finish_reason


def test_sync_responses_streamed_events_build_the_whole_response(client_a):
    whole = client_a.responses.create(model=MODEL, input="Name three colours.", max_output_tokens=10,
                                      temperature=0, store=False)
    with client_a.responses.stream(model=MODEL, input="Name three colours.", max_output_tokens=10,
                                   temperature=0, store=False) as stream:
        events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # The tiny model rarely ends on its own within 10 tokens: then `response.incomplete` (which the
    # client's get_final_response does not take) carries the finished response.
    assert kinds[-1] == ("response.completed" if whole.status == "completed" else "response.incomplete")
    final = events[-1].response
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text == whole.output_text and final.status == whole.status
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_stored_chain_retrieve_list_items_and_delete(client_a):
    first = client_a.responses.create(model=MODEL, input="My name is Ada.", max_output_tokens=8, temperature=0)
    second = client_a.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id,
                                       max_output_tokens=8, temperature=0)
    assert second.previous_response_id == first.id
    # The second turn's prompt holds the first exchange, reused from the chain's session.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens > 0
    assert client_a.responses.retrieve(second.id).output_text == second.output_text
    items = client_a.responses.input_items.list(second.id, order="asc")
    assert [(i.role, i.content[0].text) for i in items.data] == [
        ("user", "My name is Ada."), ("assistant", first.output_text), ("user", "What is my name?")]
    page = client_a.responses.input_items.list(second.id, order="asc", limit=1, after=items.data[0].id)
    assert [i.id for i in page.data] == [items.data[1].id] and page.has_more
    past_the_end = client_a.responses.input_items.list(second.id, after=items.data[0].id)    # newest first
    assert past_the_end.data == [] and not past_the_end.has_more
    client_a.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        client_a.responses.retrieve(second.id)


def test_async_client_concurrent_requests_match_the_sync_ones(client_a, async_client):
    want_chat = client_a.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8, temperature=0)
    want_resp = client_a.responses.create(model=MODEL, input="Hello", max_output_tokens=8, temperature=0, store=False)

    async def run() -> tuple[list[str], str, str, list[str]]:
        async with async_client:
            chats = await asyncio.gather(*(async_client.chat.completions.create(
                model=MODEL, messages=ASK, max_tokens=8, temperature=0) for _ in range(3)))
            streamed = await async_client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8,
                                                                  temperature=0, stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in streamed if c.choices])
            resp = await async_client.responses.create(model=MODEL, input="Hello", max_output_tokens=8,
                                                       temperature=0, store=False)
            kinds = []
            async with async_client.responses.stream(model=MODEL, input="Hello", max_output_tokens=8,
                                                     temperature=0, store=False) as events:
                kinds = [e.type async for e in events]
            return [c.choices[0].message.content for c in chats], text, resp.output_text, kinds
    contents, streamed, output_text, kinds = asyncio.run(run())
    assert contents == [want_chat.choices[0].message.content] * 3
    assert streamed == want_chat.choices[0].message.content
    assert output_text == want_resp.output_text
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete")


def test_errors_are_the_clients_typed_errors(client_a, server):
    with pytest.raises(openai.NotFoundError) as missing:
        client_a.chat.completions.create(model="no-such-model", messages=ASK)
    assert missing.value.code == "model_not_found" and missing.value.param == "model"
    with pytest.raises(openai.BadRequestError) as bad:
        client_a.chat.completions.create(model=MODEL, messages=ASK, temperature=9)
    assert bad.value.param == "temperature"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url, api_key="wrong-key-" + "0" * 20, max_retries=0).models.list()
