"""The SQL the SQLite store runs and the row conversions it needs (helpers of store.py)."""
from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, func, insert, or_, select, text
from sqlalchemy.orm import Session

from .errors import NotFoundError
from .models import Conversation, Message
from .rows import ConversationDetail, MessageRow

SIDEBAR_SQL = (
    "SELECT id, title, pinned, created_at, updated_at, last_opened_at, kv_state, kv_bytes "
    "FROM conversations ORDER BY pinned DESC, updated_at DESC, pk DESC"
)
CONVERSATIONS = Conversation.__table__
MESSAGES = Message.__table__

# The path from a leaf up to the root (recursive over the primary key, so cheap).
PATH_IDS = text("""
    WITH RECURSIVE path(id) AS (
        SELECT :leaf
        UNION ALL
        SELECT m.parent_id FROM messages m JOIN path ON m.id = path.id
        WHERE m.parent_id IS NOT NULL
    )
    SELECT id FROM path
""")
HAS_USER_ANCESTOR = text("""
    WITH RECURSIVE path(id, parent_id, role) AS (
        SELECT id, parent_id, role FROM messages WHERE id = :start
        UNION ALL
        SELECT m.id, m.parent_id, m.role FROM messages m JOIN path ON m.id = path.parent_id
    )
    SELECT 1 FROM path WHERE role = 'user' LIMIT 1
""")
# The newest message under (and including) a message: where its branch was last extended.
NEWEST_DESCENDANT = text("""
    WITH RECURSIVE sub(id) AS (
        SELECT :start
        UNION ALL
        SELECT m.id FROM messages m JOIN sub ON m.parent_id = sub.id
    )
    SELECT max(id) FROM sub
""")


def dump_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be JSON-serialisable: {exc}") from exc


def tool_steps_json(steps: list[dict[str, Any]] | None) -> str | None:
    return dump_json(steps, "tool_steps") if steps else None


def figure_columns(figures: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON kept whole, plus the figures worth querying as columns (see models.Message)."""
    if figures is None:
        return {"figures_json": None}
    resume = figures.get("resume")
    return {
        "figures_json": dump_json(figures, "figures"),
        "generated_tokens": figures.get("generated_tokens"),
        "ttft_ms": figures.get("ttft_ms"),
        "tokens_per_s": figures.get("decode_tokens_per_s"),
        "finish_reason": figures.get("finish_reason"),
        "resumed_from_disk": None if resume is None else resume == "disk",
    }


def conversation_row(conn: Connection, id: str) -> Any:
    row = conn.execute(select(CONVERSATIONS).where(Conversation.id == id)).one_or_none()
    if row is None:
        raise NotFoundError(f"no conversation {id}")
    return row


def conversation_for_update(session: Session, id: str) -> Conversation:
    conv = session.scalars(select(Conversation).where(Conversation.id == id)).one_or_none()
    if conv is None:
        raise NotFoundError(f"no conversation {id}")
    return conv


def detail_row(c: Any) -> ConversationDetail:
    """From an ORM object or a Core row (same attribute names)."""
    return ConversationDetail(
        id=c.id, title=c.title, pinned=bool(c.pinned), created_at=c.created_at,
        updated_at=c.updated_at, last_opened_at=c.last_opened_at, kv_state=c.kv_state,
        kv_bytes=c.kv_bytes, model_id=c.model_id, model_fingerprint=c.model_fingerprint,
        system_prompt=c.system_prompt, settings=json.loads(c.settings_json or "{}"),
        cache_salt=c.cache_salt, title_locked=bool(c.title_locked),
        current_leaf_id=c.current_leaf_id, model_choice=c.model_choice,
    )


def message_row(r: Any, index: int, count: int) -> MessageRow:
    return MessageRow(
        id=r.id, conversation_id=r.conversation_id, parent_id=r.parent_id, depth=r.depth,
        role=r.role, content=r.content, created_at=r.created_at,
        figures=json.loads(r.figures_json) if r.figures_json is not None else None,
        sibling_index=index, sibling_count=count, model_name=getattr(r, "model_name", None),
        tool_steps=json.loads(r.tool_steps_json) if getattr(r, "tool_steps_json", None) else None,
    )


def siblings_of(cid: str, parent: int | None) -> Any:
    return (Message.conversation_id == cid) & (
        Message.parent_id.is_(None) if parent is None else Message.parent_id == parent)


def sibling_count(conn: Connection, cid: str, parent: int | None) -> int:
    return conn.scalar(select(func.count()).where(siblings_of(cid, parent))) or 0


def sibling_position(conn: Connection, row: Any) -> tuple[int, int]:
    ids = list(conn.scalars(select(Message.id).where(siblings_of(row.conversation_id,
                                                                   row.parent_id))
                            .order_by(Message.id)))
    return len(ids), ids.index(row.id)


def path_rows(conn: Connection, cid: str, leaf: int | None) -> list[MessageRow]:
    """Root-to-leaf messages with their sibling positions (siblings ordered by creation)."""
    if leaf is None:
        return []
    ids = list(conn.scalars(PATH_IDS, {"leaf": leaf}))
    rows = conn.execute(select(MESSAGES).where(Message.id.in_(ids),
                                                Message.conversation_id == cid)
                        .order_by(Message.depth)).all()
    if not rows:
        return []
    parents = {r.parent_id for r in rows}
    clauses = [Message.parent_id.in_([p for p in parents if p is not None])]
    if None in parents:
        clauses.append(Message.parent_id.is_(None))
    groups: dict[int | None, list[int]] = {}
    for sid, parent in conn.execute(select(Message.id, Message.parent_id)
                                    .where(Message.conversation_id == cid, or_(*clauses))
                                    .order_by(Message.id)):
        groups.setdefault(parent, []).append(sid)
    return [message_row(r, groups[r.parent_id].index(r.id), len(groups[r.parent_id])) for r in rows]


def insert_message(conn: Connection, cid: str, parent: int | None, depth: int, role: str,
                   content: str, created_at: Any, figures: dict[str, Any] | None,
                   model_name: str | None = None, tool_steps: list[dict[str, Any]] | None = None) -> int:
    result = conn.execute(insert(Message).values(
        conversation_id=cid, parent_id=parent, depth=depth, role=role, content=content,
        created_at=created_at, model_name=model_name, tool_steps_json=tool_steps_json(tool_steps),
        **figure_columns(figures)))
    key = result.inserted_primary_key
    assert key is not None  # an INSERT always has one
    return int(key[0])
