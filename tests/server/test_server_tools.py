"""Tool calling through the real server (`python -m engine serve` on 127.0.0.1) with the tiny model
under real Qwen2.5, Llama 3.1 and Mistral v0.3 templates: chat completions and the Responses API,
with the official openai client, LangChain and LiteLLM.

The tiny model's weights are random, so what it says is noise; tool_choice "required" or a named
function makes the server constrain decoding to a call in the template's format, which must then
come back as a call to that tool with arguments valid for its schema."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import jsonschema
import openai
import pytest

from tests.support.server import KEY_A, TINY, ServerProcess
from tests.support.tiny_gguf import variant, write_tiny_gguf
from tests.support.tool_templates import TOOL_TEMPLATES, with_template

PARAMS = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
                                           "unit": {"type": "string", "enum": ["C", "F"]}},
          "required": ["city", "unit"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now",
                                            "parameters": PARAMS}}
TIME_PARAMS = {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
               "required": ["zone"], "additionalProperties": False}
CLOCK = {"type": "function", "function": {"name": "get_time", "description": "The time in a zone",
                                          "parameters": TIME_PARAMS}}
SCHEMAS = {"get_weather": PARAMS, "get_time": TIME_PARAMS}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
FAMILIES = list(TOOL_TEMPLATES)


@pytest.fixture(scope="module")
def long_tiny_dir(tmp_path_factory) -> Path:
    """The tiny model with room for tool schemas in its prompt (its small vocabulary spends many
    tokens on them)."""
    from engine.convert import convert_gguf
    src = write_tiny_gguf(tmp_path_factory.mktemp("tiny-long") / "tiny-long.gguf", variant(TINY, context_length=4096))
    return convert_gguf(src.path, tmp_path_factory.mktemp("tiny-long-model") / "tiny-long")


@pytest.fixture(scope="module", params=FAMILIES)
def family_server(request, long_tiny_dir, tmp_path_factory) -> Iterator[tuple[str, ServerProcess]]:
    """A server over the tiny model with a tool-calling template (one per family)."""
    family = request.param
    root = tmp_path_factory.mktemp(f"tools-{family}")
    model = with_template(long_tiny_dir, root / f"tiny-{family}", TOOL_TEMPLATES[family])
    s = ServerProcess(model, root / "state", "--api-key", KEY_A)
    yield family, s
    assert s.stop() == 0


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key=KEY_A, max_retries=0, timeout=120)


def assert_valid_call(name: str, arguments: str, allowed: tuple[str, ...]) -> dict:
    assert name in allowed
    args = json.loads(arguments)
    jsonschema.validate(args, SCHEMAS[name])
    return args


def assert_id(family: str, call_id: str) -> None:
    if family == "mistral-v3":        # its template refuses other ids in the history
        assert len(call_id) == 9 and call_id.isalnum()
    else:
        assert call_id.startswith("call_")


# ---- chat completions ------------------------------------------------------------------------
def test_named_function_is_called_with_valid_arguments(family_server):
    family, server = family_server
    r = client(server).chat.completions.create(model="default", messages=ASK, tools=[WEATHER, CLOCK],
                                               tool_choice=NAMED, max_tokens=120, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function"
    assert_id(family, call.id)
    assert_valid_call(call.function.name, call.function.arguments, ("get_weather",))


def test_required_streamed_as_tool_call_deltas(family_server):
    family, server = family_server
    stream = client(server).chat.completions.create(model="default", messages=ASK, tools=[WEATHER, CLOCK],
                                                    tool_choice="required", parallel_tool_calls=False,
                                                    max_tokens=120, temperature=0, stream=True)
    calls: dict[int, dict] = {}
    finish = None
    content = ""
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for d in choice.delta.tool_calls or ():
                if d.id is not None:
                    assert d.index not in calls and d.type == "function"
                    calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
                calls[d.index]["arguments"] += d.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and content == ""
    assert list(calls) == [0]
    assert_id(family, calls[0]["id"])
    assert_valid_call(calls[0]["name"], calls[0]["arguments"], ("get_weather", "get_time"))
    # The same request unstreamed makes the same call (greedy under the same constraint).
    whole = client(server).chat.completions.create(model="default", messages=ASK, tools=[WEATHER, CLOCK],
                                                   tool_choice="required", parallel_tool_calls=False,
                                                   max_tokens=120, temperature=0)
    (call,) = whole.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == (calls[0]["name"], calls[0]["arguments"])


def test_each_choice_streams_its_own_call(family_server):
    family, server = family_server
    stream = client(server).chat.completions.create(model="default", messages=ASK, tools=[WEATHER, CLOCK], n=2,
                                                    tool_choice={"type": "function", "function": {"name": "get_time"}},
                                                    max_tokens=150, temperature=1.0, seed=5, stream=True)
    calls: dict[int, dict] = {}
    finish: dict[int, str] = {}
    for chunk in stream:
        for choice in chunk.choices:
            for d in choice.delta.tool_calls or ():
                assert d.index == 0
                if d.id is not None:
                    calls[choice.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
                calls[choice.index]["arguments"] += d.function.arguments or ""
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    assert finish == {0: "tool_calls", 1: "tool_calls"}
    assert calls[0]["id"] != calls[1]["id"]
    for call in calls.values():
        assert_id(family, call["id"])
        assert_valid_call(call["name"], call["arguments"], ("get_time",))


def test_tools_are_shown_for_auto_and_hidden_for_none(family_server):
    _, server = family_server
    c = client(server)

    def prompt_tokens(**tools) -> int:
        return c.chat.completions.create(model="default", messages=ASK, max_tokens=1, **tools).usage.prompt_tokens
    plain = prompt_tokens()
    assert prompt_tokens(tools=[WEATHER], tool_choice="none") == plain
    assert prompt_tokens(tools=[WEATHER]) > plain + 20       # tool_choice "auto": the schema is in the prompt


def test_auto_streamed_and_whole_replies_agree(family_server):
    """Whatever the model writes with tools offered, streaming reads it as the whole reply does."""
    _, server = family_server
    c = client(server)
    kwargs = dict(model="default", messages=ASK, tools=[WEATHER], max_tokens=40, temperature=0)
    whole = c.chat.completions.create(**kwargs).choices[0]
    content, calls, finish = "", {}, None
    for chunk in c.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for d in choice.delta.tool_calls or ():
                calls.setdefault(d.index, [d.function.name, ""])[1] += d.function.arguments or ""
            finish = choice.finish_reason or finish
    assert content == (whole.message.content or "")
    assert [tuple(v) for v in calls.values()] == [(t.function.name, t.function.arguments)
                                                  for t in whole.message.tool_calls or ()]
    assert finish == whole.finish_reason


def test_a_full_tool_loop(family_server):
    """As openai's runTools does: the model calls a tool, the client runs it and sends the result
    back, the model answers."""
    _, server = family_server
    c = client(server)
    messages: list = list(ASK)
    ran = []

    def get_weather(city: str, unit: str) -> str:
        ran.append(city)
        return json.dumps({"city": city, "temperature": 18 if unit == "C" else 64, "unit": unit})
    first = c.chat.completions.create(model="default", messages=messages, tools=[WEATHER], tool_choice=NAMED,
                                      max_tokens=120, temperature=0)
    message = first.choices[0].message
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls:
        args = assert_valid_call(call.function.name, call.function.arguments, ("get_weather",))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": get_weather(**args)})
    answer = c.chat.completions.create(model="default", messages=messages, tools=[WEATHER], max_tokens=8,
                                       temperature=0)
    assert len(ran) == 1
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # The call and its result are in the prompt now (rendered by the model's own template), after
    # the same tools and question: the first request's prompt is reused from the cache.
    assert answer.usage.prompt_tokens > first.usage.prompt_tokens + 10
    assert answer.usage.prompt_tokens_details.cached_tokens > first.usage.prompt_tokens // 2


def test_bad_tool_requests_are_400(family_server):
    _, server = family_server
    c = client(server)
    cases = [
        (dict(tools=[{"type": "function", "function": {"name": "no spaces allowed"}}]), "name is 1 to 64"),
        (dict(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "other"}}), "does not have"),
        (dict(tools=[WEATHER], tool_choice="sometimes"), "'tool_choice' is"),
        (dict(tool_choice="required"), "'tools' is empty"),
        (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                                   "properties": 3}}}]),
         "not a valid JSON schema"),
    ]
    for kwargs, message in cases:
        with pytest.raises(openai.BadRequestError, match=message):
            c.chat.completions.create(model="default", messages=ASK, max_tokens=1, **kwargs)
    with pytest.raises(openai.BadRequestError, match="tool_call_id"):
        c.chat.completions.create(model="default", max_tokens=1, messages=ASK + [{"role": "tool", "content": "x"}])


def test_model_without_tool_format_says_so(server):
    """The ChatML tiny model's template shows no tools: a 400 naming the model."""
    c = openai.OpenAI(base_url=server.url, api_key=KEY_A, max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError, match="tiny-chat has no tool-call format in its chat template"):
        c.chat.completions.create(model="default", messages=ASK, tools=[WEATHER], max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="tiny-chat has no tool-call format"):
        c.responses.create(model="default", input="hi", tools=[{"type": "function", "name": "f"}])
    # tool_choice "none": the tools are not shown, so the model answers as without them.
    r = c.chat.completions.create(model="default", messages=ASK, tools=[WEATHER], tool_choice="none", max_tokens=2)
    assert r.choices[0].message.tool_calls is None


