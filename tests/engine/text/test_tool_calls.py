"""Tool calls read out of replies in each model family's format (engine.text.tool_calls): whole
replies, the same replies streamed in pieces cut at every position, the format detected from
real chat templates, and tool definitions checked as untrusted input."""
from __future__ import annotations

import json

import pytest

from engine.text.chat_template import ChatTemplate
from engine.text.tool_calls import (HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS, ContentDelta, ToolCallDelta,
                                    ToolDefinitionError, ToolFormat, check_tools, collect, detect_format)
from tests.support.tool_templates import LLAMA31_TEMPLATE, MISTRAL_V3_TEMPLATE, QWEN25_TEMPLATE
from tests.support.tiny_gguf import CHATML_TEMPLATE   # plain ChatML: no tool-call format

WEATHER_ARGS = '{"city": "Paris", "days": [1, {"unit": "}C\\""}]}'

SAME = None    # the content is the reply as written (it holds no call)
# (format, reply, expected content, expected [(name, arguments)])
CASES = [
    (HERMES, f'<tool_call>\n{{"name": "get_weather", "arguments": {WEATHER_ARGS}}}\n</tool_call>',
     "", [("get_weather", WEATHER_ARGS)]),
    (HERMES, 'Let me look.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
             '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>',
     "Let me look.", [("a", '{"x": 1}'), ("b", "{}")]),
    (HERMES, '<tool_call>\n{"arguments": {"q": "late name"}, "name": "search"}\n</tool_call>',
     "", [("search", '{"q": "late name"}')]),
    (HERMES, '<tool_call>\n{"name": "f", "arguments": "{\\"x\\": 2}"}\n</tool_call>', "", [("f", '{"x": 2}')]),
    (HERMES, '<tool_call>\n{"name": "f"}\n</tool_call>', "", [("f", "{}")]),
    (HERMES, "Use <tool_call> tags like <this>, {braces} too.  ", SAME, []),
    (HERMES, "<tool_call>\nnot JSON at all</tool_call> then text", SAME, []),
    (HERMES, '<tool_call>\n{"name": 3, "arguments": {}}\n</tool_call>', SAME, []),
    (HERMES, '<tool_call>\n{"name": "cut", "arguments": {"x": [1, 2', "", [("cut", '{"x": [1, 2')]),
    (LLAMA3, '{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [("get_weather", '{"city": "Paris"}')]),
    (LLAMA3, '  {"type": "function", "name": "f", "parameters": {}}', "", [("f", "{}")]),
    (LLAMA3, '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {"y": "2"}}',
     "", [("a", '{"x": 1}'), ("b", '{"y": "2"}')]),
    (LLAMA3, '{"answer": 42} is JSON, not a call', SAME, []),
    (LLAMA3, 'The call would be {"name": "f", "parameters": {}}', SAME, []),
    (MISTRAL, '[TOOL_CALLS] [{"name": "a", "arguments": {"x": "[1]"}}, {"name": "b", "arguments": {"y": null}}]',
     "", [("a", '{"x": "[1]"}'), ("b", '{"y": null}')]),
    (MISTRAL, '[TOOL_CALLS][{"name": "a", "arguments": {}, "id": "abcdefghi"}]', "", [("a", "{}")]),
    (MISTRAL, "Brackets [TOOL_ and [TOOL_CALLS] alone", SAME, []),
    # The marker is a special token: a detokenizer that skips special tokens leaves it out.
    (MISTRAL, ' [{"name": "a", "arguments": {"x": 1}}]', "", [("a", '{"x": 1}')]),
    (MISTRAL, "[1, 2] is a list", SAME, []),
    (MISTRAL, 'Then [{"name": "a", "arguments": {}}]', SAME, []),
    (MISTRAL_ARGS, '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]now[ARGS]{}',
     "", [("get_weather", '{"city": "Paris"}'), ("now", "{}")]),
    (MISTRAL_ARGS, "[TOOL_CALLS]not a name[ARGS]{}", SAME, []),
]


def _summary(parsed) -> tuple[str, list[tuple[str, str]]]:
    return parsed.content, [(c.name, c.arguments) for c in parsed.tool_calls]


CASES = [(fmt, text, text if content is SAME else content, calls) for fmt, text, content, calls in CASES]


@pytest.mark.parametrize("fmt,text,content,calls", CASES, ids=[f"{c[0].name}-{i}" for i, c in enumerate(CASES)])
def test_whole_reply(fmt: ToolFormat, text: str, content: str, calls: list[tuple[str, str]]):
    parsed = fmt.parse(text)
    assert _summary(parsed) == (content, calls)
    assert len({c.id for c in parsed.tool_calls}) == len(calls)
    for call in parsed.tool_calls:
        if fmt.id_length:
            assert len(call.id) == 9 and call.id.isalnum()
        else:
            assert call.id.startswith("call_")


@pytest.mark.parametrize("fmt,text,content,calls", CASES, ids=[f"{c[0].name}-{i}" for i, c in enumerate(CASES)])
def test_streamed_in_two_pieces_at_every_position(fmt: ToolFormat, text: str, content: str,
                                                  calls: list[tuple[str, str]]):
    for cut in range(len(text) + 1):
        stream = fmt.stream()
        deltas = stream.feed(text[:cut]) + stream.feed(text[cut:]) + stream.finish()
        assert _summary(collect(deltas)) == (content, calls), f"cut at {cut}: {text[:cut]!r}|{text[cut:]!r}"


@pytest.mark.parametrize("fmt,text,content,calls", CASES, ids=[f"{c[0].name}-{i}" for i, c in enumerate(CASES)])
def test_streamed_one_character_at_a_time(fmt: ToolFormat, text: str, content: str, calls: list[tuple[str, str]]):
    stream = fmt.stream()
    deltas = [d for ch in text for d in stream.feed(ch)] + stream.finish()
    assert _summary(collect(deltas)) == (content, calls)
    heads = [d for d in deltas if isinstance(d, ToolCallDelta) and d.id is not None]
    assert [(d.index, d.name) for d in heads] == [(i, name) for i, (name, _) in enumerate(calls)]
    # A call's head comes before any of its argument fragments, and indexes never go back.
    seen: set[int] = set()
    last = -1
    for d in deltas:
        if isinstance(d, ToolCallDelta):
            assert d.index >= last
            last = d.index
            if d.id is None:
                assert d.index in seen
            seen.add(d.index)


def test_arguments_stream_before_the_call_ends():
    stream = HERMES.stream()
    first = stream.feed('<tool_call>\n{"name": "write", "arguments": {"text": "once upon')
    assert first == [ToolCallDelta(0, '{"text": "once upon', first[0].id, "write")]
    more = stream.feed(' a time"}}\n</tool_call>')
    assert more == [ToolCallDelta(0, ' a time"}')]
    assert stream.finish() == []


def test_text_that_may_open_a_call_is_held_back_then_released():
    stream = HERMES.stream()
    assert stream.feed("Hello <tool") == [ContentDelta("Hello")]
    assert stream.feed("box> done") == [ContentDelta(" <toolbox> done")]
    assert stream.finish() == []


def test_trailing_space_of_a_plain_reply_is_kept():
    stream = HERMES.stream()
    deltas = stream.feed("Hi \n") + stream.finish()
    assert collect(deltas).content == "Hi \n"


@pytest.mark.parametrize("template,fmt", [(QWEN25_TEMPLATE, HERMES), (LLAMA31_TEMPLATE, LLAMA3),
                                          (MISTRAL_V3_TEMPLATE, MISTRAL), (CHATML_TEMPLATE, None)])
def test_format_detected_from_real_templates(template: str, fmt: ToolFormat | None):
    assert detect_format(ChatTemplate(template)) is fmt
    assert detect_format(template) is fmt


def test_the_tool_use_template_decides():
    t = ChatTemplate(CHATML_TEMPLATE, named={"tool_use": QWEN25_TEMPLATE})
    assert detect_format(t) is HERMES


def test_v11_mistral_template_detected():
    source = ("{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
              "{% for tc in m.tool_calls %}[TOOL_CALLS]{{ tc.function.name }}[ARGS]"
              "{{ tc.function.arguments }}{% endfor %}")
    assert detect_format(source) is MISTRAL_ARGS


# ---- tool definitions ------------------------------------------------------------------------
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                                 "parameters": {"type": "object",
                                                                "properties": {"city": {"type": "string"}},
                                                                "required": ["city"]}}}


