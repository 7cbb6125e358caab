"""Initial schema: conversations, messages (a tree), pending engine deletes.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("pk", sa.Integer, primary_key=True),
        sa.Column("id", sa.String(36), nullable=False, unique=True),
        sa.Column("title", sa.Text, nullable=False, server_default=""),
        sa.Column("title_locked", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("pinned", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.Integer, nullable=False),
        sa.Column("last_opened_at", sa.Integer, nullable=True),
        sa.Column("model_id", sa.Text, nullable=False, server_default=""),
        sa.Column("model_fingerprint", sa.Text, nullable=False, server_default=""),
        sa.Column("system_prompt", sa.Text, nullable=False, server_default=""),
        sa.Column("settings_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("cache_salt", sa.Text, nullable=True),
        sa.Column("kv_state", sa.String(8), nullable=False, server_default="none"),
        sa.Column("kv_bytes", sa.Integer, nullable=False, server_default="0"),
        sa.Column("current_leaf_id", sa.Integer, nullable=True),
        sa.CheckConstraint("kv_state IN ('none', 'memory', 'disk')", name="ck_conversations_kv_state"),
    )
    op.create_index("ix_conversations_sidebar", "conversations", ["pinned", "updated_at"])
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "conversation_id",
            sa.String(36),
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("parent_id", sa.Integer, sa.ForeignKey("messages.id", ondelete="CASCADE"), nullable=True),
        sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.Integer, nullable=False),
        sa.Column("figures_json", sa.Text, nullable=True),
        sa.CheckConstraint("role IN ('system', 'user', 'assistant')", name="ck_messages_role"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_messages_conversation_parent", "messages", ["conversation_id", "parent_id"])
    op.create_index("ix_messages_parent", "messages", ["parent_id"])
    op.create_table(
        "pending_engine_deletes",
        sa.Column("conversation_id", sa.String(36), primary_key=True),
        sa.Column("deleted_at", sa.Integer, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pending_engine_deletes")
    op.drop_table("messages")
    op.drop_table("conversations")
