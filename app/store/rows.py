"""Frozen values the store hands out (never ORM objects, so they are safe across threads)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

KVState = Literal["none", "memory", "disk"]
Role = Literal["system", "user", "assistant"]

KV_STATES: frozenset[str] = frozenset({"none", "memory", "disk"})
ROLES: frozenset[str] = frozenset({"system", "user", "assistant"})


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
    current_leaf_id: int | None


@dataclass(frozen=True, slots=True)
class MessageRow:
    """One message on a path; `sibling_index`/`sibling_count` count its alternatives."""

    id: int
    conversation_id: str
    parent_id: int | None
    depth: int
    role: str
    content: str
    created_at: datetime
    figures: dict[str, Any] | None = field(hash=False)
    sibling_index: int
    sibling_count: int
    model_name: str | None = None   # the model that wrote it (assistant messages; revision 0003)


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One conversation matching a search; higher `rank` is better, hits come best first."""

    conversation_id: str
    title: str
    snippet: str
    rank: float
