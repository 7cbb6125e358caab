"""engine.text.chat_template: HF apply_chat_template semantics on real-world templates."""
from __future__ import annotations

import json
from datetime import datetime

import pytest

from engine.api import ChatMessage
from engine.text.chat_template import ChatTemplate, ChatTemplateError, NoChatTemplate, load_chat_template

# SmolLM2-Instruct's template (tokenizer_config.json): ChatML with a default system prompt.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# A Llama-3.2-style template: bos_token, strftime_now, trim, whitespace control, loop vars.
LLAMA3_TEMPLATE = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# Mistral-style: alternation enforced with raise_exception, eos after assistant turns.
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}"
)


def test_smollm2_adds_default_system_prompt():
    t = ChatTemplate(SMOLLM2_TEMPLATE, model_name="SmolLM2-135M-Instruct")
    out = t.render([ChatMessage("user", "Hi!")])
    assert out == (f"<|im_start|>system\n{SMOLLM2_SYSTEM}<|im_end|>\n"
                   "<|im_start|>user\nHi!<|im_end|>\n"
                   "<|im_start|>assistant\n")


def test_smollm2_with_own_system_prompt_and_history():
    t = ChatTemplate(SMOLLM2_TEMPLATE)
    msgs = [ChatMessage("system", "Be brief."), {"role": "user", "content": "2+2?"},
            ChatMessage("assistant", "4"), ChatMessage("user", "And 3+3?")]
    out = t.render(msgs)
    assert out == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                   "<|im_start|>user\n2+2?<|im_end|>\n"
                   "<|im_start|>assistant\n4<|im_end|>\n"
                   "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
                   "<|im_start|>assistant\n")
    assert SMOLLM2_SYSTEM not in out


def test_add_generation_prompt_false():
    t = ChatTemplate(SMOLLM2_TEMPLATE)
    out = t.render([ChatMessage("system", "S"), ChatMessage("user", "U")],
                   add_generation_prompt=False)
    assert out.endswith("<|im_start|>user\nU<|im_end|>\n")
    assert "assistant" not in out


def test_rendering_a_prefix_is_a_prefix_of_the_longer_conversation():
    """What the KV-cache reuse relies on: history renders identically in a longer chat."""
    t = ChatTemplate(SMOLLM2_TEMPLATE)
    turn1 = [ChatMessage("user", "Hi")]
    turn2 = turn1 + [ChatMessage("assistant", "Hello!"), ChatMessage("user", "Bye")]
    first = t.render(turn1, add_generation_prompt=True)
    assert t.render(turn2).startswith(first + "Hello!<|im_end|>\n")


def test_llama3_uses_bos_token_and_todays_date():
    t = ChatTemplate(LLAMA3_TEMPLATE, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                     model_name="Llama-3.2-1B-Instruct")
    before = datetime.now()
    out = t.render([ChatMessage("system", "  Be nice.  "), ChatMessage("user", " Hello ")])
    after = datetime.now()
    dates = {d.strftime("%d %b %Y") for d in (before, after)}
    assert any(out == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                       "Cutting Knowledge Date: December 2023\n"
                       f"Today Date: {d}\n\n"
                       "Be nice.<|eot_id|>"
                       "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n") for d in dates), out


def test_extra_variables_reach_the_template():
    t = ChatTemplate(LLAMA3_TEMPLATE, bos_token="<BOS>")
    out = t.render([ChatMessage("user", "x")], date_string="01 Jan 2030")
    assert "Today Date: 01 Jan 2030\n" in out
    assert out.startswith("<BOS><|start_header_id|>system")
    # An extra variable also overrides a special token of the same name, as in HF.
    assert t.render([ChatMessage("user", "x")], bos_token="").startswith("<|start_header_id|>")


def test_mistral_template_renders_and_raise_exception_becomes_clear_error():
    t = ChatTemplate(MISTRAL_TEMPLATE, bos_token="<s>", eos_token="</s>",
                     model_name="Mistral-7B-Instruct")
    ok = t.render([ChatMessage("user", "Hi"), ChatMessage("assistant", "Hello"),
                   ChatMessage("user", "Bye")])
    assert ok == "<s>[INST] Hi [/INST]Hello</s>[INST] Bye [/INST]"
    with pytest.raises(ChatTemplateError) as info:
        t.render([ChatMessage("user", "a"), ChatMessage("user", "b")])
    message = str(info.value)
    assert "Mistral-7B-Instruct" in message
    assert "Conversation roles must alternate" in message
    with pytest.raises(ChatTemplateError, match="Only user and assistant roles"):
        t.render([ChatMessage("user", "u"), ChatMessage("system", "s")])


