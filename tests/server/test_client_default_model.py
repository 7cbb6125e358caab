"""One real round trip per client against `amber-engine serve` over the real default model
(SmolLM2-135M-Instruct): the `openai` client (chat whole and streamed, Responses streamed),
`langchain_openai.ChatOpenAI` and litellm ("openai/default") all get the same greedy reply, and
every answer matches OpenAI's OpenAPI spec (checked by the conftest)."""
from __future__ import annotations

import openai
import pytest
from langchain_openai import ChatOpenAI

from tests.support.server import DEFAULT_MODEL

pytestmark = pytest.mark.slow

ASK = "What is the capital of France? Answer in one word."
TOKENS = 8


def test_every_client_gets_the_same_reply(default_model_dir, tmp_path, start_server, litellm, network_attempts):
    s = start_server(default_model_dir, tmp_path / "state")
    client = openai.OpenAI(base_url=s.url, api_key="unused", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": ASK}]
    whole = client.chat.completions.create(model="default", messages=messages, max_tokens=TOKENS, temperature=0)
    reply = whole.choices[0].message.content
    assert whole.model == DEFAULT_MODEL and "Paris" in reply
    streamed = client.chat.completions.create(model="default", messages=messages, max_tokens=TOKENS,
                                              temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == reply
    events = list(client.responses.create(model="default", input=ASK, max_output_tokens=TOKENS, temperature=0,
                                          store=False, stream=True))
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert events[-1].response.output_text == reply
    chat = ChatOpenAI(model="default", base_url=s.url, api_key="unused", temperature=0, max_tokens=TOKENS,
                      max_retries=0, timeout=300)
    assert chat.invoke(ASK).content == reply
    answer = litellm.completion(model="openai/default", api_base=s.url, api_key="unused", messages=messages,
                                max_tokens=TOKENS, temperature=0)
    assert answer.choices[0].message.content == reply
    assert network_attempts == []