def test_default_model_without_tool_format_says_so(default_model_dir, tmp_path, start_server):
    s = start_server(default_model_dir, tmp_path / "state")
    c = openai.OpenAI(base_url=s.url, api_key="unused", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model="default", messages=ASK, tools=[WEATHER], max_tokens=1)
    assert "SmolLM2-135M-Instruct has no tool-call format in its chat template" in err.value.message


# ---- the Responses API -----------------------------------------------------------------------
FLAT_WEATHER = {"type": "function", **WEATHER["function"]}


def test_responses_call_streamed_then_continued(family_server):
    family, server = family_server
    c = client(server)
    events = list(c.responses.create(model="default", input="Weather in Oslo?", tools=[FLAT_WEATHER],
                                     tool_choice={"type": "function", "name": "get_weather"},
                                     max_output_tokens=120, temperature=0, stream=True))
    kinds = [e.type for e in events]
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [e.item.type for e in added] == ["function_call"]
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done.arguments == deltas and done.item_id == added[0].item.id
    assert kinds.index("response.output_item.added") < kinds.index("response.function_call_arguments.done") \
        < kinds.index("response.output_item.done") < kinds.index("response.completed")
    response = events[-1].response
    (item,) = response.output
    assert item.type == "function_call" and item.status == "completed" and item.arguments == deltas
    assert_id(family, item.call_id)
    args = assert_valid_call(item.name, item.arguments, ("get_weather",))
    assert response.tool_choice.name == "get_weather" and response.tools[0].name == "get_weather"

    result = json.dumps({"city": args["city"], "temperature": 3})
    follow = c.responses.create(model="default", previous_response_id=response.id, tools=[FLAT_WEATHER],
                                input=[{"type": "function_call_output", "call_id": item.call_id, "output": result}],
                                max_output_tokens=6, temperature=0)
    assert follow.status in ("completed", "incomplete")
    assert follow.model_extra["amber"]["reused_tokens"] > 0        # the chain's session continues
    listed = c.responses.input_items.list(follow.id, order="asc").data
    assert [i.type for i in listed] == ["message", "function_call", "function_call_output"]
    assert (listed[1].call_id, listed[1].arguments) == (item.call_id, item.arguments)
    assert (listed[2].call_id, listed[2].output) == (item.call_id, result)


