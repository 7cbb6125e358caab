"""A reply as the Responses API's output items: a message (its text) and function calls, built
as the reply streams in, with the events OpenAI sends for each (output_item.added,
output_text.delta, function_call_arguments.delta, ..., output_item.done)."""
from __future__ import annotations

import uuid
from typing import Any

from engine.text.tool_calls import ContentDelta, Delta, ToolCallDelta, ToolFormat
from .schemas import template_call

Event = tuple[str, dict[str, Any]]     # (event type, its fields)


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseOutput:
    """The output items of one reply. `feed(text)` and `finish(incomplete)` return the events of
    what was added; `items` is the output as it stands. Without a tool format the reply is one
    message, opened at once (`start()`); with one, a message opens at the first text, and each
    tool call is a `function_call` item."""

    def __init__(self, fmt: ToolFormat | None, parallel: bool) -> None:
        self.stream = None if fmt is None else fmt.stream()
        self.parallel = parallel
        self.items: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None    # the item being written
        self.calls_by_index: dict[int, dict[str, Any]] = {}

    # -- what the caller uses
    def start(self) -> list[Event]:
        """Opens the message at once when there is no tool format (the reply is all text)."""
        return self._open_message() if self.stream is None else []

    def feed(self, text: str) -> list[Event]:
        if self.stream is None:
            return self._text(text)
        return self._deltas(self.stream.feed(text))

    def finish(self, incomplete: bool) -> list[Event]:
        events = [] if self.stream is None else self._deltas(self.stream.finish())
        if not self.items:
            events += self._open_message()
        events += self._close(incomplete)
        return events

    @property
    def content(self) -> str:
        return "".join(part["text"] for item in self.items if item["type"] == "message"
                       for part in item["content"])

    def history_message(self) -> dict[str, Any]:
        """The reply as the assistant message a stored chain continues from."""
        calls = [item for item in self.items if item["type"] == "function_call"]
        message: dict[str, Any] = {"role": "assistant", "content": self.content if (self.content or not calls)
                                   else None}
        if calls:
            message["tool_calls"] = [template_call(c["call_id"], c["name"], c["arguments"]) for c in calls]
        return message

    # -- items
    def _where(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"item_id": item["id"], "output_index": self.items.index(item)}

    def _open_message(self) -> list[Event]:
        events = self._close(False)
        item: dict[str, Any] = {"type": "message", "id": new_item_id("msg"), "status": "in_progress",
                                "role": "assistant", "content": []}
        self.items.append(item)
        self.open = item
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        events.append(("response.output_item.added", {"output_index": len(self.items) - 1,
                                                      "item": {**item, "content": []}}))
        item["content"].append(part)
        events.append(("response.content_part.added", {**self._where(item), "content_index": 0,
                                                       "part": dict(part)}))
        return events

    def _text(self, text: str) -> list[Event]:
        events: list[Event] = []
        if self.open is None or self.open["type"] != "message":
            events += self._open_message()
        item = self.open
        assert item is not None
        item["content"][0]["text"] += text
        events.append(("response.output_text.delta", {**self._where(item), "content_index": 0, "delta": text,
                                                      "logprobs": []}))
        return events

    def _deltas(self, deltas: list[Delta]) -> list[Event]:
        events: list[Event] = []
        for d in deltas:
            if isinstance(d, ContentDelta):
                events += self._text(d.text)
            elif isinstance(d, ToolCallDelta) and (self.parallel or d.index == 0):
                if d.id is not None:
                    events += self._close(False)
                    item: dict[str, Any] = {"type": "function_call", "id": new_item_id("fc"), "call_id": d.id,
                                            "name": d.name, "arguments": "", "status": "in_progress"}
                    self.items.append(item)
                    self.open = self.calls_by_index[d.index] = item
                    events.append(("response.output_item.added", {"output_index": len(self.items) - 1,
                                                                  "item": dict(item)}))
                item = self.calls_by_index[d.index]
                if d.arguments:
                    item["arguments"] += d.arguments
                    events.append(("response.function_call_arguments.delta", {**self._where(item),
                                                                              "delta": d.arguments}))
        return events

    def _close(self, incomplete: bool) -> list[Event]:
        item, self.open = self.open, None
        if item is None:
            return []
        item["status"] = "incomplete" if incomplete else "completed"
        where = self._where(item)
        if item["type"] == "message":
            part = item["content"][0]
            return [("response.output_text.done", {**where, "content_index": 0, "text": part["text"],
                                                   "logprobs": []}),
                    ("response.content_part.done", {**where, "content_index": 0, "part": dict(part)}),
                    ("response.output_item.done", {"output_index": where["output_index"], "item": item})]
        return [("response.function_call_arguments.done", {**where, "name": item["name"],
                                                           "arguments": item["arguments"]}),
                ("response.output_item.done", {"output_index": where["output_index"], "item": item})]
