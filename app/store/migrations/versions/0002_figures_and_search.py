"""Generation figures as columns; FTS5 full-text search over titles and messages.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels = None
depends_on = None

_TOKENIZE = "unicode61 remove_diacritics 2"

# External-content FTS5 tables: the text lives once, in the real tables; triggers keep the
# indexes in step inside the same transaction as every write. The UPDATE triggers are limited
# to the indexed column, so frequent non-text updates (KV state, leaf, times) cost nothing here.
_SEARCH_DDL = [
    f"""CREATE VIRTUAL TABLE messages_fts USING fts5(
        content, content='messages', content_rowid='id', tokenize='{_TOKENIZE}', prefix='2 3')""",
    """CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END""",
    """CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    END""",
    """CREATE TRIGGER messages_fts_au AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END""",
    f"""CREATE VIRTUAL TABLE conversations_fts USING fts5(
        title, content='conversations', content_rowid='pk', tokenize='{_TOKENIZE}', prefix='2 3')""",
    """CREATE TRIGGER conversations_fts_ai AFTER INSERT ON conversations BEGIN
        INSERT INTO conversations_fts(rowid, title) VALUES (new.pk, new.title);
    END""",
    """CREATE TRIGGER conversations_fts_ad AFTER DELETE ON conversations BEGIN
        INSERT INTO conversations_fts(conversations_fts, rowid, title) VALUES ('delete', old.pk, old.title);
    END""",
    """CREATE TRIGGER conversations_fts_au AFTER UPDATE OF title ON conversations BEGIN
        INSERT INTO conversations_fts(conversations_fts, rowid, title) VALUES ('delete', old.pk, old.title);
        INSERT INTO conversations_fts(rowid, title) VALUES (new.pk, new.title);
    END""",
    # Index what revision 0001 already stored.
    "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
    "INSERT INTO conversations_fts(conversations_fts) VALUES ('rebuild')",
]


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("generated_tokens", sa.Integer, nullable=True))
        batch.add_column(sa.Column("ttft_ms", sa.Float, nullable=True))
        batch.add_column(sa.Column("tokens_per_s", sa.Float, nullable=True))
        batch.add_column(sa.Column("finish_reason", sa.String(32), nullable=True))
        batch.add_column(sa.Column("resumed_from_disk", sa.Boolean, nullable=True))
    # Backfill from the JSON that 0001 kept (same derivation as app/store/queries.py).
    op.execute(
        """UPDATE messages SET
            generated_tokens = json_extract(figures_json, '$.generated_tokens'),
            ttft_ms = json_extract(figures_json, '$.ttft_ms'),
            tokens_per_s = json_extract(figures_json, '$.decode_tokens_per_s'),
            finish_reason = json_extract(figures_json, '$.finish_reason'),
            resumed_from_disk = (json_extract(figures_json, '$.resume') = 'disk')
        WHERE figures_json IS NOT NULL AND json_valid(figures_json)"""
    )
    for statement in _SEARCH_DDL:
        op.execute(statement)


def downgrade() -> None:
    for name in ("conversations_fts_au", "conversations_fts_ad", "conversations_fts_ai",
                 "messages_fts_au", "messages_fts_ad", "messages_fts_ai"):
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute("DROP TABLE IF EXISTS conversations_fts")
    op.execute("DROP TABLE IF EXISTS messages_fts")
    with op.batch_alter_table("messages") as batch:
        for column in ("resumed_from_disk", "finish_reason", "tokens_per_s", "ttft_ms", "generated_tokens"):
            batch.drop_column(column)
