"""Reasoning replies (`<think>…</think>`): split for display, and sent back in the history as the
model wrote them, so that the model's template alone decides what of them the prompt shows (Qwen3
keeps the reasoning of the turn in progress, the DeepSeek-R1 distills keep none)."""
from __future__ import annotations

import pytest

from engine.text.chat_template import ChatTemplate
from engine.text.reasoning import Reply, split_reasoning
from tests.support.template_cases import template_sources

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


def conversation(last_reply: str = REPLY) -> list[dict]:
    return [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": last_reply},
            {"role": "user", "content": "Tell me a joke"}]


def test_qwen3_template_drops_earlier_reasoning():
    text = ChatTemplate(QWEN3_LIKE).render(conversation())
    assert text == ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
                    "<|im_start|>user\nTell me a joke<|im_end|>\n<|im_start|>assistant\n")
    assert "Greet back" not in text


def test_qwen3_template_keeps_reasoning_of_the_turn_in_progress():
    """After the last user query (e.g. between tool calls) the template writes the reasoning back,
    split out of the content by the template itself."""
    msgs = [{"role": "system", "content": "S"}] + conversation()[:2]   # the assistant turn is the last
    text = ChatTemplate(QWEN3_LIKE).render(msgs, add_generation_prompt=False)
    assert text.endswith("<|im_start|>assistant\n<think>\nThe user greets me. Greet back.\n</think>\n\n"
                         "Hello! How can I help?<|im_end|>\n")


def test_r1_template_drops_reasoning():
    """The template keeps what follows `</think>`, blank lines included (as transformers renders it)."""
    text = ChatTemplate(R1_LIKE).render(conversation("Let me see.\n</think>\n\nHello!"))
    assert text == ("<｜User｜>Hi<｜Assistant｜>\n\nHello!<｜end▁of▁sentence｜><｜User｜>Tell me a joke"
                    "<｜Assistant｜><think>\n")


def test_a_template_that_mentions_think_still_gets_the_reply_as_written():
    """No rewriting outside the template: a template that only prints the content shows the
    reasoning, even though its text mentions `</think>`."""
    template = ("{# replies may hold </think> #}{% for m in messages %}[{{ m.role }}]{{ m.content }}"
                "{% if m.reasoning_content is defined %}(R){% endif %}{% endfor %}")
    assert ChatTemplate(template).render(conversation(), add_generation_prompt=False) == (
        "[user]Hi[assistant]" + REPLY + "[user]Tell me a joke")


def test_the_real_r1_distill_template_strips_the_reasoning_itself():
    r1 = template_sources()["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"]
    text = ChatTemplate(r1, bos_token="<BOS>").render(conversation())
    assert "Greet back" not in text and "Hello! How can I help?" in text


def test_reasoning_given_under_any_name_reaches_the_template_under_both():
    """As transformers 5: `reasoning_content`, `thinking` (gpt-oss reads it) or `reasoning`."""
    template = "{% for m in messages %}{{ m.reasoning_content }}|{{ m.thinking }};{% endfor %}"
    for key in ("reasoning_content", "thinking", "reasoning"):
        msgs = [{"role": "assistant", "content": "A", key: "R"}]
        assert ChatTemplate(template).render(msgs, add_generation_prompt=False) == "R|R;"
