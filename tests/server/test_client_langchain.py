"""`langchain_openai.ChatOpenAI` with `base_url` against a real `amber-engine serve` on 127.0.0.1
(the tiny model): invoke, stream, batch and ainvoke give the reply the `openai` client gets, and
nothing beyond loopback is reached. Every body and event the server sends is also checked against
OpenAI's OpenAPI spec."""
from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from tests.support.server import KEY_A

pytestmark = pytest.mark.usefixtures("nothing_beyond_loopback")

MODEL = "tiny-chat"
ASK = [SystemMessage("You are terse."), HumanMessage("Name three colours.")]


@pytest.fixture
def llm(server) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=server.url, api_key=KEY_A, temperature=0, max_tokens=10,
                      max_retries=0, timeout=120)


@pytest.fixture
def expected(client_a) -> str:
    """The reply the official client gets for ASK (greedy: the same for every client)."""
    r = client_a.chat.completions.create(model=MODEL, max_tokens=10, temperature=0, messages=[
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours."}])
    return r.choices[0].message.content


def test_invoke_reports_the_reply_and_its_usage(llm, expected):
    reply = llm.invoke(ASK)
    assert isinstance(reply, AIMessage) and reply.content == expected
    assert reply.response_metadata["model_name"] == MODEL
    assert reply.response_metadata["finish_reason"] in ("stop", "length")
    usage = reply.usage_metadata
    assert usage["output_tokens"] > 0 and usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_stream_pieces_add_up_to_the_reply(llm, expected):
    pieces = list(llm.stream(ASK, stream_usage=True))
    assert len(pieces) > 1
    whole = pieces[0]
    for piece in pieces[1:]:
        whole += piece
    assert whole.content == expected
    assert whole.usage_metadata["output_tokens"] > 0


def test_batch_answers_each_input(llm, expected):
    other = [HumanMessage("Count to five.")]
    replies = llm.batch([ASK, other, ASK])
    assert [r.content for r in replies][0::2] == [expected, expected]
    assert replies[1].content == llm.invoke(other).content


def test_ainvoke_and_astream(llm, expected):
    async def run() -> tuple[list[str], str]:
        replies = await asyncio.gather(*(llm.ainvoke(ASK) for _ in range(2)))
        streamed = "".join([str(piece.content) async for piece in llm.astream(ASK)])
        return [str(r.content) for r in replies], streamed
    replies, streamed = asyncio.run(run())
    assert replies == [expected, expected] and streamed == expected
