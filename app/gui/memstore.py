"""An in-memory conversation store with the same shape as `app.store.ConversationStore`.

Temporary chats are never given to the real store (INTERFACES.md); they live here, in the GUI's
memory, and vanish when closed. It implements the part of the store contract the GUI uses:
message trees with siblings, a current leaf, active paths, sibling flips, duplicate and search.
No Qt, no I/O; thread-safe with one lock.
"""
from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

_ROOT = object()  # "parent_id not given" sentinel: attach to the current leaf


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class ConversationRow:
    id: str
    title: str
    pinned: bool
    created_at: datetime
    updated_at: datetime
    last_opened_at: datetime | None
    kv_state: str = "none"
    kv_bytes: int = 0


@dataclass(frozen=True)
class ConversationDetail(ConversationRow):
    model_id: str = ""
    model_fingerprint: str = ""
    system_prompt: str = ""
    settings: dict = field(default_factory=dict)
    cache_salt: str | None = None
    title_locked: bool = False
    current_leaf_id: str | None = None


@dataclass(frozen=True)
class MessageRow:
    id: str
    conversation_id: str
    parent_id: str | None
    depth: int
    role: str
    content: str
    created_at: datetime
    figures: dict | None
    sibling_index: int
    sibling_count: int
    model_name: str | None = None   # the model that wrote it (as in app.store.rows.MessageRow)


@dataclass(frozen=True)
class SearchHit:
    conversation_id: str
    title: str
    snippet: str
    rank: float


@dataclass
class _Msg:
    id: str
    parent_id: str | None
    depth: int
    role: str
    content: str
    created_at: datetime
    figures: dict | None
    seq: int
    model_name: str | None = None


@dataclass
class _Conv:
    detail: ConversationDetail
    messages: dict[str, _Msg] = field(default_factory=dict)


