"""Frozen values the store hands out (never ORM objects, so they are safe across threads)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Mapping, TypeAlias

# One id type for messages in both stores (SQLite's integer primary key; the memory store counts).
MessageId: TypeAlias = int

KVState = Literal["none", "memory", "disk"]
Role = Literal["system", "user", "assistant"]

KV_STATES: frozenset[str] = frozenset({"none", "memory", "disk"})
ROLES: frozenset[str] = frozenset({"system", "user", "assistant"})

# Search snippets are plain text; matches are wrapped in these (the GUI may style or strip them).
SNIPPET_OPEN = "\u00ab"   # «
SNIPPET_CLOSE = "\u00bb"  # »


class CurrentLeaf:
    """Sentinel type: "append under the conversation's current leaf"."""

    def __repr__(self) -> str:
        return "CURRENT_LEAF"


CURRENT_LEAF = CurrentLeaf()


@dataclass(frozen=True, slots=True)
class ConversationRow:
    """What the sidebar shows for one conversation."""

    id: str
    title: str
    pinned: bool
    created_at: datetime
    updated_at: datetime
    last_opened_at: datetime | None
    kv_state: str
    kv_bytes: int


@dataclass(frozen=True, slots=True)
class ConversationDetail(ConversationRow):
    """A conversation with everything needed to open it."""

    model_id: str
    model_fingerprint: str
    system_prompt: str
    settings: dict[str, Any] = field(hash=False)
    cache_salt: str | None
    title_locked: bool
    current_leaf_id: MessageId | None
    # What the window loads to run it: "" the default model, a folder under models/,
    # "remote:<id>"; None where it was never recorded (revision 0004).
    model_choice: str | None = None


@dataclass(frozen=True, slots=True)
class MessageRow:
    """One message on a path; `sibling_index`/`sibling_count` count its alternatives."""

    id: MessageId
    conversation_id: str
    parent_id: MessageId | None
    depth: int
    role: str
    content: str
    created_at: datetime
    figures: dict[str, Any] | None = field(hash=False)
    sibling_index: int
    sibling_count: int
    model_name: str | None = None   # the model that wrote it (assistant messages; revision 0003)
    # The tools an assistant reply called on the way to its text (revision 0005): a list of rounds,
    # each {"text": what the model wrote with its calls, "calls": [{"id", "name", "arguments",
    # "server", "status", "result"}, ...]}; None for every other message.
    tool_steps: list[dict[str, Any]] | None = field(default=None, hash=False)


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One conversation matching a search; higher `rank` is better, hits come best first."""

    conversation_id: str
    title: str
    snippet: str
    rank: float


def tool_steps_list(steps: Any) -> list[dict[str, Any]] | None:
    """A message's tool steps as a plain list of dicts (None or empty: none)."""
    if not steps:
        return None
    if not isinstance(steps, (list, tuple)) or not all(isinstance(s, Mapping) for s in steps):
        raise ValueError("tool_steps must be a list of mappings")
    return [dict(s) for s in steps]


def figures_dict(figures: Any) -> dict[str, Any] | None:
    """A message's figures as a plain dict: a mapping, or anything with `to_dict()`."""
    if figures is None:
        return None
    if hasattr(figures, "to_dict"):  # engine.api.GenerationFigures
        figures = figures.to_dict()
    if not isinstance(figures, Mapping):
        raise ValueError("figures must be a mapping (or have to_dict())")
    return dict(figures)
