"""Opening the database: checks that never write, pragmas, backup, Alembic migrations."""
from __future__ import annotations

import logging
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import QueuePool, StaticPool

from . import errors
from .errors import StoreError

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
SQLITE_HEADER = b"SQLite format 3\x00"
KEEP_BACKUPS = 5
DEFAULT_BUSY_TIMEOUT_MS = 5000


@dataclass
class Database:
    """The two engines over one file: a single writer connection and a pool of readers."""

    path: Path
    writer: Engine
    reader: Engine
    backup_path: Path | None  # the copy made before this start's migration, if one ran
    in_memory: bool = False   # one connection to a database only in memory (writer is reader)

    def dispose(self) -> None:
        """Close every connection (the WAL is checkpointed when the last one closes; an
        in-memory database is freed)."""
        self.reader.dispose()
        if self.writer is not self.reader:
            self.writer.dispose()


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing into the package; no alembic.ini is read."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def known_revisions() -> set[str]:
    """Every schema revision this version of Amber knows."""
    script = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in script.walk_revisions()}


def head_revision() -> str:
    """The newest schema revision this version of Amber knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def open_database(path: Path | str, *, busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
                  target_revision: str = "head") -> Database:
    """Check, back up and migrate the database at `path`; raise StoreError if it is unusable."""
    path = Path(path).expanduser().absolute()
    _prepare_folder(path)
    existing = path.exists() and path.stat().st_size > 0
    current = _inspect_existing(path, busy_timeout_ms) if existing else None
    writer = _make_engine(path, writer=True, busy_timeout_ms=busy_timeout_ms)
    try:
        backup = _migrate(writer, path, existing, current, target_revision)
    except StoreError:
        writer.dispose()
        raise
    except (DBAPIError, sqlite3.Error, UnicodeDecodeError) as exc:
        writer.dispose()
        raise errors.from_sqlite(exc, path) from exc
    reader = _make_engine(path, writer=False, busy_timeout_ms=busy_timeout_ms)
    return Database(path=path, writer=writer, reader=reader, backup_path=backup)


MEMORY_PATH = Path(":memory:")   # what an in-memory database's errors name as its place


def open_memory_database() -> Database:
    """A fresh database that lives only in memory, migrated to head: nothing reaches the disk
    (no file, no journal, no temporary files) and disposing of it frees its rows. One connection
    serves every thread (SQLite's `:memory:` database belongs to its connection), so the caller
    runs one call at a time on it."""
    engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        dbapi_conn.isolation_level = None                 # we emit BEGIN ourselves, as on a file
        dbapi_conn.execute("PRAGMA foreign_keys = ON")
        dbapi_conn.execute("PRAGMA temp_store = MEMORY")  # sorts and temporary tables too

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    try:
        _migrate(engine, MEMORY_PATH, existing=False, current=None, target="head")
    except BaseException:
        engine.dispose()
        raise
    return Database(path=MEMORY_PATH, writer=engine, reader=engine, backup_path=None, in_memory=True)


def _prepare_folder(path: Path) -> None:
    if path.exists() and not path.is_file():
        raise StoreError(f"{path} is not a file; Amber expected its conversation database there.",
                         path=path, reason="io")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise errors.read_only(path, f"cannot create the folder: {exc.strerror}") from exc
    # SQLite in WAL mode creates -wal and -shm files next to the database.
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise errors.read_only(path, "its folder cannot be written")


def _inspect_existing(path: Path, busy_timeout_ms: int) -> str | None:
    """Read-only checks of an existing file; returns its schema revision (None if blank)."""
    try:
        with open(path, "rb") as f:
            header = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise errors.read_only(path, f"cannot be read: {exc.strerror}") from exc
    if header != SQLITE_HEADER:
        raise errors.corrupt(path, "not a SQLite database")
    if not os.access(path, os.R_OK | os.W_OK):
        raise errors.read_only(path)
    # mode=ro: a file we cannot use must come out of this byte-for-byte unchanged.
    uri = f"file:{quote(str(path))}?mode=ro"
    try:
        probe = sqlite3.connect(uri, uri=True, timeout=busy_timeout_ms / 1000,
                                isolation_level=None)
    except sqlite3.Error as exc:
        raise errors.from_sqlite(exc, path) from exc
    # A damaged file can hold any bytes where text belongs (quick_check's own report quotes
    # them): decode leniently here, so the damage is reported instead of raising mid-check.
    probe.text_factory = lambda raw: raw.decode("utf-8", "replace")
    try:
        check = [row[0] for row in probe.execute("PRAGMA quick_check")]
        if check != ["ok"]:
            raise errors.corrupt(path, "; ".join(str(c) for c in check[:3]))
        tables = {row[0] for row in probe.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "alembic_version" not in tables:
            if tables:  # somebody else's database: never adopt (or overwrite) it
                raise errors.corrupt(path, "it holds tables Amber does not know")
            return None
        revisions = [row[0] for row in probe.execute("SELECT version_num FROM alembic_version")]
        objects = set(probe.execute("SELECT type, name FROM sqlite_master WHERE type IN ('table', 'trigger')"))
    except (sqlite3.Error, UnicodeDecodeError) as exc:   # SQLite's error text can quote damaged bytes
        raise errors.from_sqlite(exc, path) from exc
    finally:
        probe.close()
    if len(revisions) > 1:
        raise errors.corrupt(path, f"several schema revisions {revisions}")
    revision = revisions[0] if revisions else None
    if revision is not None and revision not in known_revisions():
        raise errors.newer(path, revision)
    if revision is not None:
        missing = sorted(expected_schema(revision) - objects)
        if missing:   # a dropped table or trigger: reads would fail later, or search go stale
            raise errors.corrupt(path, "missing " + ", ".join(f"{kind} {name}" for kind, name in missing[:3]))
    return revision


@lru_cache(maxsize=None)
def expected_schema(revision: str) -> frozenset[tuple[str, str]]:
    """(type, name) of every table and trigger a database at `revision` has: the migrations
    themselves, run once on an in-memory database (so this never drifts from them)."""
    engine = create_engine("sqlite://", poolclass=StaticPool)
    try:
        with engine.connect() as conn:
            with conn.begin():
                command.upgrade(alembic_config(conn), revision)
            rows = conn.exec_driver_sql(
                "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'trigger')").fetchall()
    finally:
        engine.dispose()
    return frozenset((str(kind), str(name)) for kind, name in rows)


def _make_engine(path: Path, *, writer: bool, busy_timeout_ms: int) -> Engine:
    url = URL.create("sqlite", database=str(path))
    connect_args: dict[str, Any] = {"check_same_thread": False, "timeout": busy_timeout_ms / 1000}
    if writer:
        # One connection for the process's writes (used by the writer thread only).
        engine = create_engine(url, poolclass=StaticPool, connect_args=connect_args)
    else:
        engine = create_engine(url, poolclass=QueuePool, pool_size=4, max_overflow=8,
                               connect_args=connect_args)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        # We emit BEGIN ourselves: pysqlite's implicit transactions start too late for reads
        # (no snapshot) and too weakly for writes (no IMMEDIATE).
        dbapi_conn.isolation_level = None
        dbapi_conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        dbapi_conn.execute("PRAGMA foreign_keys = ON")
        if writer:
            dbapi_conn.execute("PRAGMA journal_mode = WAL")
            # In WAL mode NORMAL never corrupts and keeps every commit across a process crash;
            # only a power cut may lose the last few commits.
            dbapi_conn.execute("PRAGMA synchronous = NORMAL")
        else:
            dbapi_conn.execute("PRAGMA query_only = ON")

    begin = "BEGIN IMMEDIATE" if writer else "BEGIN"

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # IMMEDIATE takes the write lock up front, so a write never fails half-way on a lock.
        conn.exec_driver_sql(begin)

    return engine


def _migrate(writer: Engine, path: Path, existing: bool, current: str | None,
             target: str) -> Path | None:
    """Back up (if there is something to upgrade) and upgrade, all in one transaction."""
    head = head_revision() if target == "head" else target
    backup: Path | None = None
    with writer.connect() as conn:
        raw = conn.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        # Batch migrations recreate tables; with foreign keys on, dropping the old table would
        # cascade-delete children. SQLite's recipe: keys off, migrate, foreign_key_check, keys on.
        # The pragma is a no-op inside a transaction, hence before BEGIN.
        raw.execute("PRAGMA foreign_keys = OFF")
        try:
            if existing and current != head:
                backup = _backup(raw, path, current)
            try:
                with conn.begin():
                    command.upgrade(alembic_config(conn), target)
                    bad = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if bad and existing and current == head:   # nothing migrated: the file was damaged
                        raise errors.corrupt(path, f"broken references {bad[:3]}")
                    if bad:
                        raise errors.migration_failed(path, backup, f"broken references {bad[:3]}")
            except (StoreError, DBAPIError, sqlite3.Error, UnicodeDecodeError):
                raise
            except Exception as exc:  # a bug in a migration: say so, the transaction rolled back
                raise errors.migration_failed(path, backup, repr(exc)) from exc
        finally:
            raw.execute("PRAGMA foreign_keys = ON")
    if backup is not None:
        log.info("migrated %s from %s to %s; backup at %s", path, current, head, backup)
    return backup


def _backup(raw: sqlite3.Connection, path: Path, revision: str | None) -> Path:
    """A consistent copy (SQLite's online backup, WAL included) next to the database."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.backup-{revision or 'blank'}-{stamp}")
    dest = sqlite3.connect(target)
    try:
        raw.backup(dest)
    finally:
        dest.close()
    old = sorted(path.parent.glob(f"{path.name}.backup-*"), key=lambda p: p.stat().st_mtime)
    for stale in old[:-KEEP_BACKUPS]:
        stale.unlink(missing_ok=True)
    return target
