"""A chat's stored messages as the chat template takes them: a reply that called tools becomes,
per round, an assistant turn with its `tool_calls` and a `tool` turn per result, then the reply's
text; so the next turn shows the model what it called and what came back."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from engine.api import ChatMessage

Message = ChatMessage | dict[str, Any]


def round_messages(text: str, calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One round: the assistant's text and calls, then each call's result."""
    out: list[dict[str, Any]] = [{"role": "assistant", "content": text, "tool_calls": [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in calls]}]
    out += [{"role": "tool", "tool_call_id": c["id"], "name": c["name"], "content": str(c.get("result", ""))}
            for c in calls]
    return out


def chat_messages(rows: Sequence[Any], with_tools: bool) -> list[Message]:
    """`rows` (MessageRows of a path) as messages; without tools a reply is its text alone."""
    out: list[Message] = []
    for row in rows:
        steps = getattr(row, "tool_steps", None) or []
        if with_tools and row.role == "assistant":
            for step in steps:
                calls = [c for c in step.get("calls", []) if isinstance(c, Mapping)]
                if calls:
                    out += round_messages(str(step.get("text", "")), calls)
        out.append(ChatMessage(row.role, row.content))
    return out