def test_responses_input_with_a_function_call_history(family_server):
    """A stateless client sends the whole exchange itself: its call and the call's output."""
    family, server = family_server
    call_id = "abcde1234" if family == "mistral-v3" else "call_given_by_client"
    r = client(server).responses.create(
        model="default", store=False, tools=[FLAT_WEATHER], max_output_tokens=4, temperature=0,
        input=[{"role": "user", "content": "Weather in Lima?"},
               {"type": "function_call", "call_id": call_id, "name": "get_weather",
                "arguments": '{"city": "Lima", "unit": "C"}'},
               {"type": "function_call_output", "call_id": call_id, "output": "21 C"}])
    assert r.status in ("completed", "incomplete") and r.output


def test_tool_chain_resumes_after_a_restart(long_tiny_dir, tmp_path, start_server):
    model = with_template(long_tiny_dir, tmp_path / "tiny-qwen-tools", TOOL_TEMPLATES["qwen2.5"])
    state = tmp_path / "state"
    first = start_server(model, state, "--api-key", KEY_A)
    c = client(first)
    r1 = c.responses.create(model="default", input="Weather in Paris?", tools=[FLAT_WEATHER],
                            tool_choice="required", parallel_tool_calls=False, max_output_tokens=120,
                            temperature=0)
    (call,) = r1.output
    assert call.type == "function_call"
    r2 = c.responses.create(model="default", previous_response_id=r1.id, tools=[FLAT_WEATHER],
                            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}],
                            max_output_tokens=6, temperature=0)
    a2 = r2.model_extra["amber"]
    assert first.stop() == 0

    second = start_server(model, state, "--api-key", KEY_A)
    c = client(second)
    r3 = c.responses.create(model="default", previous_response_id=r2.id, input="And in Oslo?",
                            tools=[FLAT_WEATHER], tool_choice={"type": "function", "name": "get_weather"},
                            max_output_tokens=120, temperature=0)
    a3 = r3.model_extra["amber"]
    assert a3["session_id"] == a2["session_id"] and a3["resume"] == "disk"
    assert a3["reused_tokens"] >= a2["prompt_tokens"]        # the call and its result came from disk
    (again,) = r3.output
    assert_valid_call(again.name, again.arguments, ("get_weather",))
    listed = c.responses.input_items.list(r3.id, order="asc").data
    assert [i.type for i in listed] == ["message", "function_call", "function_call_output", "message", "message"]


