"""The model that wrote each message, stored with it (a model switch no longer relabels replies).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("model_name", sa.Text, nullable=True))
    # Older replies were written by the conversation's model as far as anyone knows: label them
    # with it (NULL where it was never recorded, and for the user's own messages).
    op.execute(
        """UPDATE messages SET model_name = (
               SELECT NULLIF(c.model_id, '') FROM conversations c
               WHERE c.id = messages.conversation_id)
           WHERE role = 'assistant'"""
    )


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("model_name")
