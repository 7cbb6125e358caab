"""Replies for the fake engine that call a tool in the Hermes/Qwen format (what a model with
Qwen2.5's template writes), then answer with the tool's result once it is in the chat."""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from engine.api import ChatMessage


def call_text(name: str, arguments: dict[str, Any], preface: str = "") -> str:
    return f'{preface}<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def calling(name: str = "add", arguments: dict[str, Any] | None = None,
            preface: str = "") -> Callable[[Sequence[ChatMessage]], str]:
    """Asked by the user: call `name`; given a tool's result: "The answer is <result>."."""
    args = {"a": 19, "b": 23} if arguments is None else arguments

    def reply(messages: Sequence[ChatMessage]) -> str:
        last = messages[-1]
        if last.role == "tool":
            return f"The answer is {last.content}."
        return call_text(name, args, preface)

    return reply
