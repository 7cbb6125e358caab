"""Structured outputs against a real `amber-engine serve` on the tiny random model: chat
completions' `response_format` and the Responses API's `text.format` are enforced while sampling,
so every reply parses and validates against its schema (streamed or not, n > 1, stored chains),
through the raw `openai` client, its `parse` helpers, LangChain's `with_structured_output` and
LiteLLM; a schema that cannot be enforced is a 400 naming it.

The schemas bound every string, array and number (maxLength, maxItems, minimum/maximum) and forbid
extra keys: the model's weights are random, so only a grammar with finitely many replies is sure
to end within max_tokens. `json_object` allows endless replies, so those tests steer the draw with
a logit_bias toward the closing tokens (the grammar still decides which tokens are allowed).
"""
from __future__ import annotations

import json
import os
from typing import Annotated, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, ConfigDict, Field

from tests.support.server import KEY_A
from tests.support.json_schemas import PET

MODEL = "tiny-chat"
ASK = [{"role": "user", "content": "Describe a pet as JSON."}]

NESTED = {"type": "object", "properties": {
    "owner": {"type": "object", "properties": {"first": {"type": "string", "maxLength": 5},
                                               "vip": {"type": "boolean"}},
              "required": ["first", "vip"], "additionalProperties": False},
    "scores": {"type": "array", "items": {"type": "integer", "minimum": -9, "maximum": 99},
               "minItems": 1, "maxItems": 4},
    "status": {"enum": ["open", "closed", None]}},
    "required": ["owner", "scores", "status"], "additionalProperties": False}
LIST = {"type": "object", "properties": {
    "items": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                                         "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["sku", "qty"], "additionalProperties": False}}},
    "required": ["items"], "additionalProperties": False}
SCHEMAS = {"pet": PET, "nested": NESTED, "list": LIST}


class Pet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=6)
    age: int = Field(ge=0, le=30)
    kind: Literal["cat", "dog", "fish"]
    tags: list[Annotated[str, Field(max_length=4)]] = Field(max_length=3)


