"""The model a conversation runs on, as the window loads it, so a chat remembers its model.

`conversations.model_id` holds the model's name as the engine reports it; `model_choice` is what
the window loads to run the chat: "" (the default model), a folder under models/, or
"remote:<id>" (a saved server). NULL for conversations made before it was recorded.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("model_choice", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("model_choice")
