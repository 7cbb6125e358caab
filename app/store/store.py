"""ConversationStore: the synchronous, thread-safe API the GUI uses (no Qt)."""
from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar, cast

from sqlalchemy import Connection, delete, insert, select, text, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from . import errors, export, queries as q, search as fts
from .database import DEFAULT_BUSY_TIMEOUT_MS, Database, open_database, open_memory_database
from .errors import NotFoundError, StoreError
from .models import Conversation, Message, PendingEngineDelete, utcnow
from .rows import (CURRENT_LEAF, KV_STATES, ROLES, ConversationDetail, ConversationRow, CurrentLeaf,
                   MessageRow, SearchHit)
from .rows import figures_dict as _figures_dict
from .rows import tool_steps_list
from .titles import DEFAULT_TITLE, title_from_message
from .writer import Writer

T = TypeVar("T")

class ConversationStore:
    """Amber's conversations in one SQLite file; every method is synchronous and thread-safe.

    Writes run one at a time on a single writer thread, each in one transaction; reads run on
    the calling thread over their own pooled connections and never wait for writes (WAL).

    `in_memory=True` (the temporary chats): the same store on a database kept only in memory,
    freed by `close()`. Its one connection serves reads and writes alike, so reads run on the
    writer thread too; a deleted chat owes the engine nothing (its session is never saved).
    """

    def __init__(self, db_path: Path | str | None = None, *,
                 busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS, in_memory: bool = False) -> None:
        if in_memory:
            if db_path is not None:
                raise ValueError("an in-memory store has no database file")
            self._db: Database = open_memory_database()
        else:
            if db_path is None:
                from engine.base.paths import database_path  # noqa: PLC0415 - the store imports no engine otherwise

                db_path = database_path()
            self._db = open_database(db_path, busy_timeout_ms=busy_timeout_ms)
        self._writer = Writer(self._db.writer, self._db.path)
        self._closed = False
        self._sidebar_cache: dict[tuple[Any, ...], ConversationRow] = {}

    # ----------------------------------------------------------------- lifecycle

    @property
    def path(self) -> Path:
        """The database file."""
        return self._db.path

    @property
    def backup_path(self) -> Path | None:
        """The copy made before this start's schema upgrade (None if no upgrade ran)."""
        return self._db.backup_path

    def close(self) -> None:
        """Finish queued writes and close the database; later calls raise StoreError."""
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        self._db.dispose()

    def __enter__(self) -> ConversationStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, fn: Callable[[Connection], T]) -> T:
        if self._closed:
            raise StoreError(f"The conversation store for {self.path} is closed.",
                             path=self.path, reason="closed")
        if self._db.in_memory:   # one connection: a read waits its turn with the writes
            return self._writer.run(lambda session: fn(session.connection()))
        try:
            with self._db.reader.connect() as conn, conn.begin():  # one snapshot per call
                return fn(conn)
        except (DBAPIError, sqlite3.Error, UnicodeDecodeError) as exc:   # some reads use the raw driver
            raise errors.from_sqlite(exc, self.path) from exc

    def _write(self, fn: Callable[[Session], T]) -> T:
        return self._writer.run(fn)

    # ----------------------------------------------------------------- conversations

    def list_conversations(self) -> list[ConversationRow]:
        """Every conversation for the sidebar: pinned first, then most recently updated."""

        def read(conn: Connection) -> list[ConversationRow]:
            # The hot path of the sidebar (10,000 rows in under 50 ms): plain sqlite3 tuples,
            # conversions inlined, and the frozen rows of the previous call reused for tuples
            # that did not change (after one append, all but one).
            raw = conn.connection.driver_connection
            assert raw is not None
            cache = self._sidebar_cache
            fresh: dict[tuple[Any, ...], ConversationRow] = {}
            rows = []
            make, stamp, utc = ConversationRow, datetime.fromtimestamp, timezone.utc
            for t in raw.execute(q.SIDEBAR_SQL):
                row = cache.get(t)
                if row is None:
                    opened = t[5]
                    row = make(t[0], t[1], t[2] == 1, stamp(t[3] / 1e6, utc),
                               stamp(t[4] / 1e6, utc),
                               None if opened is None else stamp(opened / 1e6, utc), t[6], t[7])
                fresh[t] = row
                rows.append(row)
            self._sidebar_cache = fresh  # one reference swap: safe for concurrent callers
            return rows

        return self._read(read)

    def has(self, id: str) -> bool:
        """Whether this store holds the conversation (the window asks which store has a chat)."""
        stmt = select(Conversation.pk).where(Conversation.id == id)
        return self._read(lambda conn: conn.scalar(stmt) is not None)

    def get_conversation(self, id: str) -> ConversationDetail:
        """One conversation with its model, prompt and settings."""
        return self._read(lambda conn: q.detail_row(q.conversation_row(conn, id)))

    def create_conversation(self, *, id: str | None = None, title: str | None = None,
                            system_prompt: str = "", model_id: str = "",
                            model_fingerprint: str = "", settings: Mapping[str, Any] | None = None,
                            cache_salt: str | None = None, pinned: bool = False,
                            model_choice: str | None = None) -> ConversationDetail:
        """A new, empty conversation; `title` is a placeholder until the first user message."""
        if id is not None:
            uuid.UUID(id)  # must be a UUID (it names the engine session); kept as given
        conv_id = id if id is not None else str(uuid.uuid4())
        settings_json = q.dump_json(dict(settings or {}), "settings")
        now = utcnow()

        def write(session: Session) -> ConversationDetail:
            conv = Conversation(
                id=conv_id, title=(title or "").strip() or DEFAULT_TITLE, title_locked=False,
                pinned=pinned, created_at=now, updated_at=now, last_opened_at=None,
                model_id=model_id, model_fingerprint=model_fingerprint, model_choice=model_choice,
                system_prompt=system_prompt, settings_json=settings_json,
                cache_salt=cache_salt, kv_state="none", kv_bytes=0, current_leaf_id=None,
            )
            session.add(conv)
            try:
                session.flush()
            except IntegrityError as exc:
                raise ValueError(f"a conversation with id {conv_id} already exists") from exc
            return q.detail_row(conv)

        return self._write(write)

    def rename(self, id: str, title: str) -> None:
        """Set the title and stop deriving it from the first message."""
        title = " ".join(title.split())
        if not title:
            raise ValueError("a title cannot be empty")
        self._update_conversation(id, title=title, title_locked=True)

    def set_auto_title(self, id: str, title: str) -> bool:
        """Set a made title unless the user renamed the chat (one conditional UPDATE, so a rename
        that lands first always wins); whether it was set."""
        title = " ".join(title.split())
        if not title:
            raise ValueError("a title cannot be empty")
        stmt = update(Conversation).where(Conversation.id == id, Conversation.title_locked.is_(False)) \
            .values(title=title)

        def write(session: Session) -> bool:
            if cast(CursorResult[Any], session.execute(stmt)).rowcount == 1:
                return True
            q.conversation_for_update(session, id)     # NotFoundError when there is no such chat
            return False

        return self._write(write)

    def set_pinned(self, id: str, pinned: bool) -> None:
        """Pin or unpin (pinned conversations come first in the sidebar)."""
        self._update_conversation(id, pinned=bool(pinned))

    def set_kv_state(self, id: str, state: str, bytes: int) -> None:
        """Record where the engine keeps this conversation's KV cache and how big it is."""
        if state not in KV_STATES:
            raise ValueError(f"kv state must be one of {sorted(KV_STATES)}, not {state!r}")
        if bytes < 0:
            raise ValueError("kv bytes cannot be negative")
        self._update_conversation(id, kv_state=state, kv_bytes=int(bytes))

    def set_cache_salt(self, id: str, salt: str | None) -> None:
        """Record the chat's cache salt (a remote server's per-chat prefix-cache namespace)."""
        if salt is not None and (not isinstance(salt, str) or not 16 <= len(salt) <= 128):
            raise ValueError("a cache salt is a string of 16 to 128 characters")
        self._update_conversation(id, cache_salt=salt)

    def set_model(self, id: str, model_id: str, model_choice: str | None) -> None:
        """Record the model the chat runs on now (its name, and what the window loads for it)."""
        self._update_conversation(id, model_id=model_id, model_choice=model_choice)

    def mark_opened(self, id: str) -> None:
        """Record that the user opened the conversation now."""
        self._update_conversation(id, last_opened_at=utcnow())

    def update_settings(self, id: str, *, system_prompt: str | None = None,
                        settings: Mapping[str, Any] | None = None) -> None:
        """Replace the system prompt and/or the generation settings."""
        values: dict[str, Any] = {}
        if system_prompt is not None:
            values["system_prompt"] = system_prompt
        if settings is not None:
            values["settings_json"] = q.dump_json(dict(settings), "settings")
        if values:
            self._update_conversation(id, **values)

    def _update_conversation(self, id: str, **values: Any) -> None:
        # Only message changes move a conversation in the sidebar (updated_at); renaming,
        # pinning or KV bookkeeping do not.
        stmt = update(Conversation).where(Conversation.id == id).values(**values)

        def write(session: Session) -> None:
            if cast(CursorResult[Any], session.execute(stmt)).rowcount != 1:
                raise NotFoundError(f"no conversation {id}")

        self._write(write)

    # ----------------------------------------------------------------- deleting

    def delete(self, id: str) -> bool:
        """Delete the conversation's rows and record that the engine must delete its KV files.

        Returns whether a conversation was deleted. The GUI then asks the engine to delete the
        session and calls `confirm_engine_deleted(id)`; what is left unconfirmed after a crash
        is listed by `pending_engine_deletes()` at the next start.
        """
        now = utcnow()

        def write(session: Session) -> bool:
            # Both in one transaction: no moment exists with rows gone and nothing recorded.
            gone = cast(CursorResult[Any], session.execute(delete(Conversation).where(Conversation.id == id))).rowcount
            if self._db.in_memory:
                return gone == 1
            session.execute(
                insert(PendingEngineDelete).prefix_with("OR IGNORE").values(
                    conversation_id=id, deleted_at=now))
            return gone == 1

        return self._write(write)

    def pending_engine_deletes(self) -> list[str]:
        """Deleted conversations whose engine session (KV files) is not yet confirmed deleted."""
        stmt = select(PendingEngineDelete.conversation_id).order_by(PendingEngineDelete.deleted_at)
        return self._read(lambda conn: list(conn.scalars(stmt)))

    def confirm_engine_deleted(self, id: str) -> None:
        """The engine has deleted this session's files: forget the pending delete."""
        stmt = delete(PendingEngineDelete).where(PendingEngineDelete.conversation_id == id)

        def write(session: Session) -> None:
            session.execute(stmt)

        self._write(write)

    def orphan_sessions(self, session_ids: Iterable[str]) -> list[str]:
        """Of the engine's saved session ids, those with no conversation (to delete at startup)."""
        wanted = list(dict.fromkeys(session_ids))
        if not wanted:
            return []
        stmt = text("SELECT value FROM json_each(:ids) "
                    "WHERE value NOT IN (SELECT id FROM conversations)")
        return self._read(lambda conn: list(conn.scalars(stmt, {"ids": json.dumps(wanted)})))

    # ----------------------------------------------------------------- messages

    def add_message(self, conversation_id: str, role: str, content: str, *,
                    parent_id: int | None | CurrentLeaf = CURRENT_LEAF,
                    figures: Mapping[str, Any] | Any | None = None,
                    model_name: str | None = None,
                    tool_steps: Sequence[Mapping[str, Any]] | None = None) -> MessageRow:
        """Append a message (by default under the current leaf) and make it the current leaf.

        `parent_id=None` starts a new root (an edit of the first message); a parent that
        already has children makes this message an alternative to them. The first user
        message on a path sets the title unless the user renamed the conversation.
        """
        if role not in ROLES:
            raise ValueError(f"role must be one of {sorted(ROLES)}, not {role!r}")
        figures_dict = _figures_dict(figures)
        columns = q.figure_columns(figures_dict)
        steps = tool_steps_list(tool_steps)
        steps_json = q.tool_steps_json(steps)
        steps = json.loads(steps_json) if steps_json else None   # what a read gives back
        now = utcnow()

        def write(session: Session) -> MessageRow:
            conv = q.conversation_for_update(session, conversation_id)
            parent = conv.current_leaf_id if parent_id is CURRENT_LEAF else cast("int | None", parent_id)
            depth = 0
            if parent is not None:
                found = session.execute(
                    select(Message.conversation_id, Message.depth).where(Message.id == parent)
                ).one_or_none()
                if found is None or found.conversation_id != conversation_id:
                    raise NotFoundError(f"no message {parent} in conversation {conversation_id}")
                depth = found.depth + 1
            result = session.execute(insert(Message).values(
                conversation_id=conversation_id, parent_id=parent, depth=depth, role=role,
                content=content, created_at=now, model_name=model_name, tool_steps_json=steps_json,
                **columns))
            key = cast(CursorResult[Any], result).inserted_primary_key
            assert key is not None     # an INSERT of one row
            message_id = key[0]
            values: dict[str, Any] = {"current_leaf_id": message_id, "updated_at": now}
            if role == "user" and not conv.title_locked:
                is_first = parent is None or session.execute(
                    q.HAS_USER_ANCESTOR, {"start": parent}).first() is None
                title = title_from_message(content) if is_first else None
                if title:
                    values["title"] = title
            session.execute(update(Conversation).where(Conversation.pk == conv.pk).values(**values))
            count = q.sibling_count(session.connection(), conversation_id, parent)
            return MessageRow(
                id=message_id, conversation_id=conversation_id, parent_id=parent, depth=depth,
                role=role, content=content, created_at=now, figures=figures_dict,
                sibling_index=count - 1, sibling_count=count, model_name=model_name, tool_steps=steps,
            )

        return self._write(write)

    def update_message(self, message_id: int, *, content: str | None = None,
                       figures: Mapping[str, Any] | Any | None = None) -> MessageRow:
        """Replace a message's text and/or figures (e.g. when a streamed reply finishes)."""
        values: dict[str, Any] = {}
        if content is not None:
            values["content"] = content
        if figures is not None:
            values.update(q.figure_columns(_figures_dict(figures)))
        now = utcnow()

        def write(session: Session) -> MessageRow:
            conn = session.connection()
            if values:
                done = conn.execute(update(Message).where(Message.id == message_id).values(**values))
                if done.rowcount != 1:
                    raise NotFoundError(f"no message {message_id}")
            row = conn.execute(select(q.MESSAGES).where(Message.id == message_id)).one_or_none()
            if row is None:
                raise NotFoundError(f"no message {message_id}")
            conn.execute(update(Conversation).where(Conversation.id == row.conversation_id)
                         .values(updated_at=now))
            count, index = q.sibling_position(conn, row)
            return q.message_row(row, index, count)

        return self._write(write)

    def active_path(self, conversation_id: str) -> list[MessageRow]:
        """The messages from the root to the current leaf, in order."""

        def read(conn: Connection) -> list[MessageRow]:
            conv = q.conversation_row(conn, conversation_id)
            return q.path_rows(conn, conversation_id, conv.current_leaf_id)

        return self._read(read)

    def siblings(self, message_id: int) -> list[MessageRow]:
        """The message and its alternatives (same parent), oldest first."""

        def read(conn: Connection) -> list[MessageRow]:
            row = conn.execute(select(q.MESSAGES).where(Message.id == message_id)).one_or_none()
            if row is None:
                raise NotFoundError(f"no message {message_id}")
            rows = conn.execute(select(q.MESSAGES).where(
                q.siblings_of(row.conversation_id, row.parent_id)).order_by(Message.id)).all()
            return [q.message_row(r, i, len(rows)) for i, r in enumerate(rows)]

        return self._read(read)

    def select_sibling(self, message_id: int) -> list[MessageRow]:
        """Flip to an alternative: the path continues to its most recent descendant."""

        def write(session: Session) -> list[MessageRow]:
            conn = session.connection()
            cid = conn.scalar(select(Message.conversation_id).where(Message.id == message_id))
            if cid is None:
                raise NotFoundError(f"no message {message_id}")
            leaf = conn.scalar(q.NEWEST_DESCENDANT, {"start": message_id})
            conn.execute(update(Conversation).where(Conversation.id == cid)
                         .values(current_leaf_id=leaf))
            return q.path_rows(conn, cid, leaf)

        return self._write(write)

    def duplicate(self, conversation_id: str, *, upto_message_id: int | None = None,
                  title: str | None = None) -> ConversationDetail:
        """A new conversation holding the path to `upto_message_id` (default: the current leaf),
        titled `title` (default: the source's title)."""
        new_id = str(uuid.uuid4())
        now = utcnow()

        def write(session: Session) -> ConversationDetail:
            conn = session.connection()
            src = q.conversation_row(conn, conversation_id)
            leaf = src.current_leaf_id if upto_message_id is None else upto_message_id
            path = q.path_rows(conn, conversation_id, leaf)
            if upto_message_id is not None and not path:
                raise NotFoundError(f"no message {upto_message_id} in conversation {conversation_id}")
            conv = Conversation(
                id=new_id, title=src.title if title is None else title,
                title_locked=src.title_locked or title is not None, pinned=False,
                created_at=now, updated_at=now, last_opened_at=None, model_id=src.model_id,
                model_fingerprint=src.model_fingerprint, model_choice=src.model_choice,
                system_prompt=src.system_prompt,
                settings_json=src.settings_json, cache_salt=src.cache_salt, kv_state="none",
                kv_bytes=0, current_leaf_id=None,
            )
            session.add(conv)
            session.flush()
            parent: int | None = None
            for msg in path:
                parent = q.insert_message(conn, new_id, parent, msg.depth, msg.role, msg.content,
                                         msg.created_at, msg.figures, msg.model_name, msg.tool_steps)
            conv.current_leaf_id = parent
            session.flush()
            return q.detail_row(conv)

        return self._write(write)

    # ----------------------------------------------------------------- search and export

    def search(self, query: str, limit: int = 50) -> list[SearchHit]:
        """Conversations whose title or messages match `query`, best first, with snippets."""
        return self._read(lambda conn: fts.search(conn, query, limit))

    def export_markdown(self, id: str) -> str:
        """The conversation's active path as Markdown."""
        detail = self.get_conversation(id)
        return export.to_markdown(detail, self.active_path(id))

    def export_json(self, id: str) -> dict[str, Any]:
        """The whole conversation (all alternatives, no KV state) as JSON-ready data."""

        def read(conn: Connection) -> dict[str, Any]:
            detail = q.detail_row(q.conversation_row(conn, id))
            rows = conn.execute(select(q.MESSAGES).where(Message.conversation_id == id)
                                .order_by(Message.id)).all()
            return export.to_json(detail, [q.message_row(r, 0, 1) for r in rows])

        return self._read(read)

    def import_json(self, data: Mapping[str, Any] | str | bytes) -> ConversationDetail:
        """Import an `export_json` result as a new conversation (new id, no KV state)."""
        parsed = export.parse_json(dict(data) if isinstance(data, Mapping) else data)
        settings_json = q.dump_json(parsed.settings, "settings")
        new_id = str(uuid.uuid4())

        def write(session: Session) -> ConversationDetail:
            conv = Conversation(
                id=new_id, title=parsed.title.strip() or DEFAULT_TITLE,
                title_locked=parsed.title_locked, pinned=False, created_at=parsed.created_at,
                updated_at=parsed.updated_at, last_opened_at=None, model_id=parsed.model_id,
                model_fingerprint=parsed.model_fingerprint, system_prompt=parsed.system_prompt,
                settings_json=settings_json, cache_salt=None, kv_state="none", kv_bytes=0,
                current_leaf_id=None,
            )
            session.add(conv)
            session.flush()
            conn = session.connection()
            ids: dict[int, int] = {}
            depths: dict[int, int] = {}
            for msg in parsed.messages:
                parent = ids[msg.parent_key] if msg.parent_key is not None else None
                depth = depths[msg.parent_key] + 1 if msg.parent_key is not None else 0
                ids[msg.key] = q.insert_message(conn, new_id, parent, depth, msg.role,
                                               msg.content, msg.created_at, msg.figures,
                                               msg.model_name, msg.tool_steps)
                depths[msg.key] = depth
            if parsed.current_leaf_key is not None:
                conv.current_leaf_id = ids[parsed.current_leaf_key]
            session.flush()
            return q.detail_row(conv)

        return self._write(write)
