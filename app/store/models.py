"""SQLAlchemy 2 typed ORM mapping of Amber's conversation database (the current schema)."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class UTCTimestamp(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime stored as integer microseconds since the epoch."""

    # Integers sort and compare in SQL, and converting them back is far cheaper than parsing
    # ISO strings: the sidebar lists 10,000 conversations in one query.
    impl = Integer
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> int | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use timezone-aware UTC")
        return to_micros(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return None if value is None else from_micros(value)


def to_micros(value: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    """Aware UTC datetime from microseconds since the Unix epoch."""
    return datetime.fromtimestamp(value / 1_000_000, timezone.utc)


def utcnow() -> datetime:
    """Now, timezone-aware UTC."""
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class Conversation(Base):
    """One conversation; `id` (a UUID string) is also its engine session id."""

    __tablename__ = "conversations"
    __table_args__ = (
        CheckConstraint("kv_state IN ('none', 'memory', 'disk')", name="ck_conversations_kv_state"),
        Index("ix_conversations_sidebar", "pinned", "updated_at"),
    )

    # An INTEGER PRIMARY KEY aliases the rowid, which keeps it stable across VACUUM; the
    # external-content FTS5 index of titles refers to rows by it.
    pk: Mapped[int] = mapped_column(Integer, primary_key=True)
    id: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    title: Mapped[str] = mapped_column(Text, nullable=False, default="")
    title_locked: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    pinned: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCTimestamp, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UTCTimestamp, nullable=False)
    last_opened_at: Mapped[datetime | None] = mapped_column(UTCTimestamp, nullable=True)
    model_id: Mapped[str] = mapped_column(Text, nullable=False, default="")
    model_fingerprint: Mapped[str] = mapped_column(Text, nullable=False, default="")
    # What the window loads to run this chat (revision 0004): "" the default model, a folder
    # under models/, "remote:<id>"; NULL where it was never recorded.
    model_choice: Mapped[str | None] = mapped_column(Text, nullable=True)
    system_prompt: Mapped[str] = mapped_column(Text, nullable=False, default="")
    settings_json: Mapped[str] = mapped_column(Text, nullable=False, default="{}")
    cache_salt: Mapped[str | None] = mapped_column(Text, nullable=True)
    kv_state: Mapped[str] = mapped_column(String(8), nullable=False, default="none")
    kv_bytes: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    # Deliberately not a foreign key: messages already reference conversations, and a cycle
    # would complicate deletes and batch migrations. Kept right by the store, in one transaction.
    current_leaf_id: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Message(Base):
    """One message; edits and regenerations are siblings (same parent, same depth)."""

    __tablename__ = "messages"
    __table_args__ = (
        CheckConstraint("role IN ('system', 'user', 'assistant')", name="ck_messages_role"),
        Index("ix_messages_conversation_parent", "conversation_id", "parent_id"),
        Index("ix_messages_parent", "parent_id"),
        # AUTOINCREMENT: a deleted message's id is never handed out again to a new one.
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    conversation_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False
    )
    parent_id: Mapped[int | None] = mapped_column(
        Integer, ForeignKey("messages.id", ondelete="CASCADE"), nullable=True
    )
    depth: Mapped[int] = mapped_column(Integer, nullable=False)  # position in the conversation
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    content: Mapped[str] = mapped_column(Text, nullable=False, default="")
    created_at: Mapped[datetime] = mapped_column(UTCTimestamp, nullable=False)
    # The full figures the engine reported (JSON), plus the ones worth querying as columns
    # (added by revision 0002; derived from the JSON on every write).
    figures_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    generated_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    ttft_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    tokens_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    finish_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    resumed_from_disk: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    # The model that wrote an assistant message (revision 0003); NULL for older messages and
    # for user messages. Kept per message so a model switch never relabels earlier replies.
    model_name: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The tool calls an assistant reply made and their results (revision 0005; JSON, see
    # rows.MessageRow.tool_steps); NULL for replies without tools and for other messages.
    tool_steps_json: Mapped[str | None] = mapped_column(Text, nullable=True)


class PendingEngineDelete(Base):
    """A deleted conversation whose KV files the engine has not yet confirmed deleting."""

    __tablename__ = "pending_engine_deletes"

    conversation_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    deleted_at: Mapped[datetime] = mapped_column(UTCTimestamp, nullable=False)