# ---- other clients ---------------------------------------------------------------------------
def test_langchain_bind_tools_round_trip(family_server):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    _, server = family_server

    @tool
    def get_time(zone: str) -> str:
        """The time in a zone (UTC or CET)."""
        return f"12:00 {zone}"
    llm = ChatOpenAI(model="default", base_url=server.url, api_key=KEY_A, max_retries=0, timeout=120,
                     temperature=0, max_tokens=120)
    # The tool's schema as LangChain writes it, constrained to the zones our check knows.
    bound = llm.bind_tools([{"type": "function", "function": {"name": "get_time", "description": "time",
                                                              "parameters": TIME_PARAMS}}], tool_choice="get_time")
    ai = bound.invoke([HumanMessage("What time is it in UTC?")])
    (call,) = ai.tool_calls
    assert call["name"] == "get_time"
    jsonschema.validate(call["args"], TIME_PARAMS)
    answer = llm.bind_tools([get_time], tool_choice="none").invoke(
        [HumanMessage("What time is it in UTC?"), ai, ToolMessage(get_time.invoke(call["args"]),
                                                                  tool_call_id=call["id"])])
    assert not answer.tool_calls
    assert answer.response_metadata["finish_reason"] in ("stop", "length")


def test_litellm_completion_with_tools(family_server, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm
    _, server = family_server
    r = litellm.completion(model="openai/default", api_base=server.url, api_key=KEY_A, messages=ASK,
                           tools=[WEATHER], tool_choice=NAMED, max_tokens=120, temperature=0)
    assert r.choices[0].finish_reason == "tool_calls"
    (call,) = r.choices[0].message.tool_calls
    assert_valid_call(call.function.name, call.function.arguments, ("get_weather",))


def test_langchain_structured_output_by_function_calling(family_server):
    """LangChain's `with_structured_output(method="function_calling")` binds the schema as a tool
    and names it in tool_choice: the forced call comes back as the typed object."""
    from typing import Literal

    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel

    class Pet(BaseModel):
        """A pet."""
        kind: Literal["cat", "dog", "parrot"]
        legs: Literal[2, 4]

    _, server = family_server
    llm = ChatOpenAI(model="default", base_url=server.url, api_key=KEY_A, max_retries=0, timeout=120,
                     temperature=0, max_tokens=120)
    # strict: LangChain closes the schema (no additional properties), which the random tiny model
    # would otherwise fill with keys of its own until max_tokens
    pet = llm.with_structured_output(Pet, method="function_calling", strict=True).invoke("Describe a pet.")
    assert isinstance(pet, Pet)
    raw = llm.with_structured_output(Pet, method="function_calling", strict=True,
                                     include_raw=True).invoke("Describe a pet.")
    assert raw["parsing_error"] is None and raw["parsed"] == Pet.model_validate(raw["raw"].tool_calls[0]["args"])
