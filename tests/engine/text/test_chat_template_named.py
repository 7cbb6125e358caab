"""Named chat templates (`default` + `tool_use`) and messages whose content is None.

Hermes-2-Pro-style models ship two templates, as a list of {name, template} in
tokenizer_config.json (or, written by transformers 5, as `additional_chat_templates/tool_use.jinja`
beside `chat_template.jinja`). transformers renders `tool_use` when tools are given and `default`
otherwise; before this, the tools were dropped silently. A message with "content": None (an
assistant turn holding only tool calls) renders as transformers 5 renders it: the key removed.
"""
from __future__ import annotations

import json

import pytest

from engine.text.chat_template import ChatTemplateError, load_chat_template

# ChatML without tools (Hermes-2-Pro's default, shortened to its structure).
DEFAULT = (
    "{{bos_token}}{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Hermes-2-Pro's tool_use template, in structure: the tools as JSON in the system turn, assistant
# tool calls as <tool_call> blocks (content may be absent), tool results as <tool_response>.
TOOL_USE = """{{- bos_token }}
{{- '<|im_start|>system\\nYou are a function calling AI model. You are provided with function signatures within <tools></tools> XML tags. Here are the available tools: <tools> ' }}
{%- for tool in tools %}
    {%- if tool.function is defined %}{%- set tool = tool.function %}{%- endif %}
    {{- '{"type": "function", "function": ' }}{{- tool | tojson }}{{- '}' }}
    {%- if not loop.last %}{{- ' ' }}{%- endif %}
{%- endfor %}
{{- ' </tools><|im_end|>\\n' }}
{%- for message in messages %}
    {%- if message.role == "user" or message.role == "system" %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>assistant\\n' }}
        {%- if message.content is defined %}{{- message.content }}{%- endif %}
        {%- for tool_call in message.tool_calls | default([]) %}
            {{- '<tool_call>\\n{"name": "' + tool_call.function.name + '", "arguments": ' }}
            {{- tool_call.function.arguments | tojson }}{{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {{- '<|im_start|>tool\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
CALLED = ASK + [
    {"role": "assistant", "content": None,
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "18 C, sunny"},
]


def write_list_form(folder, templates=(("default", DEFAULT), ("tool_use", TOOL_USE))):
    folder.mkdir(exist_ok=True)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>",
        "chat_template": [{"name": n, "template": t} for n, t in templates]}))
    return folder


def write_file_form(folder):
    folder.mkdir(exist_ok=True)
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|begin_of_text|>"}))
    (folder / "chat_template.jinja").write_text(DEFAULT)
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text(TOOL_USE)
    return folder


@pytest.fixture(params=["list", "files"])
def named(request, tmp_path):
    folder = tmp_path / "hermes"
    (write_list_form if request.param == "list" else write_file_form)(folder)
    return load_chat_template(folder, "hermes")


def test_without_tools_the_default_template(named):
    assert named.render(ASK) == ("<|begin_of_text|><|im_start|>user\nWeather in Paris?<|im_end|>\n"
                                 "<|im_start|>assistant\n")
    assert named.render(ASK, tools=None) == named.render(ASK)


def test_with_tools_the_tool_use_template(named):
    text = named.render(ASK, tools=[WEATHER])
    schema = json.dumps(WEATHER["function"])
    assert text == ("<|begin_of_text|><|im_start|>system\nYou are a function calling AI model. You are provided "
                    "with function signatures within <tools></tools> XML tags. Here are the available tools: "
                    '<tools> {"type": "function", "function": ' + schema + "} </tools><|im_end|>\n"
                    "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")


def test_tool_call_turn_with_content_none(named):
    """transformers 5 removes a None content: `message.content is defined` is false, so the
    assistant turn is only its tool call (with the key kept, 'None' would be written)."""
    text = named.render(CALLED, tools=[WEATHER])
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            "</tool_call><|im_end|>\n<|im_start|>tool\n<tool_response>\n18 C, sunny\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\n") in text
    assert "None" not in text
    assert CALLED[1]["content"] is None       # the caller's message is not modified


def test_a_single_template_ignores_the_switch(tmp_path):
    """A model with one template (it handles tools itself, as Qwen2.5's does) renders it for both."""
    folder = write_list_form(tmp_path / "one", (("default", DEFAULT),))
    t = load_chat_template(folder, "one")
    assert t.render(ASK, tools=[WEATHER]) == t.render(ASK)


def test_tool_use_with_a_syntax_error_names_it(tmp_path):
    folder = write_list_form(tmp_path / "bad", (("default", DEFAULT), ("tool_use", "{% for x in %}")))
    with pytest.raises(ChatTemplateError, match="chat template 'tool_use' of bad is not valid Jinja"):
        load_chat_template(folder, "bad")


def test_additional_template_too_large_is_refused(tmp_path):
    folder = write_file_form(tmp_path / "big")
    with open(folder / "additional_chat_templates" / "tool_use.jinja", "r+b") as f:
        f.truncate((1 << 20) + 1)
    with pytest.raises(ChatTemplateError, match="additional_chat_templates/tool_use.jinja"):
        load_chat_template(folder, "big")


def test_tools_reach_the_template_through_the_generator(tiny_dir, tmp_path):
    """engine.generate.Generator.encode_chat(tools=...) renders the tool_use template."""
    import shutil

    from engine.generation.generate import Generator
    from engine.runtime.model import load_model
    folder = tmp_path / "model"
    shutil.copytree(tiny_dir, folder)
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text(TOOL_USE)
    gen = Generator(load_model(folder, provider="cpu", threads=1))
    plain, with_tools = gen.encode_chat(ASK), gen.encode_chat(ASK, tools=[WEATHER])
    assert "get_weather" not in gen.model.tokenizer.decode(plain, skip_special_tokens=False)
    assert "get_weather" in gen.model.tokenizer.decode(with_tools, skip_special_tokens=False)


def test_tools_reach_the_template_through_a_session(tiny_dir, tmp_path):
    """SessionManager.generate(..., tools=...) renders the tool_use template (the prompt grows by
    the tool schema) and without tools the default one."""
    import shutil

    from engine.api import SamplingParams
    from engine.generation.generate import collect
    from engine.runtime.model import load_model
    from engine.sessions.manager import SessionManager
    folder = tmp_path / "model"
    shutil.copytree(tiny_dir, folder)
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text(TOOL_USE)
    model = load_model(folder, provider="cpu", threads=1)
    m = SessionManager(model, tmp_path / "state")
    try:
        sampling = SamplingParams(greedy=True, max_new_tokens=2)
        a = collect(m.generate(m.open().session_id, ASK, sampling)).figures.prompt_tokens
        b = collect(m.generate(m.open().session_id, ASK, sampling, tools=[WEATHER])).figures.prompt_tokens
    finally:
        m.shutdown()
    schema = model.tokenizer.encode(json.dumps(WEATHER["function"]), add_special_tokens=False).ids
    assert b > a + len(schema) // 2
