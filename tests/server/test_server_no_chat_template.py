"""A base model (no chat template, e.g. Gemma-3-270M) behind the real server: the chat endpoints
answer 400 naming the model and pointing at /v1/completions, which works and starts the prompt with
the model's one BOS. Real `python -m engine serve` on 127.0.0.1, the real openai client."""
from __future__ import annotations

import httpx
import openai
import pytest

from tests.support.server import KEY_A, TINY
from tests.support.tiny_gguf import write_tiny_gguf

NAME = "tiny-base"
MESSAGE = f"{NAME} has no chat template; use /v1/completions"


@pytest.fixture(scope="module")
def base_server(tmp_path_factory):
    from engine.convert import convert_gguf
    from tests.support.server import ServerProcess
    root = tmp_path_factory.mktemp("base")
    src = write_tiny_gguf(root / f"{NAME}.gguf", TINY, omit=("tokenizer.chat_template", "tokenizer.ggml.add_bos_token"),
                          metadata={"tokenizer.ggml.add_bos_token": True})
    model_dir = convert_gguf(src.path, root / NAME)
    server = ServerProcess(model_dir, root / "state", "--api-key", KEY_A)
    yield server
    assert server.stop() == 0


@pytest.fixture
def client(base_server):
    return openai.OpenAI(base_url=base_server.url, api_key=KEY_A, max_retries=0, timeout=120)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_is_a_400_naming_the_model(client, stream):
    with pytest.raises(openai.BadRequestError) as err:
        reply = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}],
                                               max_tokens=4, stream=stream)
        if stream:
            list(reply)
    assert err.value.status_code == 400
    body = err.value.body
    assert isinstance(body, dict) and body["message"] == MESSAGE and body["code"] == "no_chat_template"


def test_responses_endpoint_is_the_same_400(base_server):
    r = httpx.post(f"{base_server.url}/responses", headers={"Authorization": f"Bearer {KEY_A}"},
                   json={"model": NAME, "input": "Hi", "max_output_tokens": 4}, timeout=120)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == MESSAGE


def test_completions_work_and_count_one_bos(client):
    out = client.completions.create(model=NAME, prompt="The capital of France is", max_tokens=5, temperature=0)
    assert out.choices[0].finish_reason in ("length", "stop")
    with_bos = client.completions.create(model=NAME, prompt="<|im_start|>The capital of France is", max_tokens=5,
                                         temperature=0)
    # the BOS written in the prompt is the one BOS: the same prompt, token for token
    assert with_bos.usage.prompt_tokens == out.usage.prompt_tokens
    assert with_bos.choices[0].text == out.choices[0].text


def test_chat_with_tools_is_the_same_400(client):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}], tools=tools,
                                       max_tokens=4)
    assert err.value.body["message"] == MESSAGE