class MemoryStore:
    """See the module docstring. Raises `KeyError` for unknown ids."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._convs: dict[str, _Conv] = {}
        self._seq = 0

    # --- conversations -----------------------------------------------------------------------
    def list_conversations(self) -> list[ConversationRow]:
        with self._lock:
            rows = [self._row(c.detail) for c in self._convs.values()]
        rows.sort(key=lambda r: r.updated_at, reverse=True)
        rows.sort(key=lambda r: not r.pinned)
        return rows

    @staticmethod
    def _row(d: ConversationDetail) -> ConversationRow:
        return ConversationRow(d.id, d.title, d.pinned, d.created_at, d.updated_at,
                               d.last_opened_at, d.kv_state, d.kv_bytes)

    def has(self, conversation_id: str) -> bool:
        with self._lock:
            return conversation_id in self._convs

    def get_conversation(self, conversation_id: str) -> ConversationDetail:
        with self._lock:
            return self._convs[conversation_id].detail

    def create_conversation(self, *, id: str | None = None, title: str | None = None,
                            system_prompt: str = "", model_id: str = "",
                            model_fingerprint: str = "", settings: dict | None = None,
                            cache_salt: str | None = None, pinned: bool = False,
                            created_at: datetime | None = None) -> ConversationDetail:
        now = created_at or _now()
        cid = id or str(uuid.uuid4())
        detail = ConversationDetail(
            id=cid, title=title or "New chat", pinned=pinned, created_at=now, updated_at=now,
            last_opened_at=None, model_id=model_id, model_fingerprint=model_fingerprint,
            system_prompt=system_prompt, settings=dict(settings or {}), cache_salt=cache_salt,
            title_locked=bool(title))
        with self._lock:
            self._convs[cid] = _Conv(detail)
        return detail

    def _update(self, cid: str, **changes: Any) -> ConversationDetail:
        with self._lock:
            conv = self._convs[cid]
            conv.detail = replace(conv.detail, **changes)
            return conv.detail

    def rename(self, conversation_id: str, title: str) -> None:
        self._update(conversation_id, title=title, title_locked=True)

    def set_pinned(self, conversation_id: str, pinned: bool) -> None:
        self._update(conversation_id, pinned=pinned)

    def set_kv_state(self, conversation_id: str, state: str, bytes: int = 0) -> None:  # noqa: A002
        self._update(conversation_id, kv_state=state, kv_bytes=bytes)

    def set_cache_salt(self, conversation_id: str, salt: str | None) -> None:
        self._update(conversation_id, cache_salt=salt)

    def mark_opened(self, conversation_id: str) -> None:
        self._update(conversation_id, last_opened_at=_now())

    def update_settings(self, conversation_id: str, *, system_prompt: str | None = None,
                        settings: dict | None = None) -> None:
        changes: dict[str, Any] = {}
        if system_prompt is not None:
            changes["system_prompt"] = system_prompt
        if settings is not None:
            changes["settings"] = dict(settings)
        self._update(conversation_id, **changes)

    def delete(self, conversation_id: str) -> None:
        with self._lock:
            self._convs.pop(conversation_id, None)

    def pending_engine_deletes(self) -> list[str]:
        return []

    def confirm_engine_deleted(self, conversation_id: str) -> None:
        return None

    # --- messages ----------------------------------------------------------------------------
    def _message_row(self, conv: _Conv, m: _Msg) -> MessageRow:
        siblings = sorted((s for s in conv.messages.values() if s.parent_id == m.parent_id),
                          key=lambda s: s.seq)
        return MessageRow(m.id, conv.detail.id, m.parent_id, m.depth, m.role, m.content,
                          m.created_at, m.figures, siblings.index(m), len(siblings), m.model_name)

    def add_message(self, conversation_id: str, role: str, content: str, *,
                    parent_id: Any = _ROOT, figures: dict | None = None,
                    model_name: str | None = None) -> MessageRow:
        with self._lock:
            conv = self._convs[conversation_id]
            if parent_id is _ROOT:
                parent_id = conv.detail.current_leaf_id
            depth = 0 if parent_id is None else conv.messages[parent_id].depth + 1
            self._seq += 1
            m = _Msg(str(uuid.uuid4()), parent_id, depth, role, content, _now(), figures, self._seq,
                     model_name)
            conv.messages[m.id] = m
            changes: dict[str, Any] = {"current_leaf_id": m.id, "updated_at": m.created_at}
            if role == "user" and not conv.detail.title_locked and depth <= 1:
                changes["title"] = _title_from(content)
            conv.detail = replace(conv.detail, **changes)
            return self._message_row(conv, m)

    def update_message(self, message_id: str, *, content: str | None = None,
                       figures: dict | None = None) -> None:
        with self._lock:
            for conv in self._convs.values():
                m = conv.messages.get(message_id)
                if m is not None:
                    if content is not None:
                        m.content = content
                    if figures is not None:
                        m.figures = figures
                    return
            raise KeyError(message_id)

    def active_path(self, conversation_id: str) -> list[MessageRow]:
        with self._lock:
            conv = self._convs[conversation_id]
            out: list[MessageRow] = []
            mid = conv.detail.current_leaf_id
            while mid is not None:
                m = conv.messages[mid]
                out.append(self._message_row(conv, m))
                mid = m.parent_id
            out.reverse()
            return out

    def siblings(self, message_id: str) -> list[MessageRow]:
        """The message and its alternatives (same parent), oldest first."""
        with self._lock:
            for conv in self._convs.values():
                m = conv.messages.get(message_id)
                if m is not None:
                    sibs = sorted((s for s in conv.messages.values() if s.parent_id == m.parent_id),
                                  key=lambda s: s.seq)
                    return [self._message_row(conv, s) for s in sibs]
            raise KeyError(message_id)

    def select_sibling(self, message_id: str) -> list[MessageRow]:
        with self._lock:
            for conv in self._convs.values():
                if message_id in conv.messages:
                    leaf = conv.messages[message_id]
                    while True:  # follow the most recent descendant
                        children = [c for c in conv.messages.values() if c.parent_id == leaf.id]
                        if not children:
                            break
                        leaf = max(children, key=lambda c: c.seq)
                    conv.detail = replace(conv.detail, current_leaf_id=leaf.id)
                    return self.active_path(conv.detail.id)
            raise KeyError(message_id)

    def duplicate(self, conversation_id: str, *, upto_message_id: str | None = None,
                  title: str | None = None) -> ConversationDetail:
        path = self.active_path(conversation_id)
        if upto_message_id is not None:
            ids = [m.id for m in path]
            path = path[: ids.index(upto_message_id) + 1]
        src = self.get_conversation(conversation_id)
        new = self.create_conversation(title=title or f"{src.title} (copy)",
                                       system_prompt=src.system_prompt,
                                       model_id=src.model_id, settings=src.settings)
        parent = None
        for m in path:
            parent = self.add_message(new.id, m.role, m.content, parent_id=parent,
                                      figures=m.figures, model_name=m.model_name).id
        return self.get_conversation(new.id)

    def search(self, query: str, limit: int = 50) -> list[SearchHit]:
        q = query.strip().lower()
        hits: list[SearchHit] = []
        if not q:
            return hits
        with self._lock:
            for conv in self._convs.values():
                if q in conv.detail.title.lower():
                    hits.append(SearchHit(conv.detail.id, conv.detail.title, conv.detail.title, 2.0))
                    continue
                for m in conv.messages.values():
                    pos = m.content.lower().find(q)
                    if pos >= 0:
                        start = max(0, pos - 30)
                        end = pos + len(q)
                        # the matched words marked like the real store's snippets (« »)
                        snippet = (m.content[start:pos] + "\u00ab" + m.content[pos:end] + "\u00bb"
                                   + m.content[end:end + 30]).replace("\n", " ")
                        hits.append(SearchHit(conv.detail.id, conv.detail.title, snippet, 1.0))
                        break
        hits.sort(key=lambda h: -h.rank)
        return hits[:limit]

    def close(self) -> None:
        with self._lock:
            self._convs.clear()


def _title_from(text: str, limit: int = 48) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
