"""Alembic environment: runs on the store's own connection (no alembic.ini needed at run time)."""
from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import create_engine

config = context.config
connection = config.attributes.get("connection")


def _run(conn: Any) -> None:
    # Batch mode: SQLite cannot ALTER most things in place; Alembic recreates tables instead.
    # Migrations describe their own frozen schema, so no target_metadata (no autogenerate drift).
    context.configure(connection=conn, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if connection is not None:
    _run(connection)
else:  # developer use: `alembic -c app/store/migrations/alembic.ini -x db=PATH upgrade head`
    db = context.get_x_argument(as_dictionary=True).get("db")
    if not db:
        raise SystemExit("pass -x db=PATH/amber.sqlite3")
    with create_engine(f"sqlite:///{db}").begin() as conn:
        _run(conn)
