"""Tool calling for the endpoints: a request's tools and tool_choice, checked; the model's format
for them; and its reply's tool calls in the shapes of chat completions and the Responses API.

The model sees the tools through its own chat template (`render(messages, tools=...)`, as
transformers); its reply is read in the format that template teaches (engine.text.tool_calls).
`tool_choice` "required" or a named function constrains decoding to a call in that format.
"none" renders no tools: the model is not shown what it may not call, so its reply is text.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from engine.api import ChatTemplateSource, OutputConstraint, SamplingParams

from engine.text.tool_calls import (ContentDelta, Delta, ParsedOutput, ToolCall, ToolCallDelta, ToolCallStream,
                                    ToolDefinitionError, ToolFormat, check_tools, detect_format)
from .errors import ApiError

CHOICES = ("auto", "none", "required")


@dataclass(frozen=True)
class ToolRequest:
    """A request's tools (checked, in chat completions' nested form) and what it asks of them."""
    tools: list[dict[str, Any]]
    choice: str                 # "auto", "none", "required" or "function" (the one named)
    function: str | None        # the function tool_choice names
    parallel: bool

    @property
    def offered(self) -> list[dict[str, Any]] | None:
        """The tools the template shows the model (none for tool_choice "none")."""
        return self.tools if self.tools and self.choice != "none" else None

    def forced(self) -> list[dict[str, Any]] | None:
        """The tools the reply must call one of (None: the model decides)."""
        if self.choice == "required":
            return self.tools
        if self.choice == "function":
            return [t for t in self.tools if t["function"]["name"] == self.function]
        return None


def tool_request(tools: Any, tool_choice: Any, parallel: bool | None) -> ToolRequest:
    """`tools`, `tool_choice` and `parallel_tool_calls` of a request, checked (400s naming the field).
    A named function is `{"type": "function", "function": {"name": ...}}` (chat completions) or
    `{"type": "function", "name": ...}` (Responses); either is taken on both endpoints."""
    try:
        checked = [] if tools is None else check_tools(tools)
    except ToolDefinitionError as exc:
        raise ApiError(400, str(exc), "tools") from None
    function = None
    if tool_choice is None:
        choice = "auto" if checked else "none"
    elif isinstance(tool_choice, str):
        if tool_choice not in CHOICES:
            raise ApiError(400, f"'tool_choice' is 'auto', 'none', 'required' or a function; got "
                                f"'{tool_choice[:40]}'", "tool_choice")
        choice = tool_choice
    elif isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        inner = tool_choice.get("function")
        name = inner.get("name") if isinstance(inner, dict) else tool_choice.get("name")
        if not isinstance(name, str):
            raise ApiError(400, "'tool_choice' names its function: {\"type\": \"function\", \"function\": "
                                "{\"name\": ...}}", "tool_choice")
        if name not in {t["function"]["name"] for t in checked}:
            raise ApiError(400, f"'tool_choice' names the function '{name[:64]}', which 'tools' does not have",
                           "tool_choice")
        choice, function = "function", name
    else:
        raise ApiError(400, "'tool_choice' is 'auto', 'none', 'required' or {\"type\": \"function\", ...}",
                       "tool_choice")
    if choice in ("required", "function") and not checked:
        raise ApiError(400, "'tool_choice' asks for a tool call but 'tools' is empty", "tool_choice")
    return ToolRequest(checked, choice, function, True if parallel is None else parallel)


def tool_format(template: ChatTemplateSource | str | None, model: str, request: ToolRequest) -> ToolFormat | None:
    """The format the reply is read in: None when no tools are offered; a 400 naming the model
    when its chat template teaches no tool-call format."""
    if request.offered is None:
        return None
    fmt = detect_format(template) if template is not None else None
    if fmt is None:
        raise ApiError(400, f"{model} has no tool-call format in its chat template: it cannot be given 'tools'",
                       "tools", "tools_not_supported")
    return fmt


def constraint(fmt: ToolFormat | None, request: ToolRequest) -> OutputConstraint | None:
    """For tool_choice "required" or a named function: the reply must be such a call (one, or
    several when parallel calls are allowed), its arguments valid for the tool's schema."""
    forced = request.forced()
    if fmt is None or forced is None:
        return None
    from engine.text.constraints import lark  # noqa: PLC0415 - llguidance loads only for forced calls
    try:
        return lark(fmt.grammar(forced, parallel=request.parallel and request.choice == "required"))
    except ValueError as exc:        # a grammar over the constraint's bounds (many, large tools)
        raise ApiError(400, f"the tools cannot be enforced for 'tool_choice': {exc}", "tools") from None


