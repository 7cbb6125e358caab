"""MemoryStore: the temporary chats' store, the `ChatStore` contract kept in memory.

Temporary chats are never given to the SQLite store (INTERFACES.md); they live here, in the
GUI's memory, and vanish when closed. Same rows, ids, titles, errors and tree rules as
`ConversationStore` (tests/store/test_contract.py runs one suite against both). No Qt, no I/O,
no SQLAlchemy; thread-safe with one lock.
"""
from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from . import export
from .errors import NotFoundError
from .rows import (
    CURRENT_LEAF,
    KV_STATES,
    ROLES,
    SNIPPET_CLOSE,
    SNIPPET_OPEN,
    ConversationDetail,
    ConversationRow,
    CurrentLeaf,
    MessageId,
    MessageRow,
    SearchHit,
    figures_dict,
    tool_steps_list,
)
from .titles import DEFAULT_TITLE, title_from_message

_WORD = re.compile(r"\w+", re.UNICODE)  # the words a search looks for (as the SQLite store's)
_SNIPPET_CONTEXT = 30                   # characters kept either side of the first match
_TITLE_RANK, _MESSAGE_RANK = 2.0, 1.0   # a title match says more (as the SQLite store weighs it)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _json_copy(value: Any, what: str) -> Any:
    """A deep copy through JSON: the values the SQLite store would hand back, or ValueError."""
    try:
        return json.loads(json.dumps(value, ensure_ascii=False, sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be JSON-serialisable: {exc}") from exc


@dataclass
class _Msg:
    id: MessageId
    parent_id: MessageId | None
    depth: int
    role: str
    content: str
    created_at: datetime
    figures: dict[str, Any] | None
    model_name: str | None
    tool_steps: list[dict[str, Any]] | None = None


@dataclass
class _Conv:
    detail: ConversationDetail
    seq: int                                            # creation order (ties in the sidebar)
    messages: dict[MessageId, _Msg] = field(default_factory=dict)


class MemoryStore:
    """See the module docstring. Unknown ids raise `NotFoundError`, bad arguments `ValueError`."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._convs: dict[str, _Conv] = {}
        self._last_id = 0  # message ids and creation order: one counter, always increasing

    def _next(self) -> int:
        self._last_id += 1
        return self._last_id

    def _conv(self, id: str) -> _Conv:
        conv = self._convs.get(id)
        if conv is None:
            raise NotFoundError(f"no conversation {id}")
        return conv

    def _find(self, message_id: MessageId) -> tuple[_Conv, _Msg]:
        for conv in self._convs.values():
            m = conv.messages.get(message_id)
            if m is not None:
                return conv, m
        raise NotFoundError(f"no message {message_id}")

    # --- conversations -----------------------------------------------------------------------
    def list_conversations(self) -> list[ConversationRow]:
        """Every conversation: pinned first, then most recently updated (newest created first)."""
        with self._lock:
            convs = sorted(self._convs.values(),
                           key=lambda c: (not c.detail.pinned, -c.detail.updated_at.timestamp(),
                                          -c.seq))
            return [_row(c.detail) for c in convs]

    def has(self, id: str) -> bool:
        """Whether this store holds the conversation (the window asks which store has a chat)."""
        with self._lock:
            return id in self._convs

    def get_conversation(self, id: str) -> ConversationDetail:
        """One conversation with its model, prompt and settings."""
        with self._lock:
            return self._conv(id).detail

    def create_conversation(self, *, id: str | None = None, title: str | None = None,
                            system_prompt: str = "", model_id: str = "",
                            model_fingerprint: str = "",
                            settings: Mapping[str, Any] | None = None,
                            cache_salt: str | None = None,
                            pinned: bool = False,
                            model_choice: str | None = None) -> ConversationDetail:
        """A new, empty conversation; `title` is a placeholder until the first user message."""
        if id is not None:
            uuid.UUID(id)  # must be a UUID (it names the engine session), as in the SQLite store
        cid = id if id is not None else str(uuid.uuid4())
        now = _now()
        detail = ConversationDetail(
            id=cid, title=(title or "").strip() or DEFAULT_TITLE, pinned=pinned, created_at=now,
            updated_at=now, last_opened_at=None, kv_state="none", kv_bytes=0, model_id=model_id,
            model_fingerprint=model_fingerprint, system_prompt=system_prompt,
            settings=_json_copy(dict(settings or {}), "settings"), cache_salt=cache_salt,
            title_locked=False, current_leaf_id=None, model_choice=model_choice)
        with self._lock:
            if cid in self._convs:
                raise ValueError(f"a conversation with id {cid} already exists")
            self._convs[cid] = _Conv(detail, self._next())
        return detail

    def _update(self, id: str, **changes: Any) -> None:
        with self._lock:
            conv = self._conv(id)
            conv.detail = replace(conv.detail, **changes)

    def rename(self, id: str, title: str) -> None:
        """Set the title and stop deriving it from the first message."""
        title = " ".join(title.split())
        if not title:
            raise ValueError("a title cannot be empty")
        self._update(id, title=title, title_locked=True)

    def set_auto_title(self, id: str, title: str) -> bool:
        """Set a made title unless the user renamed the chat; whether it was set."""
        title = " ".join(title.split())
        if not title:
            raise ValueError("a title cannot be empty")
        with self._lock:
            conv = self._conv(id)
            if conv.detail.title_locked:
                return False
            conv.detail = replace(conv.detail, title=title)
            return True

    def set_pinned(self, id: str, pinned: bool) -> None:
        """Pin or unpin."""
        self._update(id, pinned=bool(pinned))

    def set_kv_state(self, id: str, state: str, bytes: int) -> None:  # noqa: A002
        """Record where the engine keeps this conversation's KV cache and how big it is."""
        if state not in KV_STATES:
            raise ValueError(f"kv state must be one of {sorted(KV_STATES)}, not {state!r}")
        if bytes < 0:
            raise ValueError("kv bytes cannot be negative")
        self._update(id, kv_state=state, kv_bytes=int(bytes))

    def set_cache_salt(self, id: str, salt: str | None) -> None:
        """Record the chat's cache salt (a remote server's per-chat prefix-cache namespace)."""
        if salt is not None and (not isinstance(salt, str) or not 16 <= len(salt) <= 128):
            raise ValueError("a cache salt is a string of 16 to 128 characters")
        self._update(id, cache_salt=salt)

    def set_model(self, id: str, model_id: str, model_choice: str | None) -> None:
        """Record the model the chat runs on now (its name, and what the window loads for it)."""
        self._update(id, model_id=model_id, model_choice=model_choice)

    def mark_opened(self, id: str) -> None:
        """Record that the user opened the conversation now."""
        self._update(id, last_opened_at=_now())

    def update_settings(self, id: str, *, system_prompt: str | None = None,
                        settings: Mapping[str, Any] | None = None) -> None:
        """Replace the system prompt and/or the generation settings."""
        changes: dict[str, Any] = {}
        if system_prompt is not None:
            changes["system_prompt"] = system_prompt
        if settings is not None:
            changes["settings"] = _json_copy(dict(settings), "settings")
        if changes:
            self._update(id, **changes)

    def delete(self, id: str) -> bool:
        """Forget the conversation; whether there was one."""
        with self._lock:
            return self._convs.pop(id, None) is not None

    def pending_engine_deletes(self) -> list[str]:
        """Always empty: a temporary chat's engine session is never saved, so nothing is owed."""
        return []

    def confirm_engine_deleted(self, id: str) -> None:
        """Nothing to forget (see `pending_engine_deletes`)."""

    # --- messages ----------------------------------------------------------------------------
    def _siblings(self, conv: _Conv, m: _Msg) -> list[_Msg]:
        return sorted((s for s in conv.messages.values() if s.parent_id == m.parent_id),
                      key=lambda s: s.id)

    def _message_row(self, conv: _Conv, m: _Msg) -> MessageRow:
        sibs = self._siblings(conv, m)
        return MessageRow(id=m.id, conversation_id=conv.detail.id, parent_id=m.parent_id,
                          depth=m.depth, role=m.role, content=m.content, created_at=m.created_at,
                          figures=_json_copy(m.figures, "figures") if m.figures else m.figures,
                          sibling_index=sibs.index(m), sibling_count=len(sibs),
                          model_name=m.model_name,
                          tool_steps=_json_copy(m.tool_steps, "tool_steps") if m.tool_steps else None)

    def _path(self, conv: _Conv, leaf: MessageId | None) -> list[MessageRow]:
        out: list[MessageRow] = []
        while leaf is not None:
            m = conv.messages[leaf]
            out.append(self._message_row(conv, m))
            leaf = m.parent_id
        out.reverse()
        return out

    def add_message(self, conversation_id: str, role: str, content: str, *,
                    parent_id: MessageId | None | CurrentLeaf = CURRENT_LEAF,
                    figures: Mapping[str, Any] | Any | None = None,
                    model_name: str | None = None,
                    tool_steps: Sequence[Mapping[str, Any]] | None = None) -> MessageRow:
        """Append a message (by default under the current leaf) and make it the current leaf;
        the first user message on a path sets the title unless the user renamed the chat."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {sorted(ROLES)}, not {role!r}")
        figs = figures_dict(figures)
        if figs is not None:
            figs = _json_copy(figs, "figures")
        steps = tool_steps_list(tool_steps)
        if steps is not None:
            steps = _json_copy(steps, "tool_steps")
        with self._lock:
            conv = self._conv(conversation_id)
            parent = conv.detail.current_leaf_id if isinstance(parent_id, CurrentLeaf) else parent_id
            depth = 0
            if parent is not None:
                up = conv.messages.get(parent)
                if up is None:
                    raise NotFoundError(f"no message {parent} in conversation {conversation_id}")
                depth = up.depth + 1
            m = _Msg(self._next(), parent, depth, role, content, _now(), figs, model_name, steps)
            conv.messages[m.id] = m
            changes: dict[str, Any] = {"current_leaf_id": m.id, "updated_at": m.created_at}
            if role == "user" and not conv.detail.title_locked and not any(
                    r.role == "user" for r in self._path(conv, parent)):
                title = title_from_message(content)
                if title:
                    changes["title"] = title
            conv.detail = replace(conv.detail, **changes)
            return self._message_row(conv, m)

    def update_message(self, message_id: MessageId, *, content: str | None = None,
                       figures: Mapping[str, Any] | Any | None = None) -> MessageRow:
        """Replace a message's text and/or figures (e.g. when a streamed reply finishes)."""
        figs = figures_dict(figures)
        if figs is not None:
            figs = _json_copy(figs, "figures")
        with self._lock:
            conv, m = self._find(message_id)
            if content is not None:
                m.content = content
            if figs is not None:
                m.figures = figs
            conv.detail = replace(conv.detail, updated_at=_now())
            return self._message_row(conv, m)

    def active_path(self, conversation_id: str) -> list[MessageRow]:
        """The messages from the root to the current leaf, in order."""
        with self._lock:
            conv = self._conv(conversation_id)
            return self._path(conv, conv.detail.current_leaf_id)

    def siblings(self, message_id: MessageId) -> list[MessageRow]:
        """The message and its alternatives (same parent), oldest first."""
        with self._lock:
            conv, m = self._find(message_id)
            return [self._message_row(conv, s) for s in self._siblings(conv, m)]

    def select_sibling(self, message_id: MessageId) -> list[MessageRow]:
        """Flip to an alternative: the path continues to its most recent descendant."""
        with self._lock:
            conv, m = self._find(message_id)
            below, newest = [m.id], m.id
            while below:  # the newest message in the subtree (ids grow with creation)
                mid = below.pop()
                newest = max(newest, mid)
                below.extend(c.id for c in conv.messages.values() if c.parent_id == mid)
            conv.detail = replace(conv.detail, current_leaf_id=newest)
            return self._path(conv, newest)

    def duplicate(self, conversation_id: str, *, upto_message_id: MessageId | None = None,
                  title: str | None = None) -> ConversationDetail:
        """A new conversation holding the path to `upto_message_id` (default: the current
        leaf), titled `title` (default: the source's title)."""
        with self._lock:
            src = self._conv(conversation_id)
            leaf = src.detail.current_leaf_id if upto_message_id is None else upto_message_id
            if leaf is not None and leaf not in src.messages:
                raise NotFoundError(f"no message {leaf} in conversation {conversation_id}")
            path = self._path(src, leaf)
            now = _now()
            new = _Conv(replace(
                src.detail, id=str(uuid.uuid4()),
                title=src.detail.title if title is None else title,
                title_locked=src.detail.title_locked or title is not None, pinned=False,
                created_at=now, updated_at=now, last_opened_at=None, kv_state="none", kv_bytes=0,
                settings=_json_copy(src.detail.settings, "settings"), current_leaf_id=None),
                self._next())
            parent: MessageId | None = None
            for row in path:
                m = _Msg(self._next(), parent, row.depth, row.role, row.content, row.created_at,
                         row.figures, row.model_name, row.tool_steps)
                new.messages[m.id] = m
                parent = m.id
            new.detail = replace(new.detail, current_leaf_id=parent)
            self._convs[new.detail.id] = new
            return new.detail

    def export_json(self, id: str) -> dict[str, Any]:
        """The whole conversation (all alternatives) as JSON-ready data, as the SQLite store's."""
        with self._lock:
            conv = self._conv(id)
            rows = [self._message_row(conv, m) for m in sorted(conv.messages.values(), key=lambda m: m.id)]
            return export.to_json(conv.detail, rows)

    def search(self, query: str, limit: int = 50) -> list[SearchHit]:
        """Conversations whose title or one message contains every word of `query`, best first."""
        words = [w.lower() for w in _WORD.findall(query)]
        if not words or limit <= 0:
            return []
        hits: list[tuple[float, float, SearchHit]] = []
        with self._lock:
            for conv in self._convs.values():
                d = conv.detail
                rank, snippet = 0.0, ""
                if _contains_all(d.title, words):
                    rank, snippet = _TITLE_RANK, _mark(d.title, words)
                for m in sorted(conv.messages.values(), key=lambda m: -m.id):
                    if _contains_all(m.content, words):
                        rank += _MESSAGE_RANK
                        snippet = _snippet(m.content, words)
                        break
                if rank:
                    hits.append((rank, d.updated_at.timestamp(),
                                 SearchHit(d.id, d.title, snippet, rank)))
        hits.sort(key=lambda h: (h[0], h[1]), reverse=True)
        return [h[2] for h in hits[:limit]]

    def close(self) -> None:
        """Forget every temporary chat."""
        with self._lock:
            self._convs.clear()


def _row(d: ConversationDetail) -> ConversationRow:
    return ConversationRow(d.id, d.title, d.pinned, d.created_at, d.updated_at, d.last_opened_at,
                           d.kv_state, d.kv_bytes)


def _contains_all(text: str, words: list[str]) -> bool:
    low = text.lower()
    return all(w in low for w in words)


def _mark(text: str, words: list[str]) -> str:
    """`text` on one line with each occurrence of the words wrapped in the snippet marks."""
    pattern = re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)),
                         re.IGNORECASE)
    return pattern.sub(lambda m: SNIPPET_OPEN + m.group(0) + SNIPPET_CLOSE, " ".join(text.split()))


def _snippet(text: str, words: list[str]) -> str:
    """The text around the first matched word, marked like the SQLite store's snippets."""
    low = text.lower()
    pos = min(low.find(w) for w in words)
    start, end = max(0, pos - _SNIPPET_CONTEXT), pos + _SNIPPET_CONTEXT + max(map(len, words))
    out = _mark(text[start:end], words)
    return ("\u2026" if start else "") + out + ("\u2026" if end < len(text) else "")