def json_schema_format(name: str, schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@pytest.fixture(scope="module")
def closers(tiny_model) -> dict[str, int]:
    """A logit_bias toward closing a string, an object and an array (by token id, as the API takes it)."""
    tok = tiny_model.tokenizer
    return {str(tok.token_to_id('"')): 30, str(tok.token_to_id("}")): 20, str(tok.token_to_id("]")): 20}


def streamed_texts(stream, n: int) -> tuple[list[str], list[str | None]]:
    texts, finish = [""] * n, [None] * n
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
            finish[c.index] = c.finish_reason or finish[c.index]
    return texts, finish


# ---- chat completions with the raw client ----------------------------------------------------
@pytest.mark.parametrize("name", sorted(SCHEMAS))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_json_schema_replies_validate(client_a, name, stream):
    schema = SCHEMAS[name]
    kw = dict(model=MODEL, messages=ASK, n=3, temperature=1.0, seed=5, max_tokens=200,
              response_format=json_schema_format(name, schema))
    if stream:
        texts, finish = streamed_texts(client_a.chat.completions.create(stream=True, **kw), 3)
    else:
        r = client_a.chat.completions.create(**kw)
        texts, finish = [c.message.content for c in r.choices], [c.finish_reason for c in r.choices]
    assert finish == ["stop"] * 3
    for text in texts:
        jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_json_object_replies_are_objects(client_a, closers, stream):
    kw = dict(model=MODEL, messages=ASK, n=2, temperature=1.0, seed=3, max_tokens=200, logit_bias=closers,
              response_format={"type": "json_object"})
    if stream:
        texts, finish = streamed_texts(client_a.chat.completions.create(stream=True, **kw), 2)
    else:
        r = client_a.chat.completions.create(**kw)
        texts, finish = [c.message.content for c in r.choices], [c.finish_reason for c in r.choices]
    assert finish == ["stop", "stop"]
    assert all(isinstance(json.loads(t), dict) for t in texts)


def test_constrained_reply_with_logprobs(client_a):
    r = client_a.chat.completions.create(model=MODEL, messages=ASK, temperature=0, max_tokens=200, logprobs=True,
                                         top_logprobs=2, response_format=json_schema_format("pet", PET))
    choice = r.choices[0]
    jsonschema.validate(json.loads(choice.message.content), PET)
    assert len(choice.logprobs.content) == r.usage.completion_tokens
    assert b"".join(bytes(e.bytes) for e in choice.logprobs.content).decode() == choice.message.content


def test_text_format_is_free_text(client_a):
    free = client_a.chat.completions.create(model=MODEL, messages=ASK, temperature=0, max_tokens=12)
    text = client_a.chat.completions.create(model=MODEL, messages=ASK, temperature=0, max_tokens=12,
                                            response_format={"type": "text"})
    assert text.choices[0].message.content == free.choices[0].message.content


def test_openai_parse_with_a_pydantic_model(client_a):
    r = client_a.chat.completions.parse(model=MODEL, messages=ASK, temperature=0.8, seed=1, max_tokens=200,
                                        response_format=Pet)
    pet = r.choices[0].message.parsed
    assert isinstance(pet, Pet) and r.choices[0].finish_reason == "stop"


# ---- bad formats: a 400 naming the problem ---------------------------------------------------
@pytest.mark.parametrize(("fmt", "param", "words"), [
    (json_schema_format("x", {"type": "strin"}), "response_format.json_schema.schema", "strin"),
    (json_schema_format("x", {"type": "object", "properties": {"a": {"$ref": "#/$defs/gone"}}}),
     "response_format.json_schema.schema", "gone"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema.schema", "required"),
    ({"type": "json_schema"}, "response_format.json_schema", "required"),
    ({"type": "yaml"}, "response_format.type", ""),
    (json_schema_format("x", {"type": "object", "description": "x" * 70000}), "response_format.json_schema.schema",
     "at most"),
])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_unenforceable_formats_are_400s(client_a, fmt, param, words, stream):
    with pytest.raises(openai.BadRequestError) as info:
        client_a.chat.completions.create(model=MODEL, messages=ASK, max_tokens=5, response_format=fmt, stream=stream)
    error = info.value.body
    assert info.value.status_code == 400 and error["param"] == param and words in error["message"]


def test_deeply_nested_schema_is_a_400(client_a):
    deep: dict = {"type": "integer"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    with pytest.raises(openai.BadRequestError, match="nests deeper"):
        client_a.chat.completions.create(model=MODEL, messages=ASK, max_tokens=5,
                                         response_format=json_schema_format("deep", deep))


# ---- the Responses API -----------------------------------------------------------------------
def text_format(name: str, schema: dict) -> dict:
    return {"format": {"type": "json_schema", "name": name, "schema": schema, "strict": True}}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_responses_text_format_validates_and_chains(client_a, stream):
    if stream:
        with client_a.responses.stream(model=MODEL, input="A pet, please.", temperature=0.9, extra_body={"seed": 2},
                                       max_output_tokens=200, text=text_format("pet", PET)) as events:
            first = events.get_final_response()
    else:
        first = client_a.responses.create(model=MODEL, input="A pet, please.", temperature=0.9, extra_body={"seed": 2},
                                          max_output_tokens=200, text=text_format("pet", PET))
    assert first.status == "completed"
    jsonschema.validate(json.loads(first.output_text), PET)
    assert first.text.format.type == "json_schema" and first.text.format.name == "pet"
    # The stored chain goes on: another schema, then free text, each turn seeing the one before.
    second = client_a.responses.create(model=MODEL, input="Now its owner.", previous_response_id=first.id,
                                       temperature=0, max_output_tokens=200, text=text_format("nested", NESTED))
    jsonschema.validate(json.loads(second.output_text), NESTED)
    third = client_a.responses.create(model=MODEL, input="Thanks.", previous_response_id=second.id,
                                      temperature=0, max_output_tokens=8)
    assert third.status in ("completed", "incomplete") and third.text.format.type == "text"
    items = client_a.responses.input_items.list(third.id, order="asc").data
    assert [i.content[0].text for i in items if i.role == "assistant"] == [first.output_text, second.output_text]
    assert client_a.responses.retrieve(second.id).text.format.name == "nested"


def test_responses_json_object_and_parse(client_a):
    r = client_a.responses.create(model=MODEL, input="Any object.", temperature=0, max_output_tokens=300,
                                  store=False, text={"format": {"type": "json_object"}})
    if r.status == "completed":       # no logit_bias in the Responses API: an endless object may be cut
        assert isinstance(json.loads(r.output_text), dict)
    assert r.output_text.startswith("{")
    parsed = client_a.responses.parse(model=MODEL, input="A pet.", temperature=0.7, extra_body={"seed": 4},
                                      max_output_tokens=200, text_format=Pet)
    assert isinstance(parsed.output_parsed, Pet)


def test_responses_bad_format_is_a_400(client_a):
    with pytest.raises(openai.BadRequestError) as info:
        client_a.responses.create(model=MODEL, input="x", max_output_tokens=5,
                                  text={"format": {"type": "json_schema", "name": "x", "schema": {"type": 3}}})
    assert info.value.body["param"] == "text.format.schema"
    with pytest.raises(openai.BadRequestError) as info:
        client_a.responses.create(model=MODEL, input="x", max_output_tokens=5,
                                  text={"format": {"type": "json_schema", "schema": PET}})
    assert info.value.body["param"] == "text.format.name"


# ---- other clients ---------------------------------------------------------------------------
def test_langchain_with_structured_output(server, closers):
    from langchain_openai import ChatOpenAI
    llm = ChatOpenAI(model="default", base_url=server.url, api_key=KEY_A, temperature=0.5, seed=6, max_tokens=200,
                     max_retries=0, timeout=120)
    pet = llm.with_structured_output(Pet, method="json_schema").invoke("Describe a pet.")
    assert isinstance(pet, Pet)
    loose = ChatOpenAI(model="default", base_url=server.url, api_key=KEY_A, temperature=0, max_tokens=200,
                       max_retries=0, timeout=120, logit_bias={int(k): v for k, v in closers.items()})
    obj = loose.with_structured_output(PET, method="json_mode").invoke("Describe a pet as JSON.")
    assert isinstance(obj, dict)


def test_litellm_completion(server, closers):
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"      # no network lookup of model prices
    import litellm
    kw = dict(model="openai/default", api_base=server.url, api_key=KEY_A, messages=ASK, max_tokens=200)
    r = litellm.completion(response_format=Pet, temperature=0.6, seed=8, **kw)
    assert isinstance(Pet.model_validate_json(r.choices[0].message.content), Pet)
    r = litellm.completion(response_format={"type": "json_object"}, temperature=0, logit_bias=closers, **kw)
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    r = litellm.completion(response_format=json_schema_format("list", LIST), temperature=1.0, seed=9, **kw)
    jsonschema.validate(json.loads(r.choices[0].message.content), LIST)


# ---- the real default model --------------------------------------------------------------------
@pytest.mark.slow
def test_default_model_fills_a_schema(default_model_dir, tmp_path, start_server):
    """SmolLM2-135M-Instruct behind the server: a schema-bound reply, greedy, that says something."""
    s = start_server(default_model_dir, tmp_path / "state")
    c = openai.OpenAI(base_url=s.url, api_key="unused", max_retries=0, timeout=300)
    city = {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40},
        "country": {"type": "string", "maxLength": 40},
        "continent": {"enum": ["Africa", "Asia", "Europe", "North America", "South America", "Oceania"]},
        "is_capital": {"type": "boolean"}},
        "required": ["city", "country", "continent", "is_capital"], "additionalProperties": False}
    r = c.chat.completions.create(model="default", temperature=0, max_tokens=80,
                                  messages=[{"role": "user", "content": "What is the capital of France? Answer "
                                                                        "with the city, its country and continent."}],
                                  response_format=json_schema_format("city", city))
    reply = json.loads(r.choices[0].message.content)
    jsonschema.validate(reply, city)
    assert r.choices[0].finish_reason == "stop" and "Paris" in reply["city"]
    parsed = c.chat.completions.parse(model="default", temperature=0, max_tokens=80, response_format=Pet,
                                      messages=[{"role": "user", "content": "Describe a small dog as JSON."}])
    assert isinstance(parsed.choices[0].message.parsed, Pet)


def test_an_engine_without_a_tokenizer_refuses_formats(tmp_path):
    """Served over an engine without token prompts (the GUI tests' fake, as a remote engine): a
    format it cannot enforce is a 400, never a reply that silently ignores it."""
    from engine.server import serve_in_thread
    from tests.support.fake_engine import FakeEngine
    engine = FakeEngine(tmp_path / "fake", delay=0)
    handle = serve_in_thread(engine, "127.0.0.1", 0, state_dir=tmp_path / "state")
    try:
        client = openai.OpenAI(base_url=handle.url, api_key="unused", max_retries=0, timeout=60)
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model=engine.model_name, messages=ASK,
                                           response_format={"type": "json_object"})
        assert info.value.body["param"] == "response_format"
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model=engine.model_name, input="x", text=text_format("pet", PET))
        assert info.value.body["param"] == "text.format"
        r = client.chat.completions.create(model=engine.model_name, messages=ASK, response_format={"type": "text"})
        assert r.choices[0].message.content
    finally:
        handle.stop()
        engine.shutdown()