def constrained(sampling: Callable[[int], SamplingParams], fmt: ToolFormat | None,
                rule: OutputConstraint | None) -> Callable[[int], SamplingParams]:
    """`sampling` with the reply held to `rule`, and the text of the format's markers kept (a
    tokenizer may make them special tokens, which otherwise add no text). Unchanged without tools."""
    if fmt is None:
        return sampling

    def params(n: int) -> SamplingParams:
        made = sampling(n)
        return dataclasses.replace(made, constraint=rule or made.constraint, keep_special=fmt.markers)
    return params


def name_tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool results given the name of the function whose call they answer (templates that write
    it read `message.name`), when an earlier assistant message has that call."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            names[call["id"]] = call["function"]["name"]
        if message["role"] == "tool" and "name" not in message and message.get("tool_call_id") in names:
            message["name"] = names[message["tool_call_id"]]
    return messages


def finish_reason(reason: str, calls: Sequence[ToolCall] | int) -> str:
    """OpenAI's finish reason once a reply has tool calls ("tool_calls" unless it was cut off)."""
    has_calls = calls if isinstance(calls, int) else len(calls)
    return "tool_calls" if has_calls and reason == "stop" else reason


# ---- chat completions ---------------------------------------------------------------------
def chat_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def chat_message(text: str, fmt: ToolFormat | None, parallel: bool) -> tuple[dict[str, Any], int]:
    """The assistant message of a finished reply, and how many tool calls it has."""
    parsed = ParsedOutput(text, []) if fmt is None else fmt.parse(text)
    calls = parsed.tool_calls if parallel else parsed.tool_calls[:1]
    message: dict[str, Any] = {"role": "assistant", "content": parsed.content if (parsed.content or not calls)
                               else None, "refusal": None}
    if calls:
        message["tool_calls"] = [chat_call(c) for c in calls]
    return message, len(calls)


class ChatDeltas:
    """One choice's streamed reply as chat completion deltas (content and tool_calls)."""

    def __init__(self, fmt: ToolFormat | None, parallel: bool) -> None:
        self.stream: ToolCallStream | None = None if fmt is None else fmt.stream()
        self.parallel = parallel
        self.calls = 0

    def feed(self, text: str) -> dict[str, Any] | None:
        if self.stream is None:
            return {"content": text}
        return self._delta(self.stream.feed(text))

    def finish(self) -> dict[str, Any] | None:
        return None if self.stream is None else self._delta(self.stream.finish())

    def _delta(self, deltas: list[Delta]) -> dict[str, Any] | None:
        content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
        calls = []
        for d in deltas:
            if not isinstance(d, ToolCallDelta) or (not self.parallel and d.index > 0):
                continue
            self.calls = max(self.calls, d.index + 1)
            if d.id is not None:
                calls.append({"index": d.index, "id": d.id, "type": "function",
                              "function": {"name": d.name, "arguments": d.arguments}})
            else:
                calls.append({"index": d.index, "function": {"arguments": d.arguments}})
        if not content and not calls:
            return None
        out: dict[str, Any] = {}
        if content:
            out["content"] = content
        if calls:
            out["tool_calls"] = calls
        return out
