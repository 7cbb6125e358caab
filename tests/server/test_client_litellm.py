"""`litellm` (completion, acompletion, streaming) with model "openai/default" and `api_base`
against a real `amber-engine serve` on 127.0.0.1 (the tiny model): the reply the `openai` client
gets, and no connection beyond loopback, from the import on (LITELLM_LOCAL_MODEL_COST_MAP keeps
litellm's price list local). Every body and event the server sends is also checked against
OpenAI's OpenAPI spec."""
from __future__ import annotations

import asyncio
from types import ModuleType

import pytest

from tests.support.server import KEY_A

pytestmark = pytest.mark.usefixtures("nothing_beyond_loopback")

MODEL = "tiny-chat"
ASK = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture
def expected(client_a) -> str:
    r = client_a.chat.completions.create(model=MODEL, messages=ASK, max_tokens=10, temperature=0)
    return r.choices[0].message.content


def ask(litellm: ModuleType, server, **kwargs):
    return litellm.completion(model="openai/default", api_base=server.url, api_key=KEY_A, messages=ASK,
                              max_tokens=10, temperature=0, **kwargs)


def test_completion_gives_the_reply_and_usage(litellm, server, expected):
    r = ask(litellm, server)
    assert r.choices[0].message.content == expected
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_streaming_pieces_add_up_to_the_reply(litellm, server, expected):
    chunks = list(ask(litellm, server, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] \
        in (["stop"], ["length"])


def test_acompletion_and_async_streaming(litellm, server, expected):
    async def run() -> tuple[list[str], str]:
        replies = await asyncio.gather(*(litellm.acompletion(
            model="openai/default", api_base=server.url, api_key=KEY_A, messages=ASK, max_tokens=10,
            temperature=0) for _ in range(2)))
        stream = await litellm.acompletion(model="openai/default", api_base=server.url, api_key=KEY_A,
                                           messages=ASK, max_tokens=10, temperature=0, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        return [r.choices[0].message.content for r in replies], text
    replies, streamed = asyncio.run(run())
    assert replies == [expected, expected] and streamed == expected


def test_server_errors_become_litellm_exceptions(litellm, server):
    with pytest.raises(litellm.exceptions.BadRequestError) as bad:
        ask(litellm, server, top_p=5)
    assert "top_p" in str(bad.value)
