"""The tools an assistant reply called on the way to its text, so a chat's next turn shows the
model its earlier tool calls and their results (rendered through its chat template).

`messages.tool_steps_json` holds a JSON list of rounds, each {"text", "calls": [{"id", "name",
"arguments", "server", "status", "result"}]}; NULL for replies without tools and other messages.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("tool_steps_json", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("tool_steps_json")