def test_undefined_variable_error_names_model_and_cause():
    t = ChatTemplate("{{ messages[0]['content'] }}{{ settings.name }}", model_name="Odd-Model")
    with pytest.raises(ChatTemplateError) as info:
        t.render([ChatMessage("user", "x")])
    assert "Odd-Model" in str(info.value)
    assert "settings" in str(info.value)
    assert isinstance(info.value.__cause__, Exception)


def test_undefined_plain_variable_renders_empty_like_hf():
    """HF uses Jinja's default Undefined: `{{ missing }}` is "", `{% if missing %}` is false."""
    t = ChatTemplate("{% if custom_flag %}X{% endif %}[{{ missing }}]")
    assert t.render([]) == "[]"


def test_python_errors_inside_template_are_wrapped():
    t = ChatTemplate("{{ 1 / 0 }}", model_name="M")
    with pytest.raises(ChatTemplateError, match="M.*ZeroDivisionError"):
        t.render([])


def test_syntax_error_names_model():
    with pytest.raises(ChatTemplateError, match="Broken-Model.*line 1"):
        ChatTemplate("{% for m in messages %}{{ m }", model_name="Broken-Model")


def test_sandbox_blocks_mutation_and_unsafe_access():
    t = ChatTemplate("{{ messages.append({'role': 'x'}) }}", model_name="Evil")
    with pytest.raises(ChatTemplateError, match="Evil"):
        t.render([ChatMessage("user", "x")])
    t = ChatTemplate("{{ messages.__class__.__mro__ }}", model_name="Evil")
    with pytest.raises(ChatTemplateError, match="Evil.*unsafe"):
        t.render([])


def test_tojson_does_not_escape_html_and_keeps_unicode_and_order():
    t = ChatTemplate("{{ messages[0] | tojson }}|{{ {'b': 1, 'a': [1, 2]} | tojson(indent=2) }}")
    out = t.render([{"role": "user", "content": "<b>café & 'x'</b>"}])
    first, second = out.split("|", 1)
    assert json.loads(first) == {"role": "user", "content": "<b>café & 'x'</b>"}
    assert first == '{"role": "user", "content": "<b>café & \'x\'</b>"}'
    assert second == '{\n  "b": 1,\n  "a": [\n    1,\n    2\n  ]\n}'


def test_loopcontrols_and_generation_block():
    src = ("{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
           "{% if loop.index > 3 %}{% break %}{% endif %}"
           "{% generation %}{{ m.content }};{% endgeneration %}{% endfor %}")
    msgs = [{"role": "system", "content": "s"}] + [{"role": "user", "content": str(i)}
                                                     for i in range(5)]
    assert ChatTemplate(src).render(msgs) == "0;1;"


def test_tools_and_documents_are_none_by_default():
    t = ChatTemplate("{{ tools is none }} {{ documents is none }} {{ tools | tojson }}")
    assert t.render([]) == "True True null"
    assert ChatTemplate("{{ tools | length }}").render([], tools=[{"name": "f"}]) == "1"


def test_special_tokens_dict_is_available():
    t = ChatTemplate("{{ unk_token }}{{ pad_token }}{{ bos_token }}", bos_token="<s>",
                     special_tokens={"unk_token": "<unk>", "pad_token": "<pad>",
                                     "bos_token": "ignored"})
    assert t.render([]) == "<unk><pad><s>"


def test_bad_message_type_is_a_type_error():
    with pytest.raises(TypeError):
        ChatTemplate(SMOLLM2_TEMPLATE).render(["just a string"])


# ---------------------------------------------------------------- loading from a model dir

def write_json(path, data):
    path.write_text(json.dumps(data), encoding="utf-8")