def test_check_tools_takes_both_shapes():
    flat = {"type": "function", "name": "now", "strict": True}
    assert check_tools([WEATHER_TOOL, flat]) == [
        WEATHER_TOOL, {"type": "function", "function": {"name": "now", "strict": True,
                                                        "parameters": {"type": "object", "properties": {}}}}]


def _deep(n: int) -> dict:
    schema: dict = {"type": "object"}
    for _ in range(n):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


@pytest.mark.parametrize("tools,message", [
    ("not a list", "list of function tools"),
    ([{"type": "web_search"}], "only tools of type 'function'"),
    ([{"type": "function", "function": {"name": "has space"}}], "name is 1 to 64"),
    ([{"type": "function", "function": {"name": "x" * 65}}], "name is 1 to 64"),
    ([{"type": "function", "name": "a"}, {"type": "function", "name": "a"}], "given twice"),
    ([{"type": "function", "name": "a", "parameters": {"type": "string"}}], "must describe an object"),
    ([{"type": "function", "name": "a", "parameters": {"type": 5}}], "not a valid JSON schema"),
    ([{"type": "function", "name": "a", "parameters": _deep(40)}], "nests deeper"),
    ([{"type": "function", "name": "a", "description": "d" * 70000}], "characters of JSON"),
    ([{"type": "function", "name": "a", "strict": "yes"}], "'strict' is true or false"),
    ([{"type": "function", "name": f"t{i}"} for i in range(129)], "at most 128"),
])
def test_bad_tool_definitions_are_refused(tools, message):
    with pytest.raises(ToolDefinitionError, match=message):
        check_tools(tools)


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS], ids=lambda f: f.name)
@pytest.mark.parametrize("parallel", [False, True])
def test_grammars_compile(fmt: ToolFormat, parallel: bool):
    import llguidance
    grammar = fmt.grammar(check_tools([WEATHER_TOOL, {"type": "function", "name": "now"}]), parallel)
    assert llguidance.LLMatcher.validate_grammar(grammar) == ""
    assert json.dumps("get_weather") in grammar


