"""Reasoning replies (`<think>…</think>`) split at the engine/app boundary, and kept out
of the history sent back when the model's template says so (Qwen3, DeepSeek-R1 distills)."""
from __future__ import annotations

import pytest

from engine.text.chat_template import CHATML_TEMPLATE, ChatTemplate
from engine.text.reasoning import Reply, for_template, split_reasoning, template_knows_reasoning

# The structure of Qwen3's template (written for this test): an assistant message's reasoning is
# `reasoning_content`, or what precedes `</think>` in its content; it is written back only for
# the turns after the last user query (a tool-calling chain in progress), never for older turns.
QWEN3_LIKE = """{%- set ns = namespace(last_query_index=messages|length - 1, looking=true) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.looking and message.role == "user" %}
        {%- set ns.looking = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == "assistant" %}
        {%- set reasoning = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and reasoning %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n' + content + '<|im_end|>\\n' }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""
# DeepSeek-R1 distills: the answer after `</think>` only; the generation prompt opens <think>.
R1_LIKE = ("{% for message in messages %}{% set content = message['content'] %}"
           "{% if message['role'] == 'user' %}{{ '<｜User｜>' + content }}"
           "{% elif message['role'] == 'assistant' %}"
           "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
           "{{ '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}{% endif %}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<｜Assistant｜><think>\\n' }}{% endif %}")

REPLY = "<think>\nThe user greets me. Greet back.\n</think>\n\nHello! How can I help?"


@pytest.mark.parametrize("text,expected", [
    (REPLY, Reply("The user greets me. Greet back.", "Hello! How can I help?")),
    ("  \n<think>a\nb</think>answer", Reply("a\nb", "answer")),
    ("<think>\nstill thinking", Reply("still thinking", "", thinking=True)),
    ("<think></think>\n\nquick", Reply("", "quick")),
    # R1 distills: <think> was in the prompt, the reply starts inside the reasoning.
    ("Let me see.\n</think>\n\n42", Reply("Let me see.", "42")),
    ("plain answer", Reply(None, "plain answer")),
    ("Use the <think> tag like <think>x</think>.", Reply(None, "Use the <think> tag like <think>x</think>.")),
    ("", Reply(None, "")),
])
def test_split_reasoning(text, expected):
    assert split_reasoning(text) == expected


def test_which_templates_know_reasoning():
    assert template_knows_reasoning(QWEN3_LIKE) and template_knows_reasoning(R1_LIKE)
    assert not template_knows_reasoning(CHATML_TEMPLATE)


def conversation(last_reply: str = REPLY) -> list[dict]:
    return [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": last_reply},
            {"role": "user", "content": "Tell me a joke"}]


def test_qwen3_template_drops_earlier_reasoning():
    text = ChatTemplate(QWEN3_LIKE).render(conversation())
    assert text == ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
                    "<|im_start|>user\nTell me a joke<|im_end|>\n<|im_start|>assistant\n")
    assert "Greet back" not in text


def test_qwen3_template_keeps_reasoning_of_the_turn_in_progress():
    """After the last user query (e.g. between tool calls) the template writes the reasoning back;
    the split passes it as reasoning_content, which it reads first."""
    msgs = [{"role": "system", "content": "S"}] + conversation()[:2]   # the assistant turn is the last
    text = ChatTemplate(QWEN3_LIKE).render(msgs, add_generation_prompt=False)
    assert text.endswith("<|im_start|>assistant\n<think>\nThe user greets me. Greet back.\n</think>\n\n"
                         "Hello! How can I help?<|im_end|>\n")


def test_r1_template_drops_reasoning():
    text = ChatTemplate(R1_LIKE).render(conversation("Let me see.\n</think>\n\nHello!"))
    assert text == ("<｜User｜>Hi<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Tell me a joke"
                    "<｜Assistant｜><think>\n")


def test_a_template_that_says_nothing_gets_the_reply_as_written():
    text = ChatTemplate(CHATML_TEMPLATE).render(conversation())
    assert "<|im_start|>assistant\n" + REPLY + "<|im_end|>" in text


def test_for_template_leaves_other_messages_alone():
    user = {"role": "user", "content": REPLY}
    assert for_template(user, True) is user
    given = {"role": "assistant", "content": "x", "reasoning_content": "r"}
    assert for_template(given, True) is given
    split = for_template({"role": "assistant", "content": REPLY}, True)
    assert split == {"role": "assistant", "content": "Hello! How can I help?",
                     "reasoning_content": "The user greets me. Greet back."}
    assert for_template({"role": "assistant", "content": REPLY}, False)["content"] == REPLY