def test_load_from_tokenizer_config_with_token_dicts(tmp_path):
    write_json(tmp_path / "tokenizer_config.json", {
        "chat_template": SMOLLM2_TEMPLATE,
        "bos_token": {"__type": "AddedToken", "content": "<|im_start|>", "lstrip": False},
        "eos_token": "<|im_end|>",
        "unk_token": {"content": "<|endoftext|>"},
        "pad_token": None,
        "additional_special_tokens": ["<|im_start|>", {"content": "<|im_end|>"}],
    })
    t = load_chat_template(tmp_path, "SmolLM2-135M-Instruct")
    assert t.origin == "tokenizer_config.json"
    assert (t.bos_token, t.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert t.variables["unk_token"] == "<|endoftext|>"
    assert "pad_token" not in t.variables
    assert t.variables["additional_special_tokens"] == ["<|im_start|>", "<|im_end|>"]
    assert t.render([ChatMessage("user", "Hi")]).startswith(
        f"<|im_start|>system\n{SMOLLM2_SYSTEM}<|im_end|>\n")


def test_chat_template_jinja_file_wins(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("JINJA {{ bos_token }}", encoding="utf-8")
    write_json(tmp_path / "tokenizer_config.json",
               {"chat_template": "CONFIG", "bos_token": "<s>"})
    t = load_chat_template(tmp_path, "m")
    assert t.origin == "chat_template.jinja"
    assert t.render([]) == "JINJA <s>"


def test_named_templates_pick_default(tmp_path):
    write_json(tmp_path / "tokenizer_config.json", {"chat_template": [
        {"name": "tool_use", "template": "TOOLS"},
        {"name": "default", "template": "DEFAULT {{ messages | length }}"},
    ]})
    assert load_chat_template(tmp_path, "m").render([ChatMessage("user", "x")]) == "DEFAULT 1"


def test_named_templates_without_default_is_an_error(tmp_path):
    write_json(tmp_path / "tokenizer_config.json", {"chat_template": [
        {"name": "tool_use", "template": "TOOLS"}, {"name": "rag", "template": "RAG"}]})
    with pytest.raises(ChatTemplateError, match="Some-Model.*tool_use.*rag.*default"):
        load_chat_template(tmp_path, "Some-Model")


def test_no_template_is_no_chat_template_naming_the_model(tmp_path):
    """A base model gets no made-up chat format: it can only continue text."""
    write_json(tmp_path / "tokenizer_config.json", {"eos_token": "<|im_end|>"})
    with pytest.raises(NoChatTemplate, match=r"^Base-270M has no chat template; use /v1/completions$"):
        load_chat_template(tmp_path, "Base-270M")
    with pytest.raises(ChatTemplateError):      # callers catching template errors see it too
        load_chat_template(tmp_path / "missing", "m")


def test_namespace_refuses_underscore_names_and_dict_has_no_escape():
    """As transformers 5's sandbox: `namespace(_x=...)` and `dict.__class__` are refused."""
    with pytest.raises(ChatTemplateError, match="underscore"):
        ChatTemplate("{% set ns = namespace(_x=1) %}{{ ns._x }}").render([])
    with pytest.raises(ChatTemplateError, match="underscore"):
        ChatTemplate("{% set ns = namespace(a=1) %}{% set ns._b = 2 %}").render([])
    assert ChatTemplate("{% set ns = namespace(a=1) %}{% set ns.a = ns.a + 1 %}{{ ns.a }}"
                        "{{ dict(b=2) | tojson }}").render([]) == '2{"b": 2}'
    assert ChatTemplate("{{ dict.__class__ }}").render([]) == ""


def test_none_values_are_dropped_as_transformers_5_does():
    t = ChatTemplate("{% for m in messages %}{{ 'content' in m }},{{ m.tool_calls is defined }};{% endfor %}")
    msgs = [{"role": "assistant", "content": None, "tool_calls": None}, {"role": "user", "content": "x"}]
    assert t.render(msgs, add_generation_prompt=False) == "False,False;True,False;"


def test_broken_tokenizer_config_names_model(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ChatTemplateError, match="tokenizer_config.json of Bad-Model"):
        load_chat_template(tmp_path, "Bad-Model")


def test_chat_template_json_file(tmp_path):
    write_json(tmp_path / "chat_template.json", {"chat_template": "FROM JSON"})
    write_json(tmp_path / "tokenizer_config.json", {"chat_template": "CONFIG"})
    t = load_chat_template(tmp_path, "m")
    assert (t.origin, t.render([])) == ("chat_template.json", "FROM JSON")