GOOD_CALLS = {
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "llama3": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    "mistral": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
    "mistral_args": '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
}


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS], ids=lambda f: f.name)
def test_grammar_takes_a_valid_call_and_refuses_others(fmt: ToolFormat):
    """Driven by the tiny tokenizer through the engine's constraint matcher: the call the format's
    parser reads is a complete sentence; another name, or arguments against the schema, are not."""
    from engine.text.constraints import ConstraintCompiler, ConstraintError, lark
    from tests.support.tiny_gguf import trained_tokenizer
    tokenizer = trained_tokenizer()
    compiler = ConstraintCompiler(tokenizer, [tokenizer.token_to_id("<|im_end|>")])
    rule = lark(fmt.grammar(check_tools([WEATHER_TOOL, {"type": "function", "name": "now"}])))

    def accepts(text: str) -> bool:
        matcher = compiler.matcher(rule)
        try:
            for token in tokenizer.encode(text, add_special_tokens=False).ids:
                matcher.advance(token)
        except ConstraintError:
            return False
        return matcher.complete

    good = GOOD_CALLS[fmt.name]
    assert accepts(good)
    assert _summary(fmt.parse(good)) == ("", [("get_weather", '{"city": "Paris"}')])
    assert not accepts(good.replace("get_weather", "get_wether"))
    assert not accepts(good.replace('"Paris"', "7"))
    assert not accepts(good.replace('{"city": "Paris"}', "{}"))


PIECES = ["<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", '{"name": "f", ', '"name"',
          '"arguments": ', '"parameters": ', "{", "}", "[", "]", '"', "\\", ",", ";", ":", " ", "\n", "x", "é", "7",
          '{"a": [1, "}"]}', "null"]


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS], ids=lambda f: f.name)
def test_any_text_streams_as_it_parses(fmt: ToolFormat):
    """Replies made of the formats' own pieces in any order, cut anywhere: the stream never fails,
    adds up to the whole reply's reading, and loses no text that is not part of a call."""
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(st.lists(st.sampled_from(PIECES), max_size=24), st.lists(st.integers(0, 400), max_size=4))
    def check(pieces: list[str], cuts: list[int]) -> None:
        text = "".join(pieces)
        whole = fmt.parse(text)
        stream = fmt.stream()
        deltas, at = [], 0
        for cut in sorted(c % (len(text) + 1) for c in cuts) + [len(text)]:
            deltas += stream.feed(text[at:cut])
            at = cut
        deltas += stream.finish()
        assert _summary(collect(deltas)) == _summary(whole)
        for call in whole.tool_calls:
            assert call.arguments.strip()
        if not whole.tool_calls:
            assert whole.content == text
    check()
