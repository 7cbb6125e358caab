"""Message sets for comparing chat-template renderers: every template in tests/data/chat_templates
against each set, with and without a generation prompt (and with enable_thinking on and off where
a set is about reasoning). A case is JSON: what packaging/hf_templates.py --render reads."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TEMPLATES = Path(__file__).resolve().parent.parent / "data" / "chat_templates"

# The same special tokens for every template: the comparison is about the renderer, not the model.
SPECIAL = {"bos_token": "<BOS>", "eos_token": "<EOS>", "unk_token": "<unk>"}
# Llama 3.x templates print today's date unless given one; a fixed one keeps runs comparable.
KWARGS = {"date_string": "26 Jul 2024"}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                   "required": ["city"]}}}]
CALL_ID = "abc123XYZ"   # nine alphanumerics: what Mistral's templates demand of a tool call id
ARGS = {"city": "Paris"}
USER, SYSTEM = {"role": "user", "content": "Hello!"}, {"role": "system", "content": "You are terse."}
ANSWER = {"role": "assistant", "content": "Hi there."}
FOLLOW_UP = {"role": "user", "content": "What is 2+2?"}
ASK_WEATHER = {"role": "user", "content": "What is the weather in Paris?"}
TOOL_RESULT = {"role": "tool", "tool_call_id": CALL_ID, "name": "get_weather", "content": '{"temp_c": 21}'}


def _call(arguments: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", **extra, "tool_calls": [
        {"id": CALL_ID, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]}


# name -> (messages, tools, thinking variants): sets about reasoning also run with enable_thinking.
MESSAGE_SETS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None, bool]] = {
    "plain": ([USER], None, True),
    "system": ([SYSTEM, USER], None, False),
    "multi_turn": ([SYSTEM, USER, ANSWER, FOLLOW_UP], None, True),
    "multi_turn_no_system": ([USER, ANSWER, FOLLOW_UP], None, False),
    "reasoning_in_content": ([USER, {"role": "assistant", "content": "<think>\nThey greet me.\n</think>\n\nHi there."},
                              FOLLOW_UP], None, True),
    "reasoning_content_field": ([USER, {"role": "assistant", "content": "Hi there.",
                                        "reasoning_content": "They greet me."}, FOLLOW_UP], None, True),
    "reasoning_last_turn": ([USER, {"role": "assistant", "content": "<think>\nThey greet me.\n</think>\n\nHi there."}],
                            None, False),
    "tools_defined": ([SYSTEM, ASK_WEATHER], TOOLS, False),
    "toolcall_dict_args": ([ASK_WEATHER, _call(ARGS, content=""), TOOL_RESULT], TOOLS, False),
    "toolcall_str_args": ([ASK_WEATHER, _call(json.dumps(ARGS), content=""), TOOL_RESULT], TOOLS, False),
    "toolcall_no_content": ([ASK_WEATHER, _call(ARGS), TOOL_RESULT], TOOLS, False),
    # OpenAI clients send `content: null` beside tool calls: transformers 5 drops it, 4.57 does not.
    "toolcall_null_content": ([ASK_WEATHER, _call(json.dumps(ARGS), content=None), TOOL_RESULT], TOOLS, False),
    "tool_answer_follow_up": ([SYSTEM, ASK_WEATHER, _call(ARGS, content=""), TOOL_RESULT,
                               {"role": "assistant", "content": "It is 21 °C in Paris."},
                               {"role": "user", "content": "Thanks!"}], TOOLS, False),
    "reasoning_tool_chain": ([ASK_WEATHER, _call(ARGS, content="", reasoning_content="I need the weather tool."),
                              TOOL_RESULT], TOOLS, True),
}


def template_sources() -> dict[str, str]:
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(TEMPLATES.glob("*.jinja"))}


def build_cases(templates: dict[str, str]) -> list[dict[str, Any]]:
    """Every template × message set × generation prompt (× enable_thinking where it matters)."""
    cases = []
    for name in templates:
        for set_name, (messages, tools, thinking) in MESSAGE_SETS.items():
            for agp in (True, False):
                variants: list[dict[str, Any]] = [{}]
                if thinking:
                    variants += [{"enable_thinking": True}, {"enable_thinking": False}]
                for extra in variants:
                    suffix = "".join(f"-{k}={v}" for k, v in extra.items())
                    cases.append({"id": f"{name}/{set_name}/agp={agp}{suffix}", "template": name,
                                  "special": SPECIAL, "messages": messages, "tools": tools,
                                  "add_generation_prompt": agp, "kwargs": {**KWARGS, **extra}})
    return cases
