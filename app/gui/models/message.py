"""One message as the view shows it: `MessageItem`, a plain value built off the UI thread, and
its body's HTML. A message's Markdown is rendered here and only here (`body`): on the worker that
loads a chat or runs a turn, and on the UI thread for a message shown before the store has it;
a reply's `<think>` reasoning is split off with the engine's one rule
(`engine.text.reasoning.split_reasoning`) and shown apart, by the bubble's thinking panel."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from engine.text.reasoning import Reply, split_reasoning

from .markdown_render import Rendered, render_message
from . import palette
from .palette import Theme


def reply_of(role: str, content: str) -> Reply | None:
    """A reply split into its reasoning and its answer (None for anything but a reply)."""
    return split_reasoning(content) if role == "assistant" else None


def answer_text(role: str, content: str) -> str:
    """What the message body shows: a reply's answer without its `<think>` reasoning."""
    reply = reply_of(role, content)
    return reply.content if reply is not None else content


def body(role: str, content: str, th: Theme) -> Rendered:
    """The message body's HTML: the user's text as written, a reply's answer as Markdown."""
    return render_message(role, answer_text(role, content), th)


def is_pending(message_id: Any) -> bool:
    """Ids of messages shown before the store has given them their real id."""
    return isinstance(message_id, str) and message_id.startswith("pending:")


@dataclass
class MessageItem:
    """What the view shows for one message (a plain value, built off the UI thread)."""
    id: Any          # the store's message id (int), or "pending:…" until it is known
    role: str
    content: str
    rendered: Rendered | None = None
    sibling_index: int = 0
    sibling_count: int = 1
    figures: dict | None = None
    error: str | None = None
    parent_id: int | None = None   # the store's id of the message it follows
    extra: dict = field(default_factory=dict)
    model_name: str | None = None   # the model that wrote it (stored with the message)
    tool_steps: list[dict] | None = None   # the tools a reply called (rounds of calls and results)

    @property
    def pending(self) -> bool:
        return is_pending(self.id)

    @classmethod
    def from_row(cls, row: Any, th: Theme | None = None) -> "MessageItem":
        """A stored message (rendered with `th`; unrendered without: the bubble renders it)."""
        item = cls(id=row.id, role=row.role, content=row.content,
                   sibling_index=getattr(row, "sibling_index", 0),
                   sibling_count=getattr(row, "sibling_count", 1),
                   figures=getattr(row, "figures", None), parent_id=getattr(row, "parent_id", None),
                   model_name=getattr(row, "model_name", None) or None,
                   tool_steps=getattr(row, "tool_steps", None))
        if th is not None:
            item.render(th)
        return item

    @classmethod
    def shown(cls, message_id: str, role: str, content: str, th: Theme, **fields: Any) -> "MessageItem":
        """A message shown before the store has it (the user's sent text, a stopped reply)."""
        item = cls(id=message_id, role=role, content=content, **fields)
        item.render(th)
        return item

    def render(self, th: Theme) -> Rendered:
        self.rendered = body(self.role, self.content, th)
        return self.rendered


def items_of() -> Callable[[Any], MessageItem]:
    """Stored messages -> view items, rendered in the theme in use now (call it on the UI
    thread; the function it gives runs on a worker)."""
    th = palette.current()
    return lambda row: MessageItem.from_row(row, th)
